/**
 * One run per pipeline at a time, also across hosts that share the runs directory (reliability
 * rule 23).
 *
 * On disk, `runs/<pipeline>/.lock/` is a directory of numbered generations:
 *
 *   .lock/g-7/owner.json   {pid, host, runId, startedAt} of whoever took generation 7
 *   .lock/g-7/released     present once that owner released it
 *   .lock/tmp-<uuid>/      a generation being prepared (renamed to g-N when claimed)
 *
 * The highest generation is the lock. It is held unless it is released or stale; its holder
 * refreshes its mtime every `refreshMs` (the heartbeat). It is stale when:
 *   - its mtime is older than `staleMs` (any host: the holder stopped refreshing), or
 *   - its owner is on this host and that pid is not alive (at once: a crashed run on this machine).
 * A pid is never checked for another host: it means nothing here.
 *
 * Taking the lock (free, stale, or deliberately broken) is one rename of a prepared directory,
 * owner.json already inside, to `g-<highest+1>`. A rename onto an existing non-empty directory
 * fails, so of any number of processes racing for the same generation exactly one wins, and no
 * reader ever sees a generation without its owner. Nothing is ever removed to make room: the
 * classic "remove the stale lock, then create it" (or "rename it to a tombstone, then create it")
 * lets a process that judged the *old* lock stale remove the *new* one another process has just
 * created, and both run. A generation number is never reused while it is the highest, so a
 * decision about generation N can only ever lead to a claim of N+1, which exists once someone won
 * it. (Older generations are cleaned up; a slow process that recreates one sees the higher one
 * when it checks and backs off.)
 *
 * Releasing writes `released` into our own generation; it cannot touch a generation someone else
 * took over. So `.lock/` stays after a release (list runs without dot-names): removing it would
 * restart the numbering, and a slow process's old decision could then win a new generation. Our own code never leaves an empty generation, but one left by a torn write (a crash
 * on a filesystem without ordering) or by hand has no owner and goes stale by the mtime rule, like
 * everything else.
 *
 * The format before this one was a plain `.lock` FILE holding the owner; one found at the path is
 * judged by its own rules (below) and, once stale, replaced by the directory.
 *
 * Across hosts the mtime comparison assumes clocks agree to well within `staleMs` (NTP does).
 * Why our own code and not proper-lockfile: its stale takeover is exactly the remove-then-create
 * race above (moxystudio/node-proper-lockfile#121, still open; 4.1.2 is still its latest
 * release), and it has no owner record and no pid rule, which we would have to add around it.
 * With that takeover put in place of ours, test/run/lock/lock.test.ts's race had two or more winners in
 * 123 to 135 of 300 trials (two runs); with rename-to-tombstone-then-create, in 23 to 47.
 */
