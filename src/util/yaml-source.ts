/**
 * Safe YAML loading that remembers where every node came from, so that a schema error can name
 * `file:line:col`. Core schema only, unique keys, a small alias budget, a size cap, and warnings
 * treated as errors.
 */
import { isMap, isScalar, isSeq, LineCounter, parseDocument, type Document, type Node as YamlNode } from 'yaml';
import type * as z from 'zod';
import { formatPath } from './zod-issues.js';

export interface SourceLocation {
  file: string;
  line: number;
  col: number;
}

export interface YamlSource {
  file: string;
  value: unknown;
  /**
   * Location of the node at `path`, or of its nearest existing ancestor. With `atKey`, the last
   * step points at the key itself rather than its value (for "unknown key" errors).
   */
  locate(path: readonly PropertyKey[], atKey?: boolean): SourceLocation;
}

export interface YamlProblem {
  location: SourceLocation;
  message: string;
}

export class YamlSyntaxError extends Error {
  override readonly name = 'YamlSyntaxError';
  constructor(readonly problems: readonly YamlProblem[]) {
    super(problems.map((p) => `${formatLocation(p.location)}: ${p.message}`).join('\n'));
  }
}

export interface YamlLoadOptions {
  /** Largest accepted document, in bytes. */
  maxBytes?: number;
  /** Largest number of alias nodes resolved (alias bombs). */
  maxAliasCount?: number;
}

export const formatLocation = (loc: SourceLocation): string => `${loc.file}:${loc.line}:${loc.col}`;

export function loadYaml(text: string, file: string, options: YamlLoadOptions = {}): YamlSource {
  const maxBytes = options.maxBytes ?? 4 * 1024 * 1024;
  const size = Buffer.byteLength(text, 'utf8');
  if (size > maxBytes) {
    throw new YamlSyntaxError([{ location: { file, line: 1, col: 1 }, message: `the file is ${size} bytes, over the limit of ${maxBytes}` }]);
  }
  const lineCounter = new LineCounter();
  const doc: Document.Parsed = parseDocument(text, { schema: 'core', uniqueKeys: true, lineCounter, prettyErrors: false, strict: true, customTags: [] });
  const at = (offset: number): SourceLocation => {
    const pos = lineCounter.linePos(offset);
    return { file, line: pos.line, col: pos.col };
  };
  const problems: YamlProblem[] = [...doc.errors, ...doc.warnings].map((e) => ({ location: at(e.pos[0]), message: e.message.split('\n')[0] ?? e.message }));
  if (problems.length > 0) throw new YamlSyntaxError(problems);
  let value: unknown;
  try {
    value = doc.toJS({ maxAliasCount: options.maxAliasCount ?? 50 });
  } catch (error) {
    throw new YamlSyntaxError([{ location: at(0), message: (error as Error).message }]);
  }
  return {
    file,
    value,
    locate(path, atKey = false) {
      let node: unknown = doc.contents;
      let best: YamlNode | null = doc.contents;
      for (const [index, key] of path.entries()) {
        if (isMap(node)) {
          const pair = node.items.find((item) => isScalar(item.key) && String(item.key.value) === String(key));
          if (!pair) break;
          const last = index === path.length - 1;
          best = ((last && atKey) || pair.value == null ? pair.key : pair.value) as YamlNode;
          node = pair.value;
        } else if (isSeq(node) && typeof key === 'number') {
          node = node.items[key];
          if (!node) break;
          best = node as YamlNode;
        } else break;
      }
      return at(best?.range?.[0] ?? 0);
    },
  };
}

/**
 * Loads YAML text and validates it with a zod schema. A syntax error, or the first schema problem
 * located at its node, is thrown as a YamlSyntaxError whose message reads `file:line:col: path: ...`.
 */
export function loadYamlAs<T>(text: string, file: string, schema: z.ZodType<T>, options: YamlLoadOptions & { unknownKeyMessage?: string } = {}): T {
  const source = loadYaml(text, file, options);
  const parsed = schema.safeParse(source.value ?? {});
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const unknown = issue?.code === 'unrecognized_keys' ? issue.keys[0] : undefined;
  const path = unknown === undefined ? (issue?.path ?? []) : [...(issue?.path ?? []), unknown];
  const message = unknown === undefined ? (issue?.message ?? 'invalid') : (options.unknownKeyMessage ?? 'unknown key');
  throw new YamlSyntaxError([{ location: source.locate(path, unknown !== undefined), message: `${formatPath(path) || '(document)'}: ${message}` }]);
}
