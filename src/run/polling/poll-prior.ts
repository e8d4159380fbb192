/**
 * A new run's first polls, aimed from the start: how long this pipeline's requests took
 * in its earlier runs (the journals beside this run's directory), per model, so the first wave is
 * not noticed late by a cold backoff. Each duration is the interval the polls saw it end in, as the
 * run learns its own (poll-schedule.ts): it ended by `hi`, the status record's time minus the
 * submitted record's, and after `lo`. The journal keeps no `lo`, but the status record's
 * `durationMs` is the tracker's estimate within (lo, hi], the request's mean there under the
 * estimated distribution (the midpoint where that is flat), so lo = 2 × durationMs − hi, and a
 * webhook's exact duration gives lo = hi. Taking those estimates as exact durations, as genpipe did
 * until 2026-11-27, put the first plans' polls at the clusters the earlier run's polls had made:
 * in bench/poll-sim.bench.mjs (40 seeded runs after an earlier run of 100 sheets, its first 64
 * ends as the prior, as read here), the intervals took a run from 1.164x to 1.152x of the jobs
 * seen done at once. A record without
 * `durationMs` (older journals) counts as ending exactly at `hi` (up to a poll late). The run's own
 * observations push these out as they come.
 *
 * Bounded: the newest MAX_RUNS runs are read, each journal streamed (never held in memory) and left
 * as soon as enough durations are known; a journal that cannot be read is passed over.
 */
import { readdir } from 'node:fs/promises';
import { basename, join, resolve } from 'node:path';
import { JOURNAL_RECORD_TYPES } from '../journal/journal-records.js';
import { streamJournal } from '../journal/journal.js';
import { requestIdOf } from '../../models/submission.js';
import type { SeenDuration } from './poll-schedule.js';
import { runFile } from '../files/run-layout.js';

/** Earlier runs read, newest first. */
export const MAX_RUNS = 3;
/** Durations kept per model (the scheduler's window). */
export const PER_MODEL = 64;
/** Records read per journal at most, whatever they hold. */
const MAX_RECORDS_PER_JOURNAL = 200_000;

const WANTED = new Set(['intent', 'submitted', 'status']);
const SKIPPED = [...JOURNAL_RECORD_TYPES].filter((t) => !WANTED.has(t));

/** Per model, up to PER_MODEL durations (intervals in ms) from this pipeline's most recent earlier runs. */
export async function readPollPrior(
  runDir: string,
  options: { maxRuns?: number; perModel?: number } = {},
): Promise<Map<string, SeenDuration[]>> {
  const perModel = options.perModel ?? PER_MODEL;
  const pipelineDir = resolve(runDir, '..');
  const self = basename(resolve(runDir));
  let names: string[];
  try {
    names = (await readdir(pipelineDir, { withFileTypes: true }))
      .filter((e) => e.isDirectory() && !e.name.startsWith('.') && e.name !== self)
      .map((e) => e.name);
  } catch {
    return new Map();
  }
  // Run ids sort by their start time.
  names.sort().reverse();
  const prior = new Map<string, SeenDuration[]>();
  for (const name of names.slice(0, options.maxRuns ?? MAX_RUNS)) {
    try {
      await readRun(runFile(join(pipelineDir, name), 'journal'), prior, perModel);
    } catch {
      // An unreadable earlier run teaches nothing; the run goes on without it.
    }
  }
  return prior;
}

async function readRun(journal: string, prior: Map<string, SeenDuration[]>, perModel: number): Promise<void> {
  const modelOf = new Map<string, string>();
  const models = new Set<string>();
  const submittedAt = new Map<string, number>();
  let records = 0;
  for await (const record of streamJournal(journal, { skipTypes: SKIPPED })) {
    // Bounded: a huge journal is left after its first records.
    if (++records > MAX_RECORDS_PER_JOURNAL) return;
    if (record.type === 'intent') {
      modelOf.set(record.instance, record.model);
      models.add(record.model);
    } else if (record.type === 'submitted' && record.at !== undefined && requestIdOf(record.handle) !== undefined)
      submittedAt.set(record.instance, record.at);
    else if (record.type === 'status' && record.status === 'completed' && record.at !== undefined) {
      const start = submittedAt.get(record.instance);
      const model = modelOf.get(record.instance);
      submittedAt.delete(record.instance);
      if (start === undefined || model === undefined || record.at < start) continue;
      let list = prior.get(model);
      if (!list) prior.set(model, (list = []));
      if (list.length >= perModel) continue;
      list.push(seenDuration(record.at - start, record.durationMs));
      // Full for every model this run has used so far: enough.
      if (list.length === perModel && [...models].every((m) => (prior.get(m)?.length ?? 0) >= perModel)) return;
    }
  }
}

/**
 * The interval a request was seen ending in, from when its end was seen (`seenMs` after its
 * submission) and the tracker's estimate within it (`estimateMs`, the status record's durationMs).
 */
export function seenDuration(seenMs: number, estimateMs: number | undefined): SeenDuration {
  if (estimateMs === undefined) return { lo: seenMs, hi: seenMs };
  const hi = Math.max(seenMs, estimateMs);
  return { lo: Math.min(estimateMs, Math.max(0, 2 * estimateMs - hi)), hi };
}
