import type * as z from 'zod';
import type { InputIssue } from '../api/errors.js';
import { nearest } from './suggest.js';

/** Longest piece of user-written text (a key, a name) echoed in an error message, in characters. */
export const MAX_ECHO_CHARS = 48;

/** Shortens user-written text for an error message: its start, an ellipsis and its full length. */
export function clip(text: string, max: number = MAX_ECHO_CHARS): string {
  return text.length <= max ? text : `${text.slice(0, max)}…(${text.length} chars)`;
}

/** Formats a zod path the way users write it: `selection.hair[0]`; a long key is clipped. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else out += out === '' ? clip(String(key)) : `.${clip(String(key))}`;
  }
  return out;
}

/**
 * One InputIssue per zod issue (one per unknown key), each naming the offending field. Given the
 * schema, an unknown key gets the nearest valid one: `unknown field; did you mean "variation_index"?`.
 */
export function issuesFromZod(error: z.ZodError, schema?: z.ZodType): InputIssue[] {
  const out: InputIssue[] = [];
  for (const issue of error.issues) {
    if (issue.code === 'unrecognized_keys') {
      const known = schema ? knownKeysAt(schema, issue.path) : [];
      for (const key of issue.keys) {
        const suggestion = nearest(key, known);
        out.push({
          path: formatPath([...issue.path, key]),
          message: suggestion ? `unknown field; did you mean "${suggestion}"?` : 'unknown field',
        });
      }
    } else {
      out.push({ path: formatPath(issue.path), message: issue.message });
    }
  }
  return out;
}

type Def = {
  type: string;
  shape?: Record<string, z.ZodType>;
  valueType?: z.ZodType;
  innerType?: z.ZodType;
  options?: z.ZodType[];
  element?: z.ZodType;
};
const defOf = (schema: z.ZodType): Def => (schema as unknown as { _zod: { def: Def } })._zod.def;

/** The keys an object schema accepts at `path`, or [] when the path does not lead to one. */
export function knownKeysAt(schema: z.ZodType, path: readonly PropertyKey[]): string[] {
  const candidates = resolve(schema, path);
  return [...new Set(candidates.flatMap((s) => Object.keys(defOf(s).shape ?? {})))];
}

function resolve(schema: z.ZodType, path: readonly PropertyKey[]): z.ZodType[] {
  const def = defOf(schema);
  if (def.innerType && ['optional', 'nullable', 'default', 'prefault', 'readonly', 'catch', 'nonoptional'].includes(def.type))
    return resolve(def.innerType, path);
  if (def.type === 'union' && def.options) return def.options.flatMap((o) => resolve(o, path));
  if (path.length === 0) return def.type === 'object' ? [schema] : [];
  const [head, ...rest] = path;
  if (def.type === 'object' && def.shape && typeof head === 'string' && def.shape[head]) return resolve(def.shape[head], rest);
  if (def.type === 'record' && def.valueType) return resolve(def.valueType, rest);
  if (def.type === 'array' && def.element && typeof head === 'number') return resolve(def.element, rest);
  return [];
}