import { writeFileSync } from 'node:fs';
import { processAlive } from '../../util/process-alive.js';
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { mkdir, open, readdir, readFile, rename, rm, rmdir, stat, unlink, utimes, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { abortError, sleep } from '../../api/sleep.js';
import { GenpipeError } from '../../api/errors.js';

export type OverlapPolicy = 'skip' | 'wait' | 'allow';

export interface LockOwner {
  pid: number;
  host: string;
  runId: string;
  startedAt: string;
}

export class LockedError extends GenpipeError {
  override readonly name = 'LockedError';
  constructor(
    readonly owner: LockOwner | undefined,
    path: string,
  ) {
    super(
      'locked',
      owner
        ? `Another run of this pipeline holds the lock: run ${owner.runId}, pid ${owner.pid} on ${owner.host}, since ${owner.startedAt} (${path}).`
        : `Another run of this pipeline holds the lock ${path}.`,
    );
  }
}

/** Our lock was taken over (stale to someone, or broken with breakLock) or removed while we held it. */
export class LockLostError extends GenpipeError {
  override readonly name = 'LockLostError';
  constructor(
    /** Who holds it now, when known. */
    readonly owner: LockOwner | undefined,
    path: string,
    cause?: unknown,
  ) {
    super(
      'locked',
      owner
        ? `This run lost its lock ${path} to run ${owner.runId}, pid ${owner.pid} on ${owner.host}, since ${owner.startedAt}.`
        : `This run lost its lock ${path}.`,
      cause === undefined ? {} : { cause },
    );
  }
}

/**
 * True when a lost lock (its signal's reason) went to this very run, a resume that took it over, or
 * to a holder nobody can name: then this process must write nothing more to the run's directory. A
 * new run of the pipeline that took the lock leaves this run's directory to this run.
 */
export function lostToThisRun(reason: unknown, runId: string): boolean {
  const owner = reason instanceof LockLostError ? reason.owner : undefined;
  return owner === undefined || owner.runId === runId;
}

/** The owner whose lock we replaced, and why we could. */
export interface DisplacedOwner {
  /** Undefined when the lock had no readable owner (a torn write). */
  owner: LockOwner | undefined;
  /** `stale`: its process was gone or it stopped refreshing; `broken`: it was live, taken with breakLock. */
  reason: 'stale' | 'broken';
  /** Milliseconds since its holder last refreshed it. */
  ageMs: number;
}

export interface PipelineLock {
  /** Marks our generation released. Never touches a lock someone else took over from us. */
  release(): Promise<void>;
  /**
   * Aborts, with a LockLostError as its reason, when the heartbeat finds the lock taken over or
   * gone (or cannot refresh it for `staleMs`). Never aborts for `allow`. Combine it with the run's
   * signal so a run that lost its lock stops.
   */
  readonly signal: AbortSignal;
  /** The lock we took over, if the lock was not free; undefined for a free lock and for `allow`. */
  readonly displaced: DisplacedOwner | undefined;
  /**
   * The fencing check: true while our generation is still the highest. A run
   * asks it right before each spending request and journal append, so a holder that was displaced
   * while it was paused (SIGSTOP, a long GC, a laptop lid) stops before it sends anything more,
   * whatever its heartbeat timer has not seen yet. A lost lock also aborts `signal`. Within a
   * lease (`leaseMs`) of the last time it saw its generation as the highest, it answers from
   * that sight, since no new holder may spend that soon (LEASE_MS says why); `fresh` always looks.
   */
  check(options?: { fresh?: boolean }): Promise<boolean>;
  /** release(), synchronously, for a process that must end at once (no heartbeat is awaited). */
  releaseSync(): void;
}

export interface LockOptions {
  /** Take the lock even when another run holds it and is alive. Default false. The displaced owner is in `displaced`. */
  breakLock?: boolean;
  /**
   * With breakLock, break the lock of a holder alive on this host too (its pid answers). Default
   * false: that is refused with its pid, since the holder is a live run on this very machine.
   */
  force?: boolean;
  /** A lock not refreshed for this many milliseconds is stale, on any host. Default 60_000. */
  staleMs?: number;
  /** The holder refreshes its lock every this many milliseconds; at most staleMs / 2. Default staleMs / 6 (10_000). */
  refreshMs?: number;
  /** `wait` looks again every this many milliseconds. Default 1_000. */
  pollMs?: number;
  /** `wait` gives up (LockedError) after this many milliseconds. Default: waits until `signal` aborts. */
  maxWaitMs?: number;
  /** This machine's name, as written in the owner record and compared with others. Default os.hostname(). */
  host?: string;
  /** Called once when the lock is lost (same news as `signal`). */
  onCompromised?: (error: LockLostError) => void;
  /** Milliseconds since the epoch; what mtimes are written with and compared to. Default Date.now (tests inject one). */
  clock?: () => number;
  /**
   * How long a confirmation that our generation is the highest answers `check()` without listing
   * the lock again. Default and most 1_000 (below the 2 s a breaking holder waits), and at most a tenth of staleMs; 0 lists the lock at every check.
   */
  leaseMs?: number;
}

interface ResolvedOptions {
  breakLock: boolean;
  force: boolean;
  staleMs: number;
  refreshMs: number;
  pollMs: number;
  maxWaitMs: number;
  host: string;
  onCompromised: ((error: LockLostError) => void) | undefined;
  clock: () => number;
  leaseMs: number;
}

function resolveOptions(options: LockOptions): ResolvedOptions {
  const o: ResolvedOptions = {
    breakLock: options.breakLock ?? false,
    force: options.force ?? false,
    staleMs: options.staleMs ?? 60_000,
    // A reader that only sets staleMs gets a refresh period that fits it.
    refreshMs: options.refreshMs ?? (options.staleMs === undefined ? 10_000 : options.staleMs / 6),
    pollMs: options.pollMs ?? 1_000,
    maxWaitMs: options.maxWaitMs ?? Number.POSITIVE_INFINITY,
    host: options.host ?? hostname(),
    onCompromised: options.onCompromised,
    clock: options.clock ?? Date.now,
    leaseMs: 0,
  };
  o.leaseMs = Math.max(0, Math.min(options.leaseMs ?? LEASE_MS, LEASE_MS, o.staleMs / 10));
  // Two refreshes must fit in the stale period, or one slow refresh makes a live lock look stale.
  if (!(o.refreshMs > 0 && o.staleMs > 0 && o.refreshMs * 2 <= o.staleMs)) {
    throw new GenpipeError(
      'invalid_input',
      `The lock's refresh period (${o.refreshMs} ms) must be positive and at most half its stale period (${o.staleMs} ms).`,
    );
  }
  if (!(o.pollMs > 0)) throw new GenpipeError('invalid_input', `The lock's poll period must be positive, not ${o.pollMs} ms.`);
  return o;
}

/**
 * The fence's lease (see `check` in hold()). A holder that confirmed at t that its generation is
 * the highest knows no other holder spends before t + LEASE_MS:
 *   - one that breaks a live lock claims after t and waits out our refresh period plus 2 s
 *     (session/run-session.ts) before its first spending request;
 *   - one that takes the lock as stale by its mtime needs our last refresh to be staleMs old, so
 *     the lease also ends once our last refresh is half that old: a margin for clocks of hosts
 *     that disagree, which a healthy holder (refreshing every staleMs / 6) never reaches.
 * So a check within the lease need not list the lock directory again: that listing, once per
 * submit, was 6% of a 10,000-instance run's main thread. Wall-clock time, which keeps running
 * while a process is paused (SIGSTOP, a suspended laptop), so a paused holder looks again.
 */
const LEASE_MS = 1_000;

const GENERATION = /^g-(\d{1,15})$/;
const TMP = /^tmp-/;
const OWNER_FILE = 'owner.json';
const RELEASED_FILE = 'released';
/**
 * Claims lost in one attempt before we report the lock as held. Every lost claim means another
 * process won a generation, so this is reached only under a storm of takeovers; it bounds the loop.
 */
const MAX_CLAIMS = 16;

function code(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException | undefined)?.code;
}

