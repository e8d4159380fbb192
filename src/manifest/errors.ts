import { GenpipeError } from '../api/errors.js';
import { formatLocation, type SourceLocation } from '../util/yaml-source.js';

/** One located problem in a manifest (or a file it reads, such as a CSV). */
export interface ManifestProblem {
  location: SourceLocation;
  /** Where in the document, such as `steps.sheets.matrix.seed`. */
  path: string;
  message: string;
}

export const formatProblem = (p: ManifestProblem): string => `${formatLocation(p.location)}: ${p.path ? `${p.path}: ` : ''}${p.message}`;

/** Every problem found in a manifest, in document order; nothing was sent. Exit code 2. */
export class ManifestError extends GenpipeError {
  override readonly name = 'ManifestError';
  readonly problems: readonly ManifestProblem[];

  constructor(problems: readonly ManifestProblem[]) {
    const sorted = [...problems].sort((a, b) => a.location.file.localeCompare(b.location.file) || a.location.line - b.location.line || a.location.col - b.location.col);
    const first = sorted[0];
    const more = sorted.length > 1 ? ` (${sorted.length} problems; all listed below)` : '';
    super('invalid_input', first ? `${formatProblem(first)}${more}` : 'Invalid manifest.');
    this.problems = sorted;
  }
}
