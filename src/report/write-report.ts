import { randomBytes } from 'node:crypto';
import { rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { readPlanFile } from '../run/files/run-dir.js';
import type { InstanceState } from '../run/journal/run-state.js';
import { ByteSink } from '../util/byte-sink.js';
import { canStartWorker, startTaskWorker, type TaskWorker } from '../util/worker-task.js';
import { CostTally, emptyGroup, type CostSummary, type TallyGroups } from './cost-report.js';
import { gatherInstanceRuns, middleKey, outcomesOf, PlainOutcome, type StatesOptions } from './instance-lines.js';
import { CSV_FORMAT, JSON_FORMAT, MARKDOWN_FORMAT, type ReportFormat } from './render.js';
import { RUN_FILES, runFile } from '../run/files/run-layout.js';
import { runHistory } from './run-list.js';

const FILES: readonly (readonly [string, ReportFormat])[] = [
  [RUN_FILES.reportJson, JSON_FORMAT],
  [RUN_FILES.reportCsv, CSV_FORMAT],
  [RUN_FILES.reportMd, MARKDOWN_FORMAT],
];

/** The second thread's module (report-worker.ts): beside this one in the build; absent when running from sources. */
const WORKER = new URL('./report-worker.js', import.meta.url);

/** What writeCostReport returns: the report without its instance lines, and how many lines it wrote. */
export interface WrittenReport extends CostSummary {
  /** The instances the journal names (one line each): a lower bound of its distinct instances, for the gallery's limit. */
  instanceLines: number;
}

/**
 * Writes report.json, report.csv and report.md into the run directory as the journal streams (each
 * to a temp file renamed into place), in one pass over the instances and in memory bounded whatever
 * the run's size, and returns the report without its instance lines (with their count). A format whose head needs the
 * totals (Markdown) gets its instance lines in a section file, copied in after its head.
 *
 * A big journal is read by two threads (instance-lines.ts), and its instances' lines are written by
 * two as well: this thread writes those before the middle sort key, a worker (report-worker.ts) those from
 * it on, into part files copied in after this thread's lines, its sums added after this thread's
 * (CostTally.absorb). The files are byte for byte those one thread writes.
 *
 * `threads` is for tests of the sources: the built worker, and the journal size from which two
 * threads read it.
 */
export async function writeCostReport(
  runDir: string,
  options: {
    creditsPerUsd?: number;
    /** The writing start's time waited on throttling (RunSummary.throttledMs): said when above 0. */
    throttledMs?: number | undefined;
    /** The run's status as the writing start ended it (`genpipe runs`'s words); else read from the journal's run records. */
    status?: string | undefined;
    threads?: Pick<StatesOptions, 'worker' | 'parallelMinBytes' | 'evenSplit'>;
  } = {},
): Promise<WrittenReport> {
  const plan = await readPlanFile(runDir);
  const rate = options.creditsPerUsd ?? 100;
  // This writer's own temporary names: two processes writing one run's report (a holder displaced
  // as it finished, and the one that took over) never rename each other's files.
  const tmp = `${process.pid}-${randomBytes(4).toString('hex')}.tmp`;
  // What a head may read before the totals exist: the run's names and the rate.
  const early: CostSummary = {
    pipeline: plan.pipeline,
    runId: plan.runId,
    creditsPerUsd: rate,
    steps: [],
    models: [],
    total: emptyGroup('total'),
  };
  const headFirst = new Set<ReportFormat>([JSON_FORMAT, CSV_FORMAT]);
  const sinks: ByteSink[] = [];
  const hasSink = plan.steps.some((step) => step.sink !== undefined);
  const gathered = await gatherInstanceRuns(runFile(runDir, 'journal'), { ...options.threads, sinks: hasSink, order: plan.steps });
  let tail: TailWriter | undefined;
  try {
    for (const [name, format] of FILES) {
      const sink = new ByteSink(join(runDir, headFirst.has(format) ? `${name}.${tmp}` : `${name}.lines.${tmp}`), { redact: true });
      sinks.push(sink);
      if (headFirst.has(format)) sink.add(format.head(early));
    }
    const worker = options.threads?.worker ?? WORKER;
    const middle = gathered.runs.length > 0 && canStartWorker(worker) ? middleKey(gathered) : undefined;
    if (middle !== undefined) {
      const parts = FILES.map(([name]) => join(runDir, `${name}.part.${tmp}`));
      // The thread that read the journal's second part writes the last lines too; a journal one
      // thread read (smaller, yet spilled) gets a thread of its own.
      tail = startTail(gathered.helper, worker, { kind: 'tail', runs: gathered.runs, from: middle, runDir, creditsPerUsd: rate, parts });
    }
    const tally = new CostTally(plan);
    let index = await writeInstanceLines(outcomesOf(gathered, { to: middle }), tally, sinks, rate, 0);
    if (tail) {
      const answer = await tail.done;
      tally.absorb(answer.groups);
      index += answer.count;
    }
    const throttled = options.throttledMs;
    const summary: CostSummary = {
      ...tally.summary(options.creditsPerUsd),
      ...(throttled !== undefined && throttled > 0 ? { throttledMs: Math.round(throttled) } : {}),
      status: options.status ?? (await runHistory(runDir)).status,
    };
    // Each file is finished on its own, all at once: the copies of the worker's parts (hundreds of
    // megabytes for a million instances) then run on several threads of the pool. A format whose
    // head needs the totals is written whole here from its head, this thread's lines and the
    // worker's, each copied once. All settle before a failure is reported, so that none is still
    // writing when the cleanup below closes the files.
    const finished = await Promise.allSettled(
      FILES.map(async ([name, format], i) => {
        const sink = sinks[i] as ByteSink;
        const part = tail?.parts[i];
        if (headFirst.has(format)) {
          if (part !== undefined) await sink.appendFile(part);
          sink.add(format.tail(summary, index));
          sink.close();
          return;
        }
        sink.close();
        const whole = new ByteSink(join(runDir, `${name}.${tmp}`), { redact: true });
        try {
          whole.add(format.head(summary));
          await whole.appendFile(sink.path);
          if (part !== undefined) await whole.appendFile(part);
          whole.add(format.tail(summary, index));
        } finally {
          whole.close();
        }
        await rm(sink.path, { force: true });
      }),
    );
    for (const outcome of finished) if (outcome.status === 'rejected') throw outcome.reason;
    for (const [name] of FILES) await rename(join(runDir, `${name}.${tmp}`), join(runDir, name));
    return { ...summary, instanceLines: index };
  } catch (error) {
    for (const sink of sinks) {
      try {
        sink.close();
      } catch {
        // the first error is the one to report
      }
    }
    for (const [name] of FILES) {
      await rm(join(runDir, `${name}.${tmp}`), { force: true });
      await rm(join(runDir, `${name}.lines.${tmp}`), { force: true });
    }
    throw error;
  } finally {
    if (tail) {
      tail.stop();
      await tail.done.catch(() => {});
      for (const part of tail.parts) await rm(part, { force: true });
    }
    await gathered.dispose();
  }
}

/**
 * Counts each instance's line into `tally` and appends it to each format's sink, numbering them
 * from `first` (a JSON line after the first starts with its comma); returns how many there were.
 */
export async function writeInstanceLines(
  outcomes: AsyncIterable<[string, InstanceState | PlainOutcome]>,
  tally: CostTally,
  sinks: readonly ByteSink[],
  rate: number,
  first: number,
): Promise<number> {
  let index = first;
  for await (const [id, outcome] of outcomes) {
    const line = outcome instanceof PlainOutcome ? tally.plainLine(id, outcome) : tally.line(id, outcome);
    for (const [i, [, format]] of FILES.entries()) (sinks[i] as ByteSink).add(format.instance(line, index, rate));
    index++;
  }
  return index - first;
}

/** What the worker writing a report's last lines is asked (its workerData). */
export interface TailJob {
  kind: 'tail';
  /** The sorted runs of the gathered instances (instance-lines.ts InstanceRuns). */
  runs: readonly string[];
  /** The sort key (plan/instance-order.ts) of the first instance the worker writes; those before are this thread's. */
  from: string;
  runDir: string;
  creditsPerUsd: number;
  /** A file per format (FILES' order) for its lines. */
  parts: readonly string[];
}

/** The worker's answer: how many lines it wrote, and its sums. */
export interface TailAnswer {
  count: number;
  groups: TallyGroups;
}

/** Writes the lines of the instances from `job.from` on: in the worker (report-worker.ts). */
export async function writeTail(job: TailJob): Promise<TailAnswer> {
  const tally = new CostTally(await readPlanFile(job.runDir));
  // Its lines continue this thread's (which hold at least the first id): numbered from 1.
  const sinks = job.parts.map((part) => new ByteSink(part, { redact: true }));
  try {
    const count = await writeInstanceLines(
      outcomesOf({ inMemory: new Map(), runs: job.runs }, { from: job.from }),
      tally,
      sinks,
      job.creditsPerUsd,
      1,
    );
    return { count, groups: tally.groups() };
  } finally {
    for (const sink of sinks) sink.close();
  }
}

interface TailWriter {
  parts: readonly string[];
  done: Promise<TailAnswer>;
  stop(): void;
}

/**
 * Has `helper` (or, without one, a thread of its own from `module`) write the lines from `job.from`
 * on. Its last task: `stop` ends the thread.
 */
function startTail(helper: TaskWorker | undefined, module: URL, job: TailJob): TailWriter {
  const worker = helper ?? startTaskWorker(module);
  const done = worker.run<TailAnswer>(job, (why) => new Error(`Writing the report's last instances in another thread failed: ${why}`));
  return { parts: job.parts, done, stop: () => worker.stop() };
}
