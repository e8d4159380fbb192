/** The runs under a folder (`runs/<pipeline>/<run-id>/`), newest first, with status and spend. */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { JOURNAL_RECORD_TYPES, startedBudget } from '../run/journal/journal-records.js';
import { streamJournal } from '../run/journal/journal.js';
import { committedUsd, summarizeCostReport, type GroupLine } from './cost-report.js';
import { readRunSummary, type RunSummaryFile, type SummaryGroup } from '../run/files/run-summary.js';
import { readPipelineLock } from '../run/lock/lock.js';
import { readPlanFileSync } from '../run/files/run-dir.js';
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

/** A group of the report's sums as a list needs them: counts and money, by step, by model or in total. */
export type SumsGroup = Pick<GroupLine, 'name' | 'counts' | 'estimatedUsd' | 'refundedUsd' | 'netUsd' | 'unknownUsd' | 'unpricedInstances'>;

/** A run's sums: what the report's summary (CostSummary) and summary.json both give. */
export interface RunSums {
  pipeline: string;
  steps: SumsGroup[];
  models: SumsGroup[];
  total: SumsGroup;
}

/** Told each run's sums as the list reads them (metrics/metrics.ts sums them by model). */
export type OnRunSummary = (listing: RunListing, summary: RunSums) => void;

const groupOf = (g: SummaryGroup): SumsGroup => ({
  name: g.name,
  counts: g.counts,
  estimatedUsd: g.money.chargedUsd,
  refundedUsd: g.money.refundedUsd,
  netUsd: g.money.netUsd,
  unknownUsd: g.money.unknownUsd,
  unpricedInstances: g.money.unpricedInstances,
});

/** summary.json's sums in the report's words. */
export function sumsOfSummary(summary: RunSummaryFile): RunSums {
  return {
    pipeline: summary.pipeline,
    steps: summary.steps.map(groupOf),
    models: summary.models.map(groupOf),
    total: groupOf({ name: 'total', counts: summary.counts, money: summary.money }),
  };
}

/** True when the pipeline's lock is held for this run: it is going, and its summary is at most a second behind. */
async function heldFor(root: string, pipeline: string, runId: string): Promise<boolean> {
  const lock = await readPipelineLock(join(root, pipeline, '.lock')).catch(() => undefined);
  return lock?.state === 'held' && lock.owner?.runId === runId;
}

/** The listing of a run from its sums, and how its starts went. */
function listingOf(
  head: Pick<RunListing, 'pipeline' | 'runId' | 'dir' | 'status' | 'budgetUsd' | 'startedAt' | 'finishedAt'>,
  total: SumsGroup,
): RunListing {
  const counts = total.counts;
  return {
    ...head,
    completed: counts.completed + counts.reused,
    made: counts.completed,
    reused: counts.reused,
    instances: Object.values(counts).reduce((a, b) => a + b, 0),
    netUsd: total.netUsd,
    unknownUsd: total.unknownUsd,
    unpricedInstances: total.unpricedInstances,
    failed: counts.failed + counts.nsfw + counts.canceled,
    unknown: counts.unknown,
    estimatedUsd: total.estimatedUsd,
    committedUsd: committedUsd(total),
  };
}

/** What a caller that has just looked at a run's files knows of them (the ui's watch), so they are not looked at again. */
export interface KnownFiles {
  /** plan.json is there. */
  plan: boolean;
  /** The journal's size; undefined when there is none. */
  journalBytes: number | undefined;
}

/**
 * The listing of one run directory (`root/<pipeline>/<run-id>/`), or undefined when it has no
 * plan.json. It reads the summary.json the run keeps current (run/files/run-summary.ts), a small
 * file, so a list of a thousand runs reads no journal.
 */
export async function runListing(
  root: string,
  pipeline: string,
  runId: string,
  onSummary?: OnRunSummary,
  known?: KnownFiles,
): Promise<RunListing | undefined> {
  const dir = join(root, pipeline, runId);
  if (known ? !known.plan : !(await stat(runFile(dir, 'plan')).catch(() => undefined))) return undefined;
  const summary = await readRunSummary(dir, () => heldFor(root, pipeline, runId), known?.journalBytes);
  // Runs written before summary.json existed, or whose summary the journal has outgrown (a
  // process killed as it ran, a start by an older genpipe), are replayed from the journal.
  if (summary === undefined) return runListingFromJournal(root, pipeline, runId, onSummary);
  // plan.json is read as the replay reads it: a run whose plan is not one is unreadable either way.
  readPlanFileSync(dir);
  const sums = sumsOfSummary(summary);
  const listing = listingOf(
    {
      pipeline,
      runId,
      dir,
      // A start that has not ended reads `interrupted`, as its journal does (the ui says `running` while the lock is held).
      status: summary.status === 'running' ? 'interrupted' : summary.status,
      budgetUsd: summary.budgetUsd,
      startedAt: summary.startedAt,
      finishedAt: summary.finishedAt,
    },
    sums.total,
  );
  onSummary?.(listing, sums);
  return listing;
}

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
        history.budgetUsd = startedBudget(record);
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

/** The listing of one run replayed from its whole journal: for runs without a summary to trust. */
export async function runListingFromJournal(
  root: string,
  pipeline: string,
  runId: string,
  onSummary?: OnRunSummary,
): Promise<RunListing | undefined> {
  const dir = join(root, pipeline, runId);
  if (!(await stat(runFile(dir, 'plan')).catch(() => undefined))) return undefined;
  const { status, startedAt, finishedAt, budgetUsd } = await runHistory(dir);
  const report = await summarizeCostReport(dir);
  const listing = listingOf({ pipeline, runId, dir, status, budgetUsd, startedAt, finishedAt }, report.total);
  onSummary?.(listing, report);
  return listing;
}

/** The figures of a listing that has none: a tick that did not start, a run whose files cannot be read. */
export const NO_FIGURES = {
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
  startedAt: null,
  finishedAt: null,
} satisfies Omit<RunListing, 'pipeline' | 'runId' | 'dir' | 'status'>;

/** A tick that did not start, listed among the runs, with why. */
export function notStartedListing(root: string, pipeline: string, record: NotStartedRecord): RunListing {
  return {
    pipeline,
    runId: record.id,
    dir: join(root, pipeline),
    status: notStartedStatus(record),
    ...NO_FIGURES,
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
