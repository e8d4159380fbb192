/**
 * `summary.json` in a run directory: where the run stands, kept current by the run itself, so a
 * list of a thousand runs or the first screen of a big one reads a small file instead of
 * replaying each journal. It is a view of the journal, never a source: its figures are the ones
 * the run's RunFold holds (run-fold.ts, the fold the report and the progress line read), and a
 * reader that cannot trust it (readRunSummary) replays the journal as before.
 *
 * The run rewrites it at most once a second while it goes (a timer, off the path of every
 * record: nothing waits for it) and once at its end, each time to a temp file renamed into place,
 * never synced. A write that fails is let go: the run neither stops nor slows for a view.
 */
import { readFileSync } from 'node:fs';
import { rename, stat, unlink, writeFile } from 'node:fs/promises';
import { startedBudget, type JournalRecord } from '../journal/journal-records.js';
import { REPORT_STATUSES, type FoldMoney, type ReportStatus, type RunFold } from '../journal/run-fold.js';
import { outcomeWord } from '../events.js';
import { runFile } from './run-layout.js';

export const SUMMARY_VERSION = 1;

/** Money in the one vocabulary of the ui, the report and the budget. */
export interface SummaryMoney {
  /** Net and unknown: what the run may have spent, the budget's measure. */
  committedUsd: number;
  /** Every attempt submitted at its price (the report's `estimatedUsd`). */
  chargedUsd: number;
  /** What the account pays for the attempts whose end is known. */
  netUsd: number;
  /** Attempts whose end is unknown, at their price: not in the net. */
  unknownUsd: number;
  /** Instances sent whose price is unknown: in no US$ figure. */
  unpricedInstances: number;
  /** Refunds: failed, nsfw and canceled requests. */
  refundedUsd: number;
}

export interface SummaryGroup {
  name: string;
  counts: Record<ReportStatus, number>;
  money: SummaryMoney;
}

export interface RunSummaryFile {
  version: number;
  pipeline: string;
  runId: string;
  /** `running` while a start goes; then how the last start ended, as `genpipe runs` words it (`interrupted` for a signal). */
  status: string;
  /** The first start's time and the summary's own, in ms since 1970; the end of the last start once it ended, else null. */
  startedAt: number | null;
  updatedAt: number;
  finishedAt: number | null;
  /** The budget of the last start, when it had one. */
  budgetUsd: number | null;
  /** The journal's size when the run wrote its last summary at its end: a reader trusts an ended summary only while the journal still has that size. Null while the run goes. */
  journalBytes: number | null;
  /** Instances of the plan and any the journal names: the sum of `counts`. */
  instances: number;
  counts: Record<ReportStatus, number>;
  money: SummaryMoney;
  /** nsfw re-rolls over the run's life, as the report counts them. */
  rerolls: number;
  /** The time the last start waited on throttling, in ms, known at its end (its report says the same); null while it goes. */
  throttledMs: number | null;
  /** By step (the plan's order) and by model (the plan's models first). */
  steps: SummaryGroup[];
  models: SummaryGroup[];
}

const money = (m: FoldMoney): SummaryMoney => ({
  committedUsd: m.committedUsd,
  chargedUsd: m.estimatedUsd,
  netUsd: m.netUsd,
  unknownUsd: m.unknownUsd,
  unpricedInstances: m.unpricedInstances,
  refundedUsd: m.refundedUsd,
});

export interface SummaryHead {
  pipeline: string;
  runId: string;
  /** When the run first started, from its journal (a resume keeps the first start's time). */
  startedAt?: number | undefined;
}

/** What a timer or the run's end needs of the clock and the disk; tests slow or break them. */
export interface SummaryWriterOptions {
  everyMs?: number | undefined;
  now?: (() => number) | undefined;
  /** Writes `text` to `path` (a temp file renamed into place by default). */
  write?: ((path: string, text: string) => Promise<void>) | undefined;
}

let temps = 0;

async function writeAtomically(path: string, text: string): Promise<void> {
  const temp = `${path}.${process.pid}-${++temps}.tmp`;
  try {
    await writeFile(temp, text);
    await rename(temp, path);
  } catch (error) {
    await unlink(temp).catch(() => {});
    throw error;
  }
}

/**
 * Keeps a run's summary.json current from `fold`, the run's own fold of its journal (run-context.ts
 * feeds it each record once written, as the end-of-run summary reads it). `journaled` is told
 * every record after that: it reads a start's and an end's, and marks the file out of date; a
 * timer writes it.
 */
export class RunSummaryWriter {
  readonly #path: string;
  readonly #journal: string;
  readonly #everyMs: number;
  readonly #now: () => number;
  readonly #write: (path: string, text: string) => Promise<void>;
  #status = 'running';
  #startedAt: number | null;
  #finishedAt: number | null = null;
  #budgetUsd: number | null = null;
  #throttledMs: number | null = null;
  #timer: NodeJS.Timeout | undefined;
  #writing: Promise<void> | undefined;
  #lastWrite = 0;
  #dirty = false;
  #stopped = false;

