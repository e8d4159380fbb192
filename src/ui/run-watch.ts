/**
 * The runs `genpipe ui` lists, kept current by watching the run folders.
 *
 * Each run's figures are `genpipe runs`'s own (report/run-list.ts: runListing, which reads the
 * summary.json each run keeps current, and replays the journal only for a run without one), worked
 * out again only when its journal or its summary changes (size or mtime), or its lock is taken or
 * let go, so a page open on a thousand finished runs costs a few stats per run per tick. A run is `running` while its pipeline's lock is held for it; the lock's owner
 * names its host. The watch ticks only while someone listens (a page's event stream), and keeps
 * one entry per run directory: nothing grows while a page is open.
 */
import { runFile } from '../run/files/run-layout.js';
import { statSync, type Stats } from 'node:fs';
import { dirname, join } from 'node:path';
import { notStartedListing, pipelineFolders, runListing, type RunListing } from '../report/run-list.js';
import { NOT_STARTED_FILE, readNotStarted } from '../report/not-started-list.js';
import { readPipelineLock } from '../run/lock/lock.js';
import { formatDuration } from '../report/progress.js';
import { formatCount, formatSpend, formatUsd } from '../util/format-usd.js';

/** A run as the page shows it: `genpipe runs`'s figures, its key, and the money already formatted (one formatter). */
export interface UiRun extends RunListing {
  /** `<root index>/<pipeline>/<run id>`: the run's address in the ui. */
  key: string;
  running: boolean;
  /** The machine that holds the run's lock, when it does; null when not known. */
  host: string | null;
  /** What the page prints, made by util/format-usd.ts and report/progress.ts. */
  text: {
    committed: string;
    charged: string;
    net: string;
    unknown: string;
    unpriced: string;
    budget: string;
    duration: string;
    done: string;
  };
}

interface Entry {
  signature: string;
  listing: RunListing;
}

/** What changed since the last look: runs new or changed, and the keys of runs gone. */
export interface RunChanges {
  changed: UiRun[];
  gone: string[];
}

export function uiRun(listing: RunListing, key: string, holder: { runId: string; host: string } | undefined, now = Date.now()): UiRun {
  const running = holder?.runId === listing.runId && !listing.status.startsWith('skipped') && !listing.status.startsWith('refused');
  const end = running ? now : listing.finishedAt;
  return {
    ...listing,
    key,
    running,
    status: running ? 'running' : listing.status,
    host: running ? (holder?.host ?? null) : null,
    text: {
      committed: formatUsd(listing.committedUsd),
      charged: formatUsd(listing.estimatedUsd),
      net: formatSpend({ netUsd: listing.netUsd, unpricedInstances: listing.unpricedInstances }),
      unknown: formatUsd(listing.unknownUsd),
      unpriced: formatCount(listing.unpricedInstances),
      budget: listing.budgetUsd === null ? 'none' : formatUsd(listing.budgetUsd),
      duration: listing.startedAt === null || end === null ? '' : formatDuration(Math.max(0, end - listing.startedAt)),
      done: `${formatCount(listing.completed)}/${formatCount(listing.instances)}`,
    },
  };
}

/** Runs listed at once in a look. */
const LISTING_CONCURRENCY = 16;

/** Who holds a pipeline's lock, when someone does. */
async function holderOf(pipelineDir: string): Promise<{ runId: string; host: string } | undefined> {
  const lock = await readPipelineLock(join(pipelineDir, '.lock')).catch(() => undefined);
  return lock?.state === 'held' && lock.owner ? lock.owner : undefined;
}

/**
 * A file's stat, or undefined when it is not there. At once: a stat takes microseconds, far less
 * than a round trip through the thread pool, and a look at a thousand runs makes three thousand.
 */
function statOf(path: string): Stats | undefined {
  try {
    return statSync(path, { throwIfNoEntry: false });
  } catch {
    return undefined;
  }
}

const signatureOfStat = (s: Stats | undefined): string => (s === undefined ? '-' : `${s.size}:${s.mtimeMs}`);

async function signatureOf(path: string): Promise<string> {
  return Promise.resolve(signatureOfStat(statOf(path)));
}

