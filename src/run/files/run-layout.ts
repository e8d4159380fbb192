/**
 * The run directory's layout, named in one place: `runs/<pipeline>/<run-id>/` and the files a run
 * keeps there. Every reader and writer asks here for a path, so renaming or moving a file is one
 * edit, and "which files make a run" has one answer (docs/reference/run-directory.md).
 */
import { join } from 'node:path';

export const RUN_FILES = {
  /** The plan a run was started with: its steps, prices and fingerprint. */
  plan: 'plan.json',
  /** The append-only record of every attempt: the source of every figure. */
  journal: 'journal.jsonl',
  /**
   * Where the run stands (counts, money, status, times, budget), kept current by the run at most
   * once a second and at its end: what lists and first screens read instead of the journal (run-summary.ts).
   */
  summary: 'summary.json',
  /** A copy of the manifest the run was planned from. */
  manifest: 'manifest.yaml',
  /** The CSV rows and files the run read, with their hashes. */
  inputs: 'inputs.json',
  /** Each step's prompt headline, for the gallery. */
  headlines: 'headlines.json',
  /** The instances the run did not start, and why. */
  notStarted: 'not-started.jsonl',
  /** The downloaded files. */
  outputs: 'outputs',
  /** One row per output file. */
  outputsCsv: 'outputs.csv',
  outputsJsonl: 'outputs.jsonl',
  /** The review's verdicts: approved, rejected, starred. */
  review: 'review.json',
  gallery: 'gallery.html',
  reportJson: 'report.json',
  reportCsv: 'report.csv',
  reportMd: 'report.md',
} as const;

export type RunFile = keyof typeof RUN_FILES;

/** The path of one of a run's files. */
export function runFile(runDir: string, file: RunFile): string {
  return join(runDir, RUN_FILES[file]);
}
