import type * as z from 'zod';
import type { InputIssue } from '../api/errors.js';

/** Formats a zod path the way users write it: `selection.hair[0]`. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else out += out === '' ? String(key) : `.${String(key)}`;
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
