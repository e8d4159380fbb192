/**
 * What a run's page reads from the journal's own records, beside the report: spend over time, the
 * retries, and the pace of the last start (for the ETA).
 *
 * - Spend over time is the fold of the records (run/journal/run-fold.ts, the one progress and the
 *   report read) at each record's own time (`at`): committed, charged and net as they stood then.
 *   So a page opened late, or after the run ended, shows the whole curve.
 * - The journal is read from where the last read stopped, at a line's end: a running run costs
 *   only its new records. A line still being written waits for the next read.
 * - At most `maxPoints` points are kept, whatever the run's size. Every `stride`-th change of the
 *   money is kept, and the latest always is; when the points are full, every other one goes and
 *   the stride doubles. A run of 100,000 instances keeps as many points as one of 1,000.
 * - The fold holds each instance's state only while it is needed: `release()` lets it go once the
 *   run has ended (the points stay). If the journal grows again (a resume), it is read again from
 *   its first line.
 */
import { open } from 'node:fs/promises';
import { parseJournal } from '../run/journal/journal.js';
import type { JournalRecord } from '../run/journal/journal-records.js';
import { RunFold, type PlannedStep, type ReportStatus } from '../run/journal/run-fold.js';

export const MAX_POINTS = 2_000;

/** Read at once from the journal; a line longer than this makes the read grow, up to MAX_READ. */
const READ_BYTES = 1 << 20;
const MAX_READ = 64 << 20;

/** Spend over time: seconds since 1970, and the committed, charged and net US$ at each. */
export interface SpendPoints {
  t: number[];
  committed: number[];
  charged: number[];
  net: number[];
}

/** The new attempts the journal records, apart from the nsfw re-rolls the report counts. */
export interface JournalRetries {
  /** `--retry` attempts sent again with a new key (a failed, canceled, nsfw, unknown or rejected instance). */
  retried: number;
  /** `--resubmit-unknown`: an unknown submit sent again as the same attempt. */
  resubmitted: number;
  /** `--retry` rounds that started an attempt. */
  rounds: number;
}

/** Where the last start stands: what the ETA goes by (report/progress.ts etaText). */
export interface StartPace {
  /** Instances ended (done, failed or unknown, but for the ones being sent), over the run's life. */
  ended: number;
  /** Ended when the last start began: not part of its pace. */
  before: number;
  total: number;
  /** When the last start sent its first instance, in ms since 1970; undefined until it did. */
  startedAt: number | undefined;
}

const ENDED: readonly ReportStatus[] = ['completed', 'reused', 'failed', 'nsfw', 'canceled', 'unknown'];

function endedOf(fold: RunFold): { ended: number; total: number } {
  const counts = fold.counts();
  let ended = 0;
  let total = 0;
  for (const [status, n] of Object.entries(counts) as [ReportStatus, number][]) {
    total += n;
    if (ENDED.includes(status)) ended += n;
  }
  return { ended, total };
}

const emptyPoints = (): SpendPoints => ({ t: [], committed: [], charged: [], net: [] });

export class JournalSeries {
  readonly #journal: string;
  readonly #steps: readonly PlannedStep[];
  readonly #maxPoints: number;
  #fold: RunFold | undefined;
  /** Where the next read starts: the end of the last whole line read. */
  #offset = 0;
  /** The journal's size at the last read; -1 before the first. */
  #size = -1;
  #points = emptyPoints();
  /** The last point is the latest change, kept until the next `stride`-th one replaces it. */
  #lastKept = true;
  #stride = 1;
  #changes = 0;
  #retried = 0;
  #resubmitted = 0;
  readonly #rounds = new Set<number>();
  #before = 0;
  #startedAt: number | undefined;
  #waitingFirstIntent = false;
  #reading: Promise<void> = Promise.resolve();
  /** Instances whose intent the last start journaled and no record has answered since: bounded by its concurrency, and its unknowns. */
  readonly #sending = new Set<string>();

  constructor(journal: string, steps: readonly PlannedStep[], options: { maxPoints?: number } = {}) {
    this.#journal = journal;
    this.#steps = steps;
    this.#maxPoints = Math.max(4, options.maxPoints ?? MAX_POINTS);
  }

  /** Reads the records written since the last read; one read at a time (a second waits for the first). */
  update(): Promise<void> {
    const read = this.#reading.then(() => this.#read());
    this.#reading = read.catch(() => undefined);
    return read;
  }