/**
 * A run's journal as the watch tells its changes: size and time. Every cell of the run's gallery
 * comes from a journal record, so a cell that changed has changed it. Read at once, not from the
 * last look: the watch looks only while a page follows it, and a gallery alone in its tab does not.
 */
export const journalSignature = (dir: string): string => signatureOfStat(statOf(runFile(dir, 'journal')));

export class RunWatch {
  readonly #roots: readonly string[];
  readonly #entries = new Map<string, Entry>();
  readonly #notStarted = new Map<string, { signature: string; keys: string[] }>();
  /** The last runs sent, by key, as the page has them. */
  readonly #shown = new Map<string, UiRun>();
  readonly #listeners = new Set<(changes: RunChanges) => void>();
  readonly #intervalMs: number;
  #timer: NodeJS.Timeout | undefined;
  #looking: Promise<RunChanges> | undefined;

  constructor(roots: readonly string[], options: { intervalMs?: number } = {}) {
    this.#roots = roots;
    this.#intervalMs = options.intervalMs ?? 1_000;
  }

  /** Every run, newest first (by run id, as `genpipe runs`). */
  async runs(): Promise<UiRun[]> {
    await this.look();
    return this.listed();
  }

  /** Every run as last seen, newest first: what the listeners have been told so far, no look. */
  listed(): UiRun[] {
    return [...this.#shown.values()].sort((a, b) => b.runId.localeCompare(a.runId) || a.key.localeCompare(b.key));
  }

  /** The run of a key, as last seen; a run not seen yet is looked at alone, not with every run of every folder. */
  async run(key: string): Promise<UiRun | undefined> {
    if (!this.#shown.has(key)) {
      const alone = await this.#lookOne(key).catch(() => undefined);
      if (alone === undefined) await this.look();
      else {
        // Shown from now on, so the pages that follow the list hear of it now: a later look finds it unchanged.
        this.#shown.set(key, alone);
        this.#tell({ changed: [alone], gone: [] });
      }
    }
    return this.#shown.get(key);
  }

  /** One run directory's run, by its key (`<root index>/<pipeline>/<run id>`); undefined when it is no run directory. */
  async #lookOne(key: string): Promise<UiRun | undefined> {
    const [index, pipeline, runId, ...rest] = key.split('/');
    const root = this.#roots[Number(index)];
    if (root === undefined || pipeline === undefined || runId === undefined || rest.length > 0 || !/^\d+$/.test(index ?? ''))
      return undefined;
    // Only names the folders list (no dot-names, as a look skips them): the request's text never becomes a path of its own.
    if (!(await pipelineFolders(root)).includes(pipeline)) return undefined;
    const pipelineDir = join(root, pipeline);
    if (!(await pipelineFolders(pipelineDir)).includes(runId)) return undefined;
    const holder = await holderOf(pipelineDir);
    const listing = await this.#listing(pipelineDir, pipeline, runId, holder?.runId);
    return listing && uiRun(listing, key, holder);
  }

