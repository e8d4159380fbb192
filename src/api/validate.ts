import type * as z from 'zod';
import { InvalidInputError } from './errors.js';
import { issuesFromZod } from '../util/zod-issues.js';

/** Parses `value` with a wire schema, or throws an InvalidInputError naming every offending field in the project's words. */
export function validateBody<T>(schema: z.ZodType<T>, value: unknown, what: string): T {
  const parsed = schema.safeParse(value);
  if (!parsed.success) throw new InvalidInputError(what, issuesFromZod(parsed.error, schema, { input: value }));
  return parsed.data;
}