  async #read(): Promise<void> {
    const handle = await open(this.#journal, 'r').catch(() => undefined);
    if (handle === undefined) return;
    try {
      const size = (await handle.stat()).size;
      // Let go, and not grown since: nothing to read.
      if (this.#fold === undefined && size === this.#size) return;
      // Let go and grown (a resume), or shorter than what was read: read again from the start.
      if (this.#fold === undefined || size < this.#offset) this.#reset();
      this.#size = size;
      const fold = (this.#fold ??= new RunFold(this.#steps));
      let want = READ_BYTES;
      // Bounded: each turn moves the offset on, or grows the read, which stops at MAX_READ.
      while (this.#offset < size) {
        const length = Math.min(want, size - this.#offset);
        const buffer = Buffer.alloc(length);
        const { bytesRead } = await handle.read(buffer, 0, length, this.#offset);
        const end = buffer.subarray(0, bytesRead).lastIndexOf(0x0a);
        if (end === -1) {
          // A line still being written, or one longer than the read: read more of it, or wait.
          if (this.#offset + bytesRead >= size || want >= MAX_READ) break;
          want *= 2;
          continue;
        }
        for (const record of parseJournal(buffer.subarray(0, end + 1)).records) this.#apply(fold, record);
        this.#offset += end + 1;
        want = READ_BYTES;
      }
    } finally {
      await handle.close();
    }
  }

  /** Lets the fold go (the run ended): the points stay; a later read starts over. */
  release(): void {
    this.#fold = undefined;
  }

  get points(): SpendPoints {
    const p = this.#points;
    return { t: [...p.t], committed: [...p.committed], charged: [...p.charged], net: [...p.net] };
  }

  get retries(): JournalRetries {
    return { retried: this.#retried, resubmitted: this.#resubmitted, rounds: this.#rounds.size };
  }

  /**
   * The last start's pace; undefined when the fold was let go. An intent this start journaled with
   * no answer yet is being sent, as progress counts it: in flight, not ended, though the journal
   * alone (and so the report) calls it unknown.
   */
  get pace(): StartPace | undefined {
    const fold = this.#fold;
    if (fold === undefined) return undefined;
    const { ended, total } = endedOf(fold);
    const sending = [...this.#sending].filter((id) => fold.status(id) === 'unknown').length;
    return { ended: ended - sending, total, before: this.#before, startedAt: this.#startedAt };
  }

  #reset(): void {
    this.#fold = undefined;
    this.#offset = 0;
    this.#points = emptyPoints();
    this.#lastKept = true;
    this.#stride = 1;
    this.#changes = 0;
    this.#retried = 0;
    this.#resubmitted = 0;
    this.#rounds.clear();
    this.#before = 0;
    this.#startedAt = undefined;
    this.#waitingFirstIntent = false;
    this.#sending.clear();
  }

  #apply(fold: RunFold, record: JournalRecord): void {
    fold.apply(record);
    // Any answer or new start of an instance: no longer being sent.
    if (record.type !== 'intent' && 'instance' in record && typeof record.instance === 'string') this.#sending.delete(record.instance);
    switch (record.type) {
      case 'run_started':
        this.#sending.clear();
        this.#before = endedOf(fold).ended;
        this.#startedAt = undefined;
        this.#waitingFirstIntent = true;
        break;
      case 'intent':
        if (this.#waitingFirstIntent && record.at !== undefined) this.#startedAt = record.at;
        this.#waitingFirstIntent = false;
        this.#sending.add(record.instance);
        break;
      case 'retry':
        if (record.sameKey === true) this.#resubmitted++;
        else this.#retried++;
        if (record.round !== undefined) this.#rounds.add(record.round);
        break;
      case 'reroll':
        if (record.round !== undefined) this.#rounds.add(record.round);
        break;
      default:
        break;
    }
    if (record.at === undefined) return;
    const money = fold.money();
    const p = this.#points;
    const last = p.t.length - 1;
    const edge = record.type === 'run_started' || record.type === 'run_finished';
    const same =
      last >= 0 && p.committed[last] === money.committedUsd && p.charged[last] === money.estimatedUsd && p.net[last] === money.netUsd;
    if (same && !edge) return;
    this.#add(record.at / 1000, money.committedUsd, money.estimatedUsd, money.netUsd, edge);
  }

  #add(t: number, committed: number, charged: number, net: number, edge: boolean): void {
    const p = this.#points;
    const last = p.t.length - 1;
    // Records of one instant (a group commit) make one point: the last of them.
    if (last >= 0 && p.t[last] === t) {
      p.committed[last] = committed;
      p.charged[last] = charged;
      p.net[last] = net;
      return;
    }
    this.#changes++;
    const keep = edge || this.#changes % this.#stride === 0;
    if (!this.#lastKept) {
      p.t[last] = t;
      p.committed[last] = committed;
      p.charged[last] = charged;
      p.net[last] = net;
    } else {
      p.t.push(t);
      p.committed.push(committed);
      p.charged.push(charged);
      p.net.push(net);
    }
    this.#lastKept = keep;
    if (p.t.length > this.#maxPoints) {
      for (const list of [p.t, p.committed, p.charged, p.net]) {
        const kept = list.filter((_, i) => i % 2 === 0 || i === list.length - 1);
        list.splice(0, list.length, ...kept);
      }
      this.#stride *= 2;
    }
  }
}
