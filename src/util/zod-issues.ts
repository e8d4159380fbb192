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
export function issuesFromZod(error: z.ZodError, schema?: z.ZodType, words?: { input: unknown }): InputIssue[] {
  const out: InputIssue[] = [];
  for (const issue of error.issues) {
    if (words && issue.code === 'invalid_union' && issue.errors.length > 0) {
      // The branch the value was meant for, in the project's words rather than "Invalid input".
      const inner = bestBranch(issue.errors);
      for (const sub of inner)
        out.push({
          path: formatPath([...issue.path, ...sub.path]),
          message: projectMessage(sub, valueAt(words.input, [...issue.path, ...sub.path])),
        });
      continue;
    }
    if (issue.code === 'unrecognized_keys') {
      const known = schema ? knownKeysAt(schema, issue.path) : [];
      for (const key of issue.keys) {
        const suggestion = nearest(key, known);
        if (words)
          out.push({
            path: formatPath([...issue.path, key]),
            message: `unknown key ${JSON.stringify(clip(key))}${suggestion ? `; did you mean "${suggestion}"?` : known.length > 0 ? `; valid keys are ${known.join(', ')}` : ''}`,
            atKey: true,
          });
        else
          out.push({
            path: formatPath([...issue.path, key]),
            message: suggestion ? `unknown field; did you mean "${suggestion}"?` : 'unknown field',
          });
      }
    } else {
      out.push({ path: formatPath(issue.path), message: words ? projectMessage(issue, valueAt(words.input, issue.path)) : issue.message });
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

/** The `.meta()` of the schema at `path` (of its wrappers or the schema they wrap), merged; {} when none. */
export function metaAt(schema: z.ZodType, path: readonly PropertyKey[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const node of chainAt(schema, path)) Object.assign(out, { ...(node.meta() ?? {}), ...out });
  return out;
}

/** The schemas at `path`: each wrapper (optional, nullable...) and what it wraps, outermost first, of the first union branch that has the path. */
function chainAt(schema: z.ZodType, path: readonly PropertyKey[]): z.ZodType[] {
  const def = defOf(schema);
  if (def.innerType && ['optional', 'nullable', 'default', 'prefault', 'readonly', 'catch', 'nonoptional'].includes(def.type))
    return [schema, ...chainAt(def.innerType, path)];
  if (def.type === 'pipe') return [schema, ...chainAt((def as unknown as { in: z.ZodType }).in, path)];
  if (path.length === 0) return [schema];
  if (def.type === 'union' && def.options) {
    for (const option of def.options) {
      const found = chainAt(option, path);
      if (found.length > 0) return found;
    }
    return [];
  }
  const [head, ...rest] = path;
  if (def.type === 'object' && def.shape && typeof head === 'string' && def.shape[head]) return chainAt(def.shape[head], rest);
  if (def.type === 'record' && def.valueType) return chainAt(def.valueType, rest);
  if (def.type === 'array' && def.element && typeof head === 'number') return chainAt(def.element, rest);
  return [];
}

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

type Issue = z.core.$ZodIssue;

/** Picks the union branch the value was meant for: the one that got furthest into it. */
export function bestBranch(branches: readonly (readonly Issue[])[]): readonly Issue[] {
  let best: readonly Issue[] = branches[0] ?? [];
  let bestScore = -1;
  for (const branch of branches) {
    const rootTypeMismatch = branch.some((i) => i.path.length === 0 && i.code === 'invalid_type');
    const depth = Math.max(0, ...branch.map((i) => i.path.length));
    const score = (rootTypeMismatch ? 0 : 1000) + depth * 10 - branch.length;
    if (score > bestScore) {
      best = branch;
      bestScore = score;
    }
  }
  return best;
}

/** The value at `path` inside `input`, or undefined. */
export function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let value = input;
  for (const key of path) {
    if (value === null || typeof value !== 'object' || !Object.hasOwn(value, key)) return undefined;
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value;
}

/** How a field is spoken of in messages, from its schema's `.meta()`: "a number of US dollars", and an example value. */
export interface FieldWords {
  /** What the field holds, as a noun phrase: "a number of US dollars". */
  expects?: string | undefined;
  /** Values that would be accepted (JSON Schema's `examples`); the first is shown as "like 15". */
  examples?: readonly unknown[] | undefined;
}

/** zod's own wording, which a message in the project's words replaces ("Invalid input: expected number"). */
const ZOD_DEFAULT = /^(Invalid (input|option|string|key|value|element|URL|union)|Too (small|big)|Unrecognized key|Expected )/;

const NOUNS: Record<string, string> = {
  number: 'a number',
  int: 'a whole number',
  string: 'text',
  boolean: 'true or false',
  array: 'a list',
  object: 'a mapping of keys to values',
  record: 'a mapping of keys to values',
  null: 'null',
};

const exampleText = (example: unknown): string => (typeof example === 'string' ? example : JSON.stringify(example));

const oneOf = (values: readonly unknown[]): string =>
  values.map((v) => (typeof v === 'string' && /^[\w./-]+$/.test(v) ? v : JSON.stringify(v))).join(', ');

/**
 * One zod issue as the project says it: "must be a number of US dollars, like 15", "must be one of
 * normal, freak, total (did you mean dogs?)", "must be at least 1". A message the schema itself
 * gives (a refine's, a regex's) is kept as written. `received` is the value found at the issue's
 * path, for the did-you-mean of a misspelt option.
 */
export function projectMessage(issue: Issue, received: unknown, words: FieldWords = {}): string {
  const example = words.examples?.[0];
  const like = example === undefined ? '' : `, like ${exampleText(example)}`;
  if (issue.code === 'invalid_type') {
    const noun = words.expects ?? NOUNS[issue.expected] ?? issue.expected;
    if (received === undefined) return `is required: ${noun}${like}`;
    return `must be ${noun}${like}`;
  }
  if (!ZOD_DEFAULT.test(issue.message)) return issue.message;
  switch (issue.code) {
    case 'invalid_value': {
      if (issue.values.length === 1) return `must be ${oneOf(issue.values)}`;
      const options = issue.values.filter((v): v is string => typeof v === 'string');
      const suggestion = typeof received === 'string' ? nearest(received, options) : undefined;
      return `must be one of ${oneOf(issue.values)}${suggestion ? ` (did you mean ${suggestion}?)` : ''}`;
    }
    case 'too_small':
    case 'too_big': {
      const bound = Number(issue.code === 'too_small' ? issue.minimum : issue.maximum);
      const small = issue.code === 'too_small';
      if (issue.origin === 'string') {
        if (small && bound === 1) return 'must not be empty';
        return `must be ${small ? 'at least' : 'at most'} ${bound} characters long`;
      }
      if (issue.origin === 'array' || issue.origin === 'set') {
        if (small && bound === 1) return 'needs at least one entry';
        return `${small ? 'needs at least' : 'may have at most'} ${bound} entries`;
      }
      if (!issue.inclusive) return `must be ${small ? 'more' : 'less'} than ${bound}`;
      return `must be ${small ? 'at least' : 'at most'} ${bound}`;
    }
    case 'not_multiple_of':
      return `must be a multiple of ${String(issue.divisor)}`;
    case 'invalid_format':
      return issue.format === 'url' ? 'must be a URL' : `must be ${words.expects ?? `text in the ${issue.format} format`}${like}`;
    default:
      return words.expects ? `must be ${words.expects}${like}` : issue.message;
  }
}
