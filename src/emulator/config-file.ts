/** Reads a YAML or JSON file given to the emulator and validates it, with errors at `file:line:col`. */
import { readFileSync } from 'node:fs';
import type * as z from 'zod';
import { GenpipeError } from '../api/errors.js';
import { formatLocation, loadYaml, YamlSyntaxError } from '../util/yaml-source.js';
import { formatPath } from '../util/zod-issues.js';

export function readConfigDocument<T>(path: string, schema: z.ZodType<T>, what: string): T {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new GenpipeError('invalid_input', `Cannot read the ${what} ${path}: ${(error as NodeJS.ErrnoException).code ?? 'unknown error'}.`);
  }
  let source;
  try {
    source = loadYaml(text, path, { maxBytes: 1024 * 1024 });
  } catch (error) {
    if (error instanceof YamlSyntaxError) throw new GenpipeError('invalid_input', `Invalid ${what}: ${error.message.split('\n')[0] ?? ''}.`);
    throw error;
  }
  const parsed = schema.safeParse(source.value ?? {});
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0]!;
  const unknown = issue.code === 'unrecognized_keys' ? issue.keys[0] : undefined;
  const issuePath = unknown === undefined ? issue.path : [...issue.path, unknown];
  const where = formatLocation(source.locate(issuePath, unknown !== undefined));
  const message = unknown === undefined ? issue.message : 'unknown field';
  throw new GenpipeError('invalid_input', `Invalid ${what}: ${where}: ${formatPath(issuePath) || '(document)'}: ${message}.`);
}
