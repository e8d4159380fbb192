/**
 * Turns zod issues into located manifest problems: every issue at its `file:line:col`, the right
 * branch of a union chosen, and unknown keys answered with the nearest valid key.
 */
import type * as z from 'zod';
import { bestBranch, clip, formatPath, knownKeysAt, metaAt, projectMessage, valueAt, type FieldWords } from '../util/zod-issues.js';
import type { YamlSource } from '../util/yaml-source.js';
import type { ManifestProblem } from './errors.js';
import { Suggester } from '../util/suggest.js';

type Issue = z.core.$ZodIssue;

/**
 * With many unknown keys in one mapping, the valid keys are listed once, with the first of them;
 * every key echoed is clipped, and suggestions come from one bounded Suggester.
 */
export function problemsFromZod(
  error: z.ZodError,
  source: YamlSource,
  schema: z.ZodType,
  prefix: readonly PropertyKey[] = [],
  suggester = new Suggester(),
): ManifestProblem[] {
  const out: ManifestProblem[] = [];
  const visit = (issue: Issue, base: readonly PropertyKey[]): void => {
    const path = [...base, ...issue.path];
    if (issue.code === 'invalid_union' && 'errors' in issue && issue.errors.length > 0) {
      for (const inner of bestBranch(issue.errors)) visit(inner, path);
      return;
    }
    if (issue.code === 'unrecognized_keys') {
      const known = knownKeysAt(schema, path.slice(prefix.length));
      let listed = false;
      for (const key of issue.keys) {
        const suggestion = suggester.nearest(key, known);
        let hint = '';
        if (suggestion) hint = `; did you mean "${suggestion}"?`;
        else if (known.length > 0 && !listed) {
          hint = `; valid keys are ${known.join(', ')}`;
          listed = true;
        }
        out.push({
          location: source.locate([...path, key], true),
          path: formatPath([...path, key]),
          message: `unknown key ${JSON.stringify(clip(key))}${hint}`,
        });
      }
      return;
    }
    if (issue.code === 'invalid_key') {
      const inner = 'issues' in issue ? issue.issues[0] : undefined;
      out.push({ location: source.locate(path, true), path: formatPath(path), message: inner?.message ?? issue.message });
      return;
    }
    const words = metaAt(schema, path.slice(prefix.length)) as FieldWords;
    out.push({ location: source.locate(path), path: formatPath(path), message: projectMessage(issue, valueAt(source.value, path), words) });
  };
  for (const issue of error.issues) visit(issue, prefix);
  return out;
}