function parseOwner(text: string): LockOwner | undefined {
  try {
    const o = JSON.parse(text) as Partial<LockOwner>;
    // pid 0 or negative would make kill() signal a process group: not an owner.
    if (typeof o.pid !== 'number' || !Number.isSafeInteger(o.pid) || o.pid <= 0) return undefined;
    if (typeof o.host !== 'string' || o.host === '' || typeof o.runId !== 'string' || typeof o.startedAt !== 'string') return undefined;
    return { pid: o.pid, host: o.host, runId: o.runId, startedAt: o.startedAt };
  } catch {
    return undefined;
  }
}

async function readOwner(file: string): Promise<LockOwner | undefined> {
  try {
    return parseOwner(await readFile(file, 'utf8'));
  } catch {
    return undefined;
  }
}

function highestGeneration(names: string[]): number {
  let max = 0;
  for (const name of names) {
    const m = GENERATION.exec(name);
    if (m) max = Math.max(max, Number(m[1]));
  }
  return max;
}

async function listing(container: string): Promise<string[]> {
  try {
    return await readdir(container);
  } catch (error) {
    if (code(error) === 'ENOENT') return [];
    throw error;
  }
}

/** What is at the lock path now. `generation` 0 with a legacy file: the old format. */
type Seen =
  | { state: 'free'; generation: number }
  | { state: 'held' | 'stale'; generation: number; owner: LockOwner | undefined; ageMs: number; legacy: boolean };