  /** Calls `listener` with each change until the returned function is called. */
  subscribe(listener: (changes: RunChanges) => void): () => void {
    this.#listeners.add(listener);
    this.#schedule();
    return () => {
      this.#listeners.delete(listener);
      if (this.#listeners.size === 0 && this.#timer !== undefined) {
        clearTimeout(this.#timer);
        this.#timer = undefined;
      }
    };
  }

  close(): void {
    this.#listeners.clear();
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #schedule(): void {
    if (this.#timer !== undefined || this.#listeners.size === 0) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.look()
        .catch(() => undefined)
        .finally(() => this.#schedule());
    }, this.#intervalMs);
    this.#timer.unref();
  }

  /**
   * One look at every root; one at a time (a second caller shares the first's). What it finds
   * changed is told to every listener, whoever asked: a look for the runs list moves what the next
   * look compares with, so a change it found and kept to itself would never reach a page.
   */
  look(): Promise<RunChanges> {
    this.#looking ??= this.#lookOnce().finally(() => (this.#looking = undefined));
    return this.#looking;
  }

  async #lookOnce(): Promise<RunChanges> {
    const seen = new Set<string>();
    const changed: UiRun[] = [];
    for (const [index, root] of this.#roots.entries())
      for (const pipeline of await pipelineFolders(root)) {
        const pipelineDir = join(root, pipeline);
        const holder = await holderOf(pipelineDir);
        for (const listing of await this.#pipelineRuns(pipelineDir, pipeline, holder?.runId)) {
          const run = uiRun(listing, `${index}/${pipeline}/${listing.runId}`, holder);
          seen.add(run.key);
          const before = this.#shown.get(run.key);
          if (before !== undefined && sameFigures(before, run)) continue;
          this.#shown.set(run.key, run);
          changed.push(run);
        }
      }
    const gone = [...this.#shown.keys()].filter((key) => !seen.has(key));
    for (const key of gone) this.#shown.delete(key);
    this.#tell({ changed, gone });
    return { changed, gone };
  }

  #tell(changes: RunChanges): void {
    if (changes.changed.length === 0 && changes.gone.length === 0) return;
    for (const listener of this.#listeners)
      try {
        listener(changes);
      } catch {
        // One page's failure is its own: the others are still told, and the look stands.
      }
  }

  /** A run's listing: the one seen before while its files and its lock are as they were, else read again. */
  async #listing(pipelineDir: string, pipeline: string, runId: string, heldFor: string | undefined): Promise<RunListing | undefined> {
    const dir = join(pipelineDir, runId);
    // A running run's summary is read only while its lock is held: taking or letting go of it is a change too.
    const [plan, journal, summary] = (['plan', 'journal', 'summary'] as const).map((file) => statOf(runFile(dir, file)));
    const signature = `${[plan, journal, summary].map(signatureOfStat).join('|')}|${heldFor === runId ? 'held' : ''}`;
    const entry = this.#entries.get(dir);
    if (entry?.signature === signature) return entry.listing;
    const known = { plan: plan !== undefined, journalBytes: journal?.size };
    const listing = await runListing(dirname(pipelineDir), pipeline, runId, undefined, known).catch(() => undefined);
    if (listing === undefined) this.#entries.delete(dir);
    else this.#entries.set(dir, { signature, listing });
    return listing;
  }

  async #pipelineRuns(pipelineDir: string, pipeline: string, heldFor: string | undefined): Promise<RunListing[]> {
    const runIds = await pipelineFolders(pipelineDir);
    const live = new Set(runIds.map((runId) => join(pipelineDir, runId)));
    // A few runs at a time: each is a handful of small reads, which wait on the disk, not the CPU.
    const listings: (RunListing | undefined)[] = new Array<RunListing | undefined>(runIds.length);
    let next = 0;
    const worker = async (): Promise<void> => {
      for (let i = next++; i < runIds.length; i = next++)
        listings[i] = await this.#listing(pipelineDir, pipeline, runIds[i] as string, heldFor);
    };
    await Promise.all(Array.from({ length: Math.min(LISTING_CONCURRENCY, runIds.length) }, worker));
    const out = listings.filter((listing): listing is RunListing => listing !== undefined);
    for (const dir of this.#entries.keys()) if (dir.startsWith(`${pipelineDir}/`) && !live.has(dir)) this.#entries.delete(dir);
    const signature = await signatureOf(join(pipelineDir, NOT_STARTED_FILE));
    const known = this.#notStarted.get(pipelineDir);
    if (known?.signature !== signature) {
      const records = await readNotStarted(pipelineDir);
      for (const key of [...this.#entries.keys()]) if (key.startsWith(`${pipelineDir}#`)) this.#entries.delete(key);
      this.#notStarted.set(pipelineDir, { signature, keys: records.map((r) => r.id) });
      for (const record of records)
        this.#entries.set(`${pipelineDir}#${record.id}`, { signature, listing: notStartedListing(dirname(pipelineDir), pipeline, record) });
    }
    for (const [key, entry] of this.#entries) if (key.startsWith(`${pipelineDir}#`)) out.push(entry.listing);
    return out;
  }
}

/** Equal but for a running run's duration, which moves at every look: sent again when something else does. */
function sameFigures(a: UiRun, b: UiRun): boolean {
  const plain = (run: UiRun): string => JSON.stringify({ ...run, text: { ...run.text, duration: run.running ? '' : run.text.duration } });
  return plain(a) === plain(b);
}
