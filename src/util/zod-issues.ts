import type * as z from 'zod';
import type { InputIssue } from '../api/errors.js';

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

/** One InputIssue per zod issue (one per unknown key), each naming the offending field. */
export function issuesFromZod(error: z.ZodError): InputIssue[] {
  const out: InputIssue[] = [];
  for (const issue of error.issues) {
    if (issue.code === 'unrecognized_keys') {
      for (const key of issue.keys) out.push({ path: formatPath([...issue.path, key]), message: 'unknown field' });
    } else {
      out.push({ path: formatPath(issue.path), message: issue.message });
    }
  }
  return out;
}
