/** Reads a YAML or JSON file given to the emulator and validates it, with errors at `file:line:col`. */
import { readFileSync } from 'node:fs';
import type * as z from 'zod';
import { GenpipeError } from '../api/errors.js';
import { loadYamlAs, YamlSyntaxError } from '../util/yaml-source.js';

export function readConfigDocument<T>(path: string, schema: z.ZodType<T>, what: string): T {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new GenpipeError(
      'invalid_input',
      `Cannot read the ${what} ${path}: ${(error as NodeJS.ErrnoException).code ?? 'unknown error'}.`,
    );
  }
  try {
    return loadYamlAs(text, path, schema, { maxBytes: 1024 * 1024, unknownKeyMessage: 'unknown field' });
  } catch (error) {
    if (error instanceof YamlSyntaxError)
      throw new GenpipeError('invalid_input', `Invalid ${what}: ${error.message.split('\n')[0] ?? ''}.`);
    throw error;
  }
}