async function inspectGeneration(container: string, generation: number, o: ResolvedOptions): Promise<Seen | undefined> {
  const dir = join(container, `g-${generation}`);
  let mtimeMs: number;
  try {
    mtimeMs = (await stat(dir)).mtimeMs;
  } catch (error) {
    // Cleaned up after a newer generation was taken: look again.
    if (code(error) === 'ENOENT') return undefined;
    throw error;
  }
  try {
    await stat(join(dir, RELEASED_FILE));
    return { state: 'free', generation };
  } catch (error) {
    if (code(error) !== 'ENOENT') throw error;
  }
  const owner = await readOwner(join(dir, OWNER_FILE));
  const ageMs = o.clock() - mtimeMs;
  const stale = ageMs > o.staleMs || (owner !== undefined && owner.host === o.host && !processAlive(owner.pid));
  return { state: stale ? 'stale' : 'held', generation, owner, ageMs, legacy: false };
}

/**
 * The old format, a `.lock` file. Its writers never refresh it, so on this host only the pid
 * decides (the mtime would free a long run's lock after staleMs); another host's, or one whose
 * owner was never written, goes stale by the mtime rule, so a crashed writer does not wedge it.
 */
async function inspectLegacy(path: string, mtimeMs: number, o: ResolvedOptions): Promise<Seen> {
  const owner = await readOwner(path);
  const ageMs = o.clock() - mtimeMs;
  const stale = owner !== undefined && owner.host === o.host ? !processAlive(owner.pid) : ageMs > o.staleMs;
  return { state: stale ? 'stale' : 'held', generation: 0, owner, ageMs, legacy: true };
}

async function inspect(path: string, o: ResolvedOptions): Promise<Seen> {
  // A bounded loop: each retry means the highest generation was cleaned up under us, i.e. a
  // newer one exists, which the next listing sees.
  for (let i = 0; i < MAX_CLAIMS; i++) {
    let names: string[];
    try {
      names = await readdir(path);
    } catch (error) {
      if (code(error) === 'ENOENT') return { state: 'free', generation: 0 };
      // The old format: a file.
      if (code(error) === 'ENOTDIR') {
        let mtimeMs: number;
        try {
          mtimeMs = (await stat(path)).mtimeMs;
        } catch (again) {
          if (code(again) === 'ENOENT') continue;
          throw again;
        }
        return inspectLegacy(path, mtimeMs, o);
      }
      throw error;
    }
    const generation = highestGeneration(names);
    if (generation === 0) return { state: 'free', generation: 0 };
    const seen = await inspectGeneration(path, generation, o);
    if (seen) return seen;
  }
  throw new GenpipeError('locked', `The lock ${path} kept changing while it was read.`);
}

/** What the lock at `path` looks like to this process: free, held (by whom) or stale. For status output and tests. */
export async function readPipelineLock(
  path: string,
  options: LockOptions = {},
): Promise<{ state: 'free' } | { state: 'held' | 'stale'; owner: LockOwner | undefined; ageMs: number; legacy: boolean }> {
  const seen = await inspect(path, resolveOptions(options));
  if (seen.state === 'free') return { state: 'free' };
  return { state: seen.state, owner: seen.owner, ageMs: seen.ageMs, legacy: seen.legacy };
}

async function writeOwner(dir: string, owner: LockOwner): Promise<void> {
  await writeFile(join(dir, OWNER_FILE), `${JSON.stringify(owner)}\n`, { flag: 'wx', mode: 0o644 });
}

/**
 * Makes the winner's owner record durable. Only the winner pays for it (racers that lose never
 * do); a power loss before it leaves an empty owner, which goes stale by the mtime rule.
 */