  constructor(
    runDir: string,
    readonly head: SummaryHead,
    readonly fold: RunFold,
    options: SummaryWriterOptions = {},
  ) {
    this.#path = runFile(runDir, 'summary');
    this.#journal = runFile(runDir, 'journal');
    this.#everyMs = options.everyMs ?? 1_000;
    this.#now = options.now ?? Date.now;
    this.#write = options.write ?? writeAtomically;
    this.#startedAt = head.startedAt ?? null;
  }

  /** A record the journal now holds (and the fold has folded): the file marked out of date. O(1); never waits. */
  journaled(record: JournalRecord): void {
    if (this.#stopped) return;
    if (record.type === 'run_started') {
      this.#status = 'running';
      this.#startedAt ??= record.at ?? null;
      this.#finishedAt = null;
      this.#throttledMs = null;
      this.#budgetUsd = startedBudget(record);
    } else if (record.type === 'run_finished') {
      this.#status = record.outcome === undefined ? 'finished' : outcomeWord(record.outcome);
      this.#finishedAt = record.at ?? null;
    }
    this.#dirty = true;
    this.#schedule();
  }

  /** No more writes (another process writes the run now). */
  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /**
   * The run's end: the last summary, with the journal's size, once every record is in the journal
   * (after the journal is closed). Resolves even when the write fails.
   */
  async close(throttledMs?: number): Promise<void> {
    if (this.#stopped) return;
    this.stop();
    this.#throttledMs = throttledMs === undefined ? null : Math.round(throttledMs);
    await this.#writing?.catch(() => {});
    const size = await stat(this.#journal).then(
      (s) => s.size,
      () => null,
    );
    await this.#write(this.#path, this.#text(size)).catch(() => {});
  }

  /** The summary as it stands. */
  snapshot(journalBytes: number | null = null): RunSummaryFile {
    const fold = this.fold;
    const counts = fold.counts();
    const group = (name: string, c: Record<ReportStatus, number>, m: FoldMoney): SummaryGroup => ({ name, counts: c, money: money(m) });
    return {
      version: SUMMARY_VERSION,
      pipeline: this.head.pipeline,
      runId: this.head.runId,
      status: this.#status,
      startedAt: this.#startedAt,
      updatedAt: this.#now(),
      finishedAt: this.#finishedAt,
      budgetUsd: this.#budgetUsd,
      journalBytes,
      instances: REPORT_STATUSES.reduce((n, s) => n + counts[s], 0),
      counts,
      money: money(fold.money()),
      rerolls: fold.rerolls(),
      throttledMs: this.#throttledMs,
      steps: fold.steps().map((id) => group(id, fold.counts(id), fold.money(id))),
      models: fold.models().map((m) => group(m.name, m.counts, m.money)),
    };
  }

  #text(journalBytes: number | null): string {
    return `${JSON.stringify(this.snapshot(journalBytes))}\n`;
  }

  #schedule(): void {
    if (this.#timer !== undefined || this.#writing !== undefined || this.#stopped) return;
    const wait = Math.max(0, this.#lastWrite + this.#everyMs - this.#now());
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#flush();
    }, wait);
    this.#timer.unref();
  }

  #flush(): void {
    if (!this.#dirty || this.#stopped) return;
    this.#dirty = false;
    this.#lastWrite = this.#now();
    this.#writing = this.#write(this.#path, this.#text(null))
      .catch(() => {})
      .finally(() => {
        this.#writing = undefined;
        if (this.#dirty) this.#schedule();
      });
  }
}

/** The shape a reader accepts: what this version writes. */
function isSummary(value: unknown): value is RunSummaryFile {
  const v = value as Partial<RunSummaryFile> | null;
  return (
    typeof v === 'object' &&
    v !== null &&
    v.version === SUMMARY_VERSION &&
    typeof v.status === 'string' &&
    typeof v.counts === 'object' &&
    typeof v.money === 'object' &&
    Array.isArray(v.steps) &&
    Array.isArray(v.models)
  );
}

/**
 * A run's summary.json when it says what the journal says, else undefined (the caller replays the
 * journal). An ended run's summary is trusted while the journal keeps the size the run wrote in
 * it (a later start by an older genpipe, or a repaired journal, changes it). A running start's
 * summary is trusted only when `live` says the run is going (its pipeline's lock is held for it):
 * a process killed while it ran left a summary up to a second behind its journal.
 */
export async function readRunSummary(
  runDir: string,
  live: () => Promise<boolean>,
  /** The journal's size when the caller has just read it (undefined: read it here). */
  journalBytes?: number,
): Promise<RunSummaryFile | undefined> {
  let summary: unknown;
  try {
    // At once: a few KB, read faster than the thread pool's round trips take, and a list reads a thousand.
    summary = JSON.parse(readFileSync(runFile(runDir, 'summary'), 'utf8'));
  } catch {
    return undefined;
  }
  if (!isSummary(summary)) return undefined;
  if (summary.status === 'running') return (await live()) ? summary : undefined;
  const size = journalBytes ?? (await stat(runFile(runDir, 'journal')).catch(() => undefined))?.size;
  return size !== undefined && size === summary.journalBytes ? summary : undefined;
}
