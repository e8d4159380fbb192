import { fork, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GenpipeError } from '../../../src/api/errors.js';
import {
  acquirePipelineLock,
  claimGeneration,
  LockedError,
  LockLostError,
  readPipelineLock,
  type LockOwner,
} from '../../../src/run/lock/lock.js';

const dir = mkdtempSync(join(tmpdir(), 'genpipe-lock-'));
const never = new AbortController().signal;
let seq = 0;
const fresh = (): string => join(dir, `p${++seq}`, '.lock');

function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => undefined,
    (error: unknown) => error,
  );
}

/** Sets a file's mtime this many milliseconds into the past. */
function age(path: string, ms: number): void {
  const t = (Date.now() - ms) / 1000;
  utimesSync(path, t, t);
}

// ---- Child processes running test/run/lock/lock-worker.mjs on the built library -------------------

const workerScript = new URL('./lock-worker.mjs', import.meta.url).pathname;
const builtLock = new URL('../../../dist/run/lock/lock.js', import.meta.url).pathname;
const sourceLock = new URL('../../../src/run/lock/lock.ts', import.meta.url).pathname;

interface Reply {
  id: number;
  won: boolean;
  displaced?: { owner: LockOwner | null; reason: string } | null;
  code?: string | null;
  message?: string;
}

interface AcquireRequest {
  path: string;
  runId: string;
  host?: string;
  clockMs?: number;
  staleMs?: number;
  refreshMs?: number;
}

class Worker {
  readonly child: ChildProcess;
  readonly ready: Promise<void>;
  #next = 0;
  #waiting = new Map<number, (reply: Reply) => void>();