async function syncOwner(dir: string): Promise<void> {
  const handle = await open(join(dir, OWNER_FILE), 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

async function setMtime(path: string, ms: number): Promise<void> {
  const s = ms / 1000;
  await utimes(path, s, s);
}

/**
 * Removes a generation or prepared directory: its two known files, then the directory. Cheaper
 * than a recursive rm on the hot path of a race; anything unexpected inside falls back to one.
 */
async function removeDir(dir: string): Promise<void> {
  for (const name of [OWNER_FILE, RELEASED_FILE]) {
    await unlink(join(dir, name)).catch((error: unknown) => {
      if (code(error) !== 'ENOENT') throw error;
    });
  }
  try {
    await rmdir(dir);
  } catch (error) {
    if (code(error) === 'ENOENT') return;
    if (code(error) !== 'ENOTEMPTY' && code(error) !== 'EEXIST') throw error;
    await rm(dir, { recursive: true, force: true });
  }
}

/** Best effort: leftovers only cost disk space, and a failure here must not fail the run that just won. */
async function cleanUp(container: string, generation: number, o: ResolvedOptions): Promise<void> {
  let names: string[];
  try {
    names = await readdir(container);
  } catch {
    return;
  }
  for (const name of names) {
    const m = GENERATION.exec(name);
    const full = join(container, name);
    try {
      if (m && Number(m[1]) < generation) {
        await removeDir(full);
      } else if (TMP.test(name) && o.clock() - (await stat(full)).mtimeMs > o.staleMs) {
        // Someone's claim that crashed before its rename; a live claim's is fresh.
        await removeDir(full);
      }
    } catch {
      // Another process cleaned it first.
    }
  }
}

type Attempt =
  | { won: true; generation: number; displaced: DisplacedOwner | undefined; confirmedAt: number }
  | { won: false; owner: LockOwner | undefined };

/** Claims generations of one lock for one owner; its prepared owner directory is reused across claims. */
class Claimer {
  #prepared: string | undefined;
  /** When the last won claim saw its generation as the highest (o.clock()). */
  confirmedAt = 0;
  constructor(
    readonly path: string,
    readonly me: LockOwner,
    readonly o: ResolvedOptions,
  ) {}

  /** Tries to make `g-<generation>` ours. False when someone else has it or a higher one exists. */
  async claim(generation: number): Promise<boolean> {
    const { path, o } = this;
    await mkdir(path).catch((error: unknown) => {
      if (code(error) !== 'EEXIST') throw error;
    });
    if (this.#prepared === undefined) {
      // Prepared inside the container, so the claim is a rename within one directory.
      const dir = join(path, `tmp-${randomUUID()}`);
      try {
        await mkdir(dir);
      } catch (error) {
        // ENOTDIR/ENOENT: an old-format writer put its file back after we removed it; look again.
        if (code(error) === 'ENOTDIR' || code(error) === 'ENOENT') return false;
        throw error;
      }
      this.#prepared = dir;
      await writeOwner(dir, this.me);
    }
    const claimed = join(path, `g-${generation}`);
    try {
      // Fresh by our clock from the moment it appears, whatever a rename does to mtimes.
      await setMtime(this.#prepared, o.clock());
      await rename(this.#prepared, claimed);
    } catch (error) {
      // ENOENT: our prepared directory is gone (cleaned up as a crashed claim by a process whose
      // clock runs far ahead, or by hand): prepare another next time.
      if (code(error) === 'ENOENT') this.#prepared = undefined;
      // ENOTEMPTY/EEXIST: someone else won this generation.
      if (['ENOENT', 'ENOTEMPTY', 'EEXIST'].includes(code(error) ?? '')) return false;
      throw error;
    }
    this.#prepared = undefined;
    try {
      await setMtime(claimed, o.clock());
    } catch (error) {
      // Cleaned up already: someone broke or took over the generation we had just won.
      if (code(error) === 'ENOENT') return false;
      throw error;
    }
    // A slow process can recreate a number that was cleaned up, but only below a higher
    // generation, which is never removed: seeing one means we lost.
    const seenAt = o.clock();
    if (highestGeneration(await listing(path)) !== generation) {
      await removeDir(claimed);
      return false;
    }
    this.confirmedAt = seenAt;
    return true;
  }

  /** Removes the prepared owner of a claim we did not make. Best effort: cleanUp catches leftovers. */
  async dispose(): Promise<void> {
    if (this.#prepared !== undefined) await removeDir(this.#prepared).catch(() => {});
    this.#prepared = undefined;
  }
}

/**
 * For tests only (not exported from the package): one claim of `g-<generation>` as a process
 * makes it that judged `g-<generation - 1>` stale a long time ago. True if it took the lock.
 */
export async function claimGeneration(path: string, generation: number, runId: string, options: LockOptions = {}): Promise<boolean> {
  const o = resolveOptions(options);
  const claimer = new Claimer(path, { pid: process.pid, host: o.host, runId, startedAt: new Date(o.clock()).toISOString() }, o);
  try {
    return await claimer.claim(generation);
  } finally {
    await claimer.dispose();
  }
}

/** One try at the lock: take it if free, stale, or (breakLock) held; otherwise report the holder. */
async function attempt(path: string, me: LockOwner, o: ResolvedOptions): Promise<Attempt> {
  const claimer = new Claimer(path, me, o);
  try {
    // Every lost claim means another process won a generation, so the holder we report next is real.
    for (let claim = 0; claim < MAX_CLAIMS; claim++) {
      const seen = await inspect(path, o);
      if (seen.state === 'held' && !o.breakLock) return { won: false, owner: seen.owner };
      if (seen.state === 'held' && !o.force && seen.owner !== undefined && seen.owner.host === o.host && processAlive(seen.owner.pid)) {
        throw new GenpipeError(
          'locked',
          `--break-lock refused: run ${seen.owner.runId} holds the pipeline's lock and is alive on this host (pid ${seen.owner.pid}, since ${seen.owner.startedAt}). Stop it (kill -INT ${seen.owner.pid}; it stays resumable), or add --force to take the lock from it anyway.`,
        );
      }
      const displaced: DisplacedOwner | undefined =
        seen.state === 'free' ? undefined : { owner: seen.owner, reason: seen.state === 'held' ? 'broken' : 'stale', ageMs: seen.ageMs };
      if (seen.state !== 'free' && seen.legacy) {
        // Only a file is unlinked (unlink fails on a directory), so a slow process that judged the
        // old file stale cannot remove the directory that replaced it.
        await unlink(path).catch((error: unknown) => {
          if (!['ENOENT', 'EISDIR', 'EPERM'].includes(code(error) ?? '')) throw error;
        });
      }
      if (await claimer.claim(seen.generation + 1)) {
        await syncOwner(join(path, `g-${seen.generation + 1}`)).catch((error: unknown) => {
          // Already cleaned up: broken by someone else in the meantime; the heartbeat reports it.
          if (code(error) !== 'ENOENT') throw error;
        });
        await cleanUp(path, seen.generation + 1, o);
        return { won: true, generation: seen.generation + 1, displaced, confirmedAt: claimer.confirmedAt };
      }
    }
    const seen = await inspect(path, o);
    return { won: false, owner: seen.state === 'free' ? undefined : seen.owner };
  } finally {
    await claimer.dispose();
  }
}

function hold(
  path: string,
  generation: number,
  displaced: DisplacedOwner | undefined,
  claimedAt: number,
  o: ResolvedOptions,
): PipelineLock {
  return new HeldLock(path, generation, displaced, claimedAt, o);
}

/** Our generation of a lock: its heartbeat, its fencing check and its release. */
class HeldLock implements PipelineLock {
  readonly #dir: string;
  readonly #controller = new AbortController();
  /** An own property, not a getter: callers spread a lock into a wrapper of it (`{ ...lock, release }`). */
  readonly signal: AbortSignal = this.#controller.signal;
  #stopped = false;
  #timer: NodeJS.Timeout | undefined;
  #beating: Promise<void> = Promise.resolve();
  #lastRefresh: number;
  /** When we last saw our generation as the highest: when we claimed it, to begin with. */
  #confirmedAt: number;

  constructor(
    private readonly path: string,
    private readonly generation: number,
    readonly displaced: DisplacedOwner | undefined,
    claimedAt: number,
    private readonly o: ResolvedOptions,
  ) {
    this.#dir = join(path, `g-${generation}`);
    this.#lastRefresh = claimedAt;
    this.#confirmedAt = claimedAt;
    this.#schedule();
  }

  #leased(): boolean {
    const now = this.o.clock();
    // A clock that stepped back proves nothing about how long ago we looked.
    return now >= this.#confirmedAt && now - this.#confirmedAt < this.o.leaseMs && now < this.#lastRefresh + this.o.staleMs / 2;
  }

  #lose(owner: LockOwner | undefined, cause?: unknown): void {
    if (this.#stopped || this.#controller.signal.aborted) return;
    this.#stopped = true;
    const error = new LockLostError(owner, this.path, cause);
    this.#controller.abort(error);
    try {
      this.o.onCompromised?.(error);
    } catch {
      // The signal carries the same news; a throwing callback must not become an unhandled rejection in a timer.
    }
  }

  async #beat(): Promise<void> {
    try {
      // Taken before the listing: what the listing proves, it proves from then on.
      const seenAt = this.o.clock();
      const names = await listing(this.path);
      const highest = highestGeneration(names);
      if (highest > this.generation) return this.#lose(await readOwner(join(this.path, `g-${highest}`, OWNER_FILE)));
      if (!names.includes(`g-${this.generation}`)) return this.#lose(undefined);
      await setMtime(this.#dir, seenAt);
      this.#lastRefresh = seenAt;
      this.#confirmedAt = seenAt;
    } catch (error) {
      if (code(error) === 'ENOENT') return this.#lose(undefined, error);
      // A passing storage hiccup is survivable until others may see us as stale.
      if (this.o.clock() - this.#lastRefresh >= this.o.staleMs) return this.#lose(undefined, error);
    }
    this.#schedule();
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.#beating = this.#beat();
    }, this.o.refreshMs);
    // The heartbeat alone must not keep a finished process alive.
    this.#timer.unref();
  }

  check = async (options?: { fresh?: boolean }): Promise<boolean> => {
    if (this.#stopped) return !this.#controller.signal.aborted;
    if (options?.fresh !== true && this.#leased()) return true;
    try {
      const seenAt = this.o.clock();
      const highest = highestGeneration(await listing(this.path));
      if (highest > this.generation) {
        this.#lose(await readOwner(join(this.path, `g-${highest}`, OWNER_FILE)));
        return false;
      }
      if (highest === this.generation) this.#confirmedAt = seenAt;
    } catch (error) {
      if (code(error) === 'ENOENT') {
        this.#lose(undefined, error);
        return false;
      }
      // A storage hiccup: the heartbeat decides (it loses the lock once it cannot refresh for staleMs).
    }
    return !this.#controller.signal.aborted;
  };

  releaseSync = (): void => {
    this.#stopped = true;
    clearTimeout(this.#timer);
    try {
      writeFileSync(join(this.#dir, RELEASED_FILE), '', { flag: 'wx' });
    } catch {
      // Released already, or our generation is gone (taken over): nothing of ours to mark.
    }
  };

  release = async (): Promise<void> => {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#beating;
    // Our own generation only: if someone took over, a `released` in our old generation is
    // ignored (only the highest counts), and if it was cleaned up there is nothing to mark.
    await writeFile(join(this.#dir, RELEASED_FILE), '', { flag: 'wx' }).catch((error: unknown) => {
      if (code(error) !== 'EEXIST' && code(error) !== 'ENOENT') throw error;
    });
  };
}

const unlocked: PipelineLock = {
  release: async () => {},
  releaseSync: () => {},
  signal: new AbortController().signal,
  displaced: undefined,
  check: async () => true,
};

/**
 * Takes the lock at `path` for `runId`. `skip` refuses at once (LockedError, exit 4); `wait` polls
 * every `pollMs` until the lock is free or stale, `signal` fires or `maxWaitMs` passes; `allow`
 * takes no lock. With `breakLock` a held lock is taken all the same (its holder's heartbeat then
 * reports it lost); `displaced` names whom we replaced.
 */
export async function acquirePipelineLock(
  path: string,
  runId: string,
  policy: OverlapPolicy,
  signal: AbortSignal,
  options: LockOptions = {},
): Promise<PipelineLock> {
  if (policy === 'allow') return unlocked;
  const o = resolveOptions(options);
  await mkdir(dirname(path), { recursive: true });
  const me: LockOwner = { pid: process.pid, host: o.host, runId, startedAt: new Date(o.clock()).toISOString() };
  const deadline = o.clock() + o.maxWaitMs;
  // Bounded by `signal` and `maxWaitMs`; the holder of a lock we wait for either releases it or
  // stops refreshing it, which makes it stale.
  for (;;) {
    if (signal.aborted) throw abortError(signal);
    const result = await attempt(path, me, o);
    if (result.won) return hold(path, result.generation, result.displaced, result.confirmedAt, o);
    if (policy === 'skip' || o.clock() >= deadline) throw new LockedError(result.owner, path);
    await sleep(Math.min(o.pollMs, Math.max(0, deadline - o.clock())), signal);
  }
}
