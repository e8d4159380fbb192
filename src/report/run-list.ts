/** The runs under a folder (`runs/<pipeline>/<run-id>/`), newest first, with status and spend. */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { JOURNAL_RECORD_TYPES } from '../run/journal/journal-records.js';
import { streamJournal } from '../run/journal/journal.js';
import { committedUsd, summarizeCostReport, type CostSummary } from './cost-report.js';
import { outcomeWord } from '../run/events.js';
import { notStartedStatus, readNotStarted, type NotStartedRecord } from './not-started-list.js';
import { runFile } from '../run/files/run-layout.js';

export interface RunListing {
  pipeline: string;
  runId: string;
  dir: string;
  /** The last run_finished outcome (a signal's stop reads `interrupted`), or `interrupted` when the last start has no finish. */
  status: string;
  /** Instances done: made in this run (`made`) or reused from an earlier one (`reused`). */
  completed: number;
  /** Completed by a request of this run. */
  made: number;
  /** Reused from an earlier run (`--reuse`): done, with nothing sent. */
  reused: number;
  instances: number;
  netUsd: number;
  /** Attempts whose end is unknown, at their price (cost-report.ts). */
  unknownUsd: number;
  /** Instances whose price is unknown: their cost is not in netUsd. */
  unpricedInstances: number;
  /** Instances that ended failed, nsfw or canceled. */
  failed: number;
  /** Instances whose end is unknown. */
  unknown: number;
  /** Charged: every attempt submitted at its price, refunded ones too (cost-report.ts). */
  estimatedUsd: number;
  /** Committed, the budget's measure: net (charged, in flight) plus unknown (cost-report.ts committedUsd). */
  committedUsd: number;
  /** The budget of the last start, when it had one. */
  budgetUsd: number | null;
  /** When the run first started and last finished, in ms since 1970 (journal times); null when it did not, or the journal has no time. */
  startedAt: number | null;
  finishedAt: number | null;
}

async function folders(path: string): Promise<string[]> {
  try {
    const entries = await readdir(path, { withFileTypes: true });
    return entries.filter((e) => e.isDirectory() && !e.name.startsWith('.')).map((e) => e.name);
  } catch {
    return [];
  }
}

/** The status needs only run_started and run_finished: every other line is passed over unparsed. */
const NOT_RUN_RECORDS = [...JOURNAL_RECORD_TYPES].filter((type) => type !== 'run_started' && type !== 'run_finished');

/** Told each run's cost summary as the list reads it (metrics/metrics.ts sums them by model). */
export type OnRunSummary = (listing: RunListing, summary: CostSummary) => void;

/** What a run's own records say of it: its status, when it first started and last finished, its last start's budget. */
export interface RunHistory {
  /** The last run_finished outcome (a signal's stop reads `interrupted`), `interrupted` when the last start has no finish, `not started`, or `unreadable`. */
  status: string;
  startedAt: number | null;
  finishedAt: number | null;
  budgetUsd: number | null;
}

/** Reads a run's run_started and run_finished records (every other line passed over unparsed). */
export async function runHistory(dir: string): Promise<RunHistory> {
  const history: RunHistory = { status: 'not started', startedAt: null, finishedAt: null, budgetUsd: null };
  // Streamed: a journal of a large run is never read into memory whole.
  try {
    for await (const record of streamJournal(runFile(dir, 'journal'), { skipTypes: NOT_RUN_RECORDS })) {
      if (record.type === 'run_started') {
        history.status = 'interrupted';
        history.startedAt ??= record.at ?? null;
        history.finishedAt = null;
        history.budgetUsd = record.options?.budgetUsd ?? null;
      }
      if (record.type === 'run_finished') {
        history.status = record.outcome === undefined ? 'finished' : outcomeWord(record.outcome);
        history.finishedAt = record.at ?? null;
      }
    }
  } catch {
    history.status = 'unreadable';
  }
  return history;
}

/** The listing of one run directory (`root/<pipeline>/<run-id>/`), or undefined when it has no plan.json. */
export async function runListing(root: string, pipeline: string, runId: string, onSummary?: OnRunSummary): Promise<RunListing | undefined> {
  const dir = join(root, pipeline, runId);
  if (!(await stat(runFile(dir, 'plan')).catch(() => undefined))) return undefined;
  const { status, startedAt, finishedAt, budgetUsd } = await runHistory(dir);
  const report = await summarizeCostReport(dir);
  const instances = Object.values(report.total.counts).reduce((a, b) => a + b, 0);
  const listing: RunListing = {
    pipeline,
    runId,
    dir,
    status,
    completed: report.total.counts.completed + report.total.counts.reused,
    made: report.total.counts.completed,
    reused: report.total.counts.reused,
    instances,
    netUsd: report.total.netUsd,
    unknownUsd: report.total.unknownUsd,
    unpricedInstances: report.total.unpricedInstances,
    failed: report.total.counts.failed + report.total.counts.nsfw + report.total.counts.canceled,
    unknown: report.total.counts.unknown,
    estimatedUsd: report.total.estimatedUsd,
    committedUsd: committedUsd(report.total),
    budgetUsd,
    startedAt,
    finishedAt,
  };
  onSummary?.(listing, report);
  return listing;
}

/** A tick that did not start, listed among the runs, with why. */
export function notStartedListing(root: string, pipeline: string, record: NotStartedRecord): RunListing {
  return {
    pipeline,
    runId: record.id,
    dir: join(root, pipeline),
    status: notStartedStatus(record),
    completed: 0,
    made: 0,
    reused: 0,
    instances: 0,
    netUsd: 0,
    unknownUsd: 0,
    unpricedInstances: 0,
    failed: 0,
    unknown: 0,
    estimatedUsd: 0,
    committedUsd: 0,
    budgetUsd: null,
    startedAt: Date.parse(record.at) || null,
    finishedAt: Date.parse(record.at) || null,
  };
}

/** The pipeline folders under a runs folder (dot-names, such as `.lock`, left out). */
export const pipelineFolders = folders;

export interface ListRunsOptions {
  onSummary?: OnRunSummary | undefined;
  /** Lists one run: runListing, or one that answers from what it read before (metrics/metrics.ts). */
  listOne?: typeof runListing | undefined;
}

export async function listRuns(root: string, pipeline?: string, options: ListRunsOptions = {}): Promise<RunListing[]> {
  const out: RunListing[] = [];
  const listOne = options.listOne ?? runListing;
  for (const name of pipeline === undefined ? await folders(root) : [pipeline]) {
    for (const runId of await folders(join(root, name))) {
      const listing = await listOne(root, name, runId, options.onSummary);
      if (listing) out.push(listing);
    }
  }
  // Ticks that did not start are nights too: listed among the runs, with why.
  for (const name of pipeline === undefined ? await folders(root) : [pipeline])
    for (const record of await readNotStarted(join(root, name))) out.push(notStartedListing(root, name, record));
  return out.sort((a, b) => b.runId.localeCompare(a.runId));
}