  constructor() {
    this.child = fork(workerScript, [], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
    this.ready = new Promise((resolve, reject) => {
      this.child.once('error', reject);
      this.child.once('exit', (code) => reject(new Error(`lock worker exited early (${code})`)));
      this.child.on('message', (msg: Reply | { ready: true }) => {
        if ('ready' in msg) return resolve();
        this.#waiting.get(msg.id)?.(msg);
        this.#waiting.delete(msg.id);
      });
    });
  }

  acquire(request: AcquireRequest): Promise<Reply> {
    const id = ++this.#next;
    return new Promise((resolve) => {
      this.#waiting.set(id, resolve);
      this.child.send({ ...request, id, op: 'acquire' });
    });
  }

  /** Ends the process without releasing anything; resolves once its pid is gone. */
  crash(): Promise<void> {
    return new Promise((resolve) => {
      if (this.child.exitCode !== null) return resolve();
      this.child.once('exit', () => resolve());
      this.child.send({ op: 'exit' });
    });
  }
}

beforeAll(() => {
  // The workers run dist/: a build older than the source would test old code.
  if (!existsSync(builtLock) || statSync(builtLock).mtimeMs < statSync(sourceLock).mtimeMs) {
    throw new Error('dist/run/lock/lock.js is missing or older than src/run/lock/lock.ts: run `npm run build` first (npm test does).');
  }
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('the pipeline lock', () => {
  it('refuses a second run with skip, naming the owner, and frees the lock on release', async () => {
    const path = fresh();
    const first = await acquirePipelineLock(path, 'run-1', 'skip', never);
    const error = await rejection(acquirePipelineLock(path, 'run-2', 'skip', never));
    expect(error).toBeInstanceOf(LockedError);
    expect((error as LockedError).code).toBe('locked');
    expect((error as LockedError).message).toMatch(new RegExp(`run run-1, pid ${process.pid} on ${hostname()}, since `));
    await first.release();
    expect(await readPipelineLock(path)).toEqual({ state: 'free' });
    const second = await acquirePipelineLock(path, 'run-2', 'skip', never);
    expect(second.displaced).toBeUndefined();
    await second.release();
  });

  it('takes over at once a lock whose process on this host is gone', async () => {
    const path = fresh();
    const crashed = new Worker();
    await crashed.ready;
    expect(await crashed.acquire({ path, runId: 'crashed' })).toMatchObject({ won: true });
    await crashed.crash();
    const lock = await acquirePipelineLock(path, 'run-3', 'skip', never);
    expect(lock.displaced).toMatchObject({ reason: 'stale', owner: { runId: 'crashed', pid: crashed.child.pid, host: hostname() } });
    expect(await readPipelineLock(path)).toMatchObject({ state: 'held', owner: { runId: 'run-3', pid: process.pid } });
    await lock.release();
  });

  it('wait: takes the lock once its owner releases it; an abort or maxWaitMs ends the wait', async () => {
    const path = fresh();
    const first = await acquirePipelineLock(path, 'run-1', 'skip', never);
    let acquired = false;
    const waiting = acquirePipelineLock(path, 'run-2', 'wait', never, { pollMs: 10 }).then((lock) => {
      acquired = true;
      return lock;
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(acquired).toBe(false);

    const controller = new AbortController();
    const aborted = rejection(acquirePipelineLock(path, 'run-3', 'wait', controller.signal, { pollMs: 10 }));
    controller.abort();
    expect(await aborted).toMatchObject({ code: 'aborted' });
    expect(await rejection(acquirePipelineLock(path, 'run-4', 'wait', never, { pollMs: 10, maxWaitMs: 30 }))).toBeInstanceOf(LockedError);

    await first.release();
    const second = await waiting;
    expect(await readPipelineLock(path)).toMatchObject({ state: 'held', owner: { runId: 'run-2' } });
    await second.release();
  });

  it('allow takes no lock at all', async () => {
    const path = fresh();
    const first = await acquirePipelineLock(path, 'run-1', 'skip', never);
    const overlapping = await acquirePipelineLock(path, 'run-2', 'allow', never);
    await overlapping.release();
    expect(overlapping.signal.aborted).toBe(false);
    expect(await readPipelineLock(path)).toMatchObject({ state: 'held', owner: { runId: 'run-1' } });
    await first.release();
  });

  it('refuses a refresh period that does not fit twice in the stale period', async () => {
    const error = await rejection(acquirePipelineLock(fresh(), 'run-1', 'skip', never, { staleMs: 100, refreshMs: 60 }));
    expect(error).toBeInstanceOf(GenpipeError);
    expect((error as GenpipeError).code).toBe('invalid_input');
  });

  it("another host's lock is never judged by its pid: refused while refreshed, taken once its refresh stopped for staleMs", async () => {
    const path = fresh();
    const t0 = Date.UTC(2030, 0, 1);
    const staleMs = 60_000;
    const elsewhere = new Worker();
    await elsewhere.ready;
    // Its clock stands at t0, so its lock's mtime says it last refreshed at t0.
    expect(await elsewhere.acquire({ path, runId: 'remote', host: 'elsewhere', clockMs: t0 })).toMatchObject({ won: true });
    // Its pid is gone now; a pid means nothing for another host, and its refresh is 1 s old.
    await elsewhere.crash();
    const soon = { clock: () => t0 + 1_000, staleMs };
    expect(await readPipelineLock(path, soon)).toMatchObject({ state: 'held', owner: { host: 'elsewhere', runId: 'remote' } });
    const refused = await rejection(acquirePipelineLock(path, 'local', 'skip', never, soon));
    expect(refused).toBeInstanceOf(LockedError);
    expect((refused as LockedError).owner).toMatchObject({ host: 'elsewhere', runId: 'remote' });

    const late = { clock: () => t0 + staleMs + 1_000, staleMs };
    const lock = await acquirePipelineLock(path, 'local', 'skip', never, late);
    expect(lock.displaced).toMatchObject({ reason: 'stale', owner: { host: 'elsewhere', runId: 'remote' } });
    await lock.release();
  });

  it('the heartbeat keeps a live lock fresh for another host', async () => {
    const path = fresh();
    let now = Date.UTC(2030, 0, 1);
    const clock = (): number => now;
    const staleMs = 10_000;
    const holder = await acquirePipelineLock(path, 'live', 'skip', never, { host: 'host-a', clock, staleMs, refreshMs: 20 });
    // Time jumps past the stale period: only a refresh after the jump makes the lock fresh again.
    now += 5 * staleMs;
    const observer = { host: 'host-b', clock, staleMs };
    let state = (await readPipelineLock(path, observer)).state;
    // Bounded: about 5 s of real time at most; 20 ms refreshes need far fewer rounds.
    for (let i = 0; i < 250 && state !== 'held'; i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      state = (await readPipelineLock(path, observer)).state;
    }
    expect(state).toBe('held');
    expect(await rejection(acquirePipelineLock(path, 'other', 'skip', never, observer))).toBeInstanceOf(LockedError);
    expect(holder.signal.aborted).toBe(false);
    await holder.release();
  });

  it('breakLock takes a live lock, names whom it displaced; the displaced holder learns it lost, and its release leaves the new lock alone', async () => {
    const path = fresh();
    const lost: LockLostError[] = [];
    const first = await acquirePipelineLock(path, 'run-1', 'skip', never, {
      refreshMs: 10,
      staleMs: 60_000,
      onCompromised: (e) => lost.push(e),
    });
    // The holder is alive on this host (this very process): breaking it takes force.
    await expect(acquirePipelineLock(path, 'run-2', 'skip', never, { breakLock: true })).rejects.toThrow(
      /--break-lock refused: run run-1 holds the pipeline's lock and is alive on this host \(pid \d+/,
    );
    const second = await acquirePipelineLock(path, 'run-2', 'skip', never, { breakLock: true, force: true });
    expect(second.displaced).toMatchObject({ reason: 'broken', owner: { runId: 'run-1', pid: process.pid, host: hostname() } });
    // The first holder's heartbeat (every 10 ms) finds the newer generation.
    // Bounded: about 5 s of real time at most.
    for (let i = 0; i < 250 && !first.signal.aborted; i++) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(first.signal.aborted).toBe(true);
    expect(first.signal.reason).toBeInstanceOf(LockLostError);
    expect((first.signal.reason as LockLostError).owner).toMatchObject({ runId: 'run-2' });
    expect(lost).toHaveLength(1);
    await first.release();
    expect(await readPipelineLock(path)).toMatchObject({ state: 'held', owner: { runId: 'run-2' } });
    const third = await rejection(acquirePipelineLock(path, 'run-3', 'skip', never));
    expect((third as LockedError).owner).toMatchObject({ runId: 'run-2' });
    await second.release();
    expect(await readPipelineLock(path)).toEqual({ state: 'free' });
  });

  it("the fence's check answers from its last sight of the lock for 1 s (the lease), then looks again; a fresh check, a clock that steps back or a refresh half its stale age old looks at once", async () => {
    const HOUR = 3_600_000;
    const staleMs = HOUR;
    // Heartbeat an hour away: only check() can find the broken lock.
    const slow = { staleMs, refreshMs: HOUR / 2 };
    let now = Date.now();
    const clock = (): number => now;
    const path = fresh();
    const held = await acquirePipelineLock(path, 'run-1', 'skip', never, { ...slow, clock });
    const other = await acquirePipelineLock(path, 'run-2', 'skip', never, { ...slow, breakLock: true, force: true });
    // Within the lease: a breaking holder waits at least 2 s before it spends, so this sight still holds.
    now += 999;
    expect(await held.check()).toBe(true);
    expect(held.signal.aborted).toBe(false);
    // The lease is over: the check lists the lock and finds the newer generation.
    now += 1;
    expect(await held.check()).toBe(false);
    expect((held.signal.reason as LockLostError).owner).toMatchObject({ runId: 'run-2' });
    await held.release();

    // A fresh check (the session's last, before it writes the run's files) looks within the lease too.
    now = Date.now();
    const second = await acquirePipelineLock(path, 'run-2b', 'skip', never, { ...slow, breakLock: true, force: true, clock });
    await acquirePipelineLock(path, 'run-2c', 'skip', never, { ...slow, breakLock: true, force: true }).then((l) => l.releaseSync());
    expect(await second.check()).toBe(true);
    expect(await second.check({ fresh: true })).toBe(false);
    await second.release();

    // A clock that stepped back proves nothing about how long ago the lock was seen.
    now = Date.now();
    const third = await acquirePipelineLock(path, 'run-3', 'skip', never, { ...slow, breakLock: true, force: true, clock });
    await acquirePipelineLock(path, 'run-4', 'skip', never, { ...slow, breakLock: true, force: true }).then((l) => l.releaseSync());
    now -= 10;
    expect(await third.check()).toBe(false);
    await third.release();

    // A holder whose last refresh is nearly staleMs old (it was paused) looks at once: a stale
    // takeover needs no wait, so no lease may run past the age at which others may take the lock.
    now = Date.now();
    const fourth = await acquirePipelineLock(path, 'run-5', 'skip', never, { staleMs: 10_000, refreshMs: 5_000, clock });
    // 8.5 s on (its heartbeat runs on real time, 5 s away): the check looks, and sees the lock its own.
    now += 8_500;
    expect(await fourth.check()).toBe(true);
    await acquirePipelineLock(path, 'run-6', 'skip', never, { ...slow, breakLock: true, force: true }).then((l) => l.releaseSync());
    // 0.6 s after that sight, but 9.1 s after its last refresh: past half its stale age, so it looks.
    now += 600;
    expect(await fourth.check()).toBe(false);
    await fourth.release();
    await other.release();
  });

  it('a lock removed from under its holder is reported lost', async () => {
    const path = fresh();
    const lost: LockLostError[] = [];
    const lock = await acquirePipelineLock(path, 'run-1', 'skip', never, { refreshMs: 10, onCompromised: (e) => lost.push(e) });
    rmSync(path, { recursive: true, force: true });
    // Bounded: about 5 s of real time at most.
    for (let i = 0; i < 250 && !lock.signal.aborted; i++) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(lock.signal.reason).toBeInstanceOf(LockLostError);
    expect(lost).toEqual([lock.signal.reason]);
    await lock.release();
    expect(existsSync(path)).toBe(false);
  });

  it('a slow process that recreates a cleaned-up generation below the live one does not get the lock', async () => {
    const path = fresh();
    // Generations 1..4 taken and released, 5 held: 1..4 were cleaned up as each newer one was taken.
    for (let i = 1; i <= 4; i++) await (await acquirePipelineLock(path, `old-${i}`, 'skip', never)).release();
    const live = await acquirePipelineLock(path, 'live', 'skip', never);
    expect(readdirSync(path).filter((n) => n.startsWith('g-'))).toEqual(['g-5']);
    // A process that judged generation 2 stale long ago now claims generation 3.
    expect(await claimGeneration(path, 3, 'slow')).toBe(false);
    expect(await readPipelineLock(path)).toMatchObject({ state: 'held', owner: { runId: 'live' } });
    expect(readdirSync(path).filter((n) => n.startsWith('g-'))).toEqual(['g-5']);
    await live.release();
  });

  describe('what a crash leaves behind never wedges the lock', () => {
    it('an empty old-format .lock file (crash between create and write): refused while recent, taken once stale', async () => {
      const path = fresh();
      mkdirSync(join(path, '..'), { recursive: true });
      writeFileSync(path, '');
      expect(await rejection(acquirePipelineLock(path, 'run-1', 'skip', never))).toBeInstanceOf(LockedError);
      age(path, 61_000);
      const lock = await acquirePipelineLock(path, 'run-1', 'skip', never);
      expect(lock.displaced).toMatchObject({ reason: 'stale', owner: undefined });
      expect(statSync(path).isDirectory()).toBe(true);
      await lock.release();
    });

    it('an old-format .lock file of a dead process on this host is taken at once; of a live one, refused however old', async () => {
      const path = fresh();
      mkdirSync(join(path, '..'), { recursive: true });
      const crashed = new Worker();
      await crashed.ready;
      await crashed.crash();
      writeFileSync(
        path,
        JSON.stringify({ pid: crashed.child.pid, host: hostname(), runId: 'old-crashed', startedAt: '2026-01-01T00:00:00.000Z' }),
      );
      const lock = await acquirePipelineLock(path, 'run-1', 'skip', never);
      expect(lock.displaced).toMatchObject({ reason: 'stale', owner: { runId: 'old-crashed' } });
      await lock.release();

      const other = fresh();
      mkdirSync(join(other, '..'), { recursive: true });
      // An old genpipe never refreshes its file: on this host only its pid says whether it runs.
      writeFileSync(
        other,
        JSON.stringify({ pid: process.pid, host: hostname(), runId: 'old-live', startedAt: '2026-01-01T00:00:00.000Z' }),
      );
      age(other, 3_600_000);
      expect(await rejection(acquirePipelineLock(other, 'run-2', 'skip', never))).toMatchObject({ owner: { runId: 'old-live' } });
    });

    it('a generation whose owner record is empty (torn write): refused while recent, taken once stale', async () => {
      const path = fresh();
      mkdirSync(join(path, 'g-3'), { recursive: true });
      writeFileSync(join(path, 'g-3', 'owner.json'), '');
      expect(await readPipelineLock(path)).toMatchObject({ state: 'held', owner: undefined });
      expect(await rejection(acquirePipelineLock(path, 'run-1', 'skip', never))).toBeInstanceOf(LockedError);
      age(join(path, 'g-3'), 61_000);
      const lock = await acquirePipelineLock(path, 'run-1', 'skip', never);
      expect(lock.displaced).toMatchObject({ reason: 'stale', owner: undefined });
      expect(readdirSync(path).filter((n) => n.startsWith('g-'))).toEqual(['g-4']);
      await lock.release();
    });

    it('an empty lock directory and an abandoned claim are nobody’s lock', async () => {
      const path = fresh();
      mkdirSync(join(path, 'tmp-abandoned'), { recursive: true });
      writeFileSync(
        join(path, 'tmp-abandoned', 'owner.json'),
        JSON.stringify({ pid: 1, host: 'x', runId: 'never-claimed', startedAt: 'x' }),
      );
      age(join(path, 'tmp-abandoned'), 61_000);
      const lock = await acquirePipelineLock(path, 'run-1', 'skip', never);
      expect(lock.displaced).toBeUndefined();
      // The winner cleans up claims that crashed before their rename.
      expect(readdirSync(path)).toEqual(['g-1']);
      await lock.release();
    });
  });

  it('300 racing takeovers of a stale lock by 6 processes: exactly one winner each time', async () => {
    const trials = 300;
    const racers = Array.from({ length: 6 }, () => new Worker());
    const crasher = new Worker();
    await Promise.all([...racers, crasher].map((w) => w.ready));
    const paths = Array.from({ length: trials }, () => fresh());
    // Half the locks are left by a process of this host that then dies (stale by pid), half by
    // another host whose last refresh was long ago (stale by mtime).
    const setUp = await Promise.all(
      paths.map((path, i) =>
        crasher.acquire(
          i % 2 === 0 ? { path, runId: `crashed-${i}` } : { path, runId: `crashed-${i}`, host: 'gone-host', clockMs: Date.UTC(2020, 0, 1) },
        ),
      ),
    );
    expect(setUp.filter((r) => !r.won)).toEqual([]);
    await crasher.crash();

    const doubles: string[] = [];
    const otherwise: string[] = [];
    for (const [i, path] of paths.entries()) {
      const replies = await Promise.all(racers.map((w, k) => w.acquire({ path, runId: `r${k}-t${i}` })));
      const winners = replies.flatMap((r, k) => (r.won ? [`r${k}-t${i}`] : []));
      const holder = await readPipelineLock(path);
      if (winners.length > 1) doubles.push(`trial ${i}: ${winners.join(', ')} all won; the lock says ${JSON.stringify(holder)}`);
      else if (winners.length === 0) otherwise.push(`trial ${i}: nobody won: ${JSON.stringify(replies)}`);
      else if (holder.state !== 'held' || holder.owner?.runId !== winners[0])
        otherwise.push(`trial ${i}: ${winners[0]} won but the lock says ${JSON.stringify(holder)}`);
      // Losers lost to the winner, not to an error; the winner displaced the crashed owner.
      for (const r of replies) {
        if (!r.won && r.code !== 'locked') otherwise.push(`trial ${i}: a racer failed: ${r.message}`);
        if (r.won && (r.displaced?.reason !== 'stale' || r.displaced.owner?.runId !== `crashed-${i}`)) {
          otherwise.push(`trial ${i}: the winner displaced ${JSON.stringify(r.displaced)}`);
        }
      }
    }
    await Promise.all(racers.map((w) => w.crash()));
    expect(doubles).toEqual([]);
    expect(otherwise).toEqual([]);
  }, 60_000);
});
