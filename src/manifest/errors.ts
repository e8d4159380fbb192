import { GenpipeError } from '../api/errors.js';
import { formatLocation, type SourceLocation } from '../util/yaml-source.js';
import { clip } from '../util/zod-issues.js';

/** One located problem in a manifest (or a file it reads, such as a CSV). */
export interface ManifestProblem {
  location: SourceLocation;
  /** Where in the document, such as `steps.sheets.matrix.seed`. */
  path: string;
  message: string;
  /** What kind of problem, for `genpipe validate --json` (see PROBLEM_CODES); "invalid" when unset. */
  code?: ProblemCode | undefined;
  /**
   * A second place the problem concerns: a value of a sweep is located at the value in the matrix
   * list, and `also` is the template that reads it.
   */
  also?: { location: SourceLocation; path: string; instances?: number | undefined } | undefined;
}

/**
 * The kinds of manifest problems `genpipe validate --json` names: YAML syntax, the schema, a
 * reference between parts (steps, templates, vars, env), a missing or unreadable file (manifest,
 * CSV, local image), a CSV file's contents, a sweep axis, an unset environment variable, one
 * instance's request, an empty CSV cell, a file-name clash, a price (a formula, or a request no
 * price table row matches), a budget rule, a notify target, a size limit; "invalid" for the rest.
 */
export const PROBLEM_CODES = [
  'yaml',
  'schema',
  'reference',
  'missing_file',
  'unreadable_file',
  'csv',
  'axis',
  'env',
  'instance',
  'empty_cell',
  'file_name',
  'price',
  'budget',
  'notify',
  'too_large',
  'invalid',
] as const;
export type ProblemCode = (typeof PROBLEM_CODES)[number];

/** `file:line:col`, or the file alone for a problem about the whole file (line 0: it is missing, say). */
const formatWhere = (location: SourceLocation): string => (location.line > 0 ? formatLocation(location) : location.file);

export const formatProblem = (p: ManifestProblem): string =>
  `${formatWhere(p.location)}: ${p.path ? `${p.path}: ` : ''}${p.message}${p.also ? `; read by ${p.also.path} at ${formatWhere(p.also.location)}${(p.also.instances ?? 1) > 1 ? ` in ${p.also.instances} instances` : ''}` : ''}`;

/** Most problems a ManifestError lists; the rest are counted in one last entry. */
export const MAX_LISTED_PROBLEMS = 50;
/** Most characters of listed problems (location, path and message of each). */
export const MAX_LISTED_CHARS = 6_000;
/** Longest path and message of one problem, in characters. */
const MAX_PATH_CHARS = 200;
const MAX_MESSAGE_CHARS = 400;

/**
 * Every problem found in a manifest, in document order; nothing was sent. Exit code 2.
 *
 * The list is bounded, so that a hostile manifest cannot make the error itself expensive: at most
 * MAX_LISTED_PROBLEMS problems and MAX_LISTED_CHARS characters are listed, each clipped, and when
 * some are left out a last entry, at the first one left out, says how many.
 */
export class ManifestError extends GenpipeError {
  override readonly name = 'ManifestError';
  /** The problems listed, in document order (see the class comment for the bound). */
  readonly problems: readonly ManifestProblem[];
  /** How many problems were found, listed or not. */
  readonly total: number;

  constructor(problems: readonly ManifestProblem[]) {
    const sorted = [...problems].sort(
      (a, b) =>
        (a.location.file < b.location.file ? -1 : a.location.file > b.location.file ? 1 : 0) ||
        a.location.line - b.location.line ||
        a.location.col - b.location.col,
    );
    const listed: ManifestProblem[] = [];
    let chars = 0;
    for (const problem of sorted) {
      const bounded = {
        location: problem.location,
        path: clip(problem.path, MAX_PATH_CHARS),
        message: clip(problem.message, MAX_MESSAGE_CHARS),
        code: problem.code,
        also: problem.also && { ...problem.also, path: clip(problem.also.path, MAX_PATH_CHARS) },
      };
      chars += formatProblem(bounded).length + 1;
      if (listed.length > 0 && (listed.length >= MAX_LISTED_PROBLEMS || chars > MAX_LISTED_CHARS)) break;
      listed.push(bounded);
    }
    const left = sorted.length - listed.length;
    const next = sorted[listed.length];
    if (left > 0 && next)
      listed.push({
        location: next.location,
        path: '',
        message: `and ${left} more problem${left === 1 ? '' : 's'} from here on, not listed`,
      });
    const first = listed[0];
    const more =
      sorted.length > 1 ? ` (${sorted.length} problems; ${left > 0 ? `the first ${sorted.length - left}` : 'all'} listed below)` : '';
    super('invalid_input', first ? `${formatProblem(first)}${more}` : 'Invalid manifest.');
    this.problems = listed;
    this.total = sorted.length;
  }
}
