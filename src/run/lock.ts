/**
 * One run per pipeline at a time: `runs/<pipeline>/.lock` holds the owner's pid, host and run id.
 * A lock whose process is gone (same host, pid not alive) is stale and taken over, so a crashed
 * nightly job does not block the next night's.
 */
import { hostname } from 'node:os';
import { mkdir, open, readFile, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import { GenpipeError } from '../api/errors.js';
import { sleep } from '../api/sleep.js';

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

export interface PipelineLock {
  release(): Promise<void>;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists but belongs to someone else.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function readOwner(path: string): Promise<LockOwner | undefined> {
  try {
    const owner = JSON.parse(await readFile(path, 'utf8')) as Partial<LockOwner>;
    return typeof owner.pid === 'number' && typeof owner.host === 'string' ? (owner as LockOwner) : undefined;
  } catch {
    return undefined;
  }
}

async function tryAcquire(path: string, owner: LockOwner): Promise<boolean> {
  try {
    const handle = await open(path, 'wx', 0o644);
    try {
      await handle.writeFile(`${JSON.stringify(owner)}\n`);
      await handle.sync();
    } finally {
      await handle.close();
    }
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  }
}

/**
 * Takes the lock at `path` for `runId`. `skip` refuses at once (LockedError, exit 4); `wait` polls
 * until the lock is free or `signal` fires; `allow` takes no lock.
 */
export async function acquirePipelineLock(path: string, runId: string, policy: OverlapPolicy, signal: AbortSignal, pollMs = 1_000): Promise<PipelineLock> {
  if (policy === 'allow') return { release: async () => {} };
  await mkdir(dirname(path), { recursive: true });
  const me: LockOwner = { pid: process.pid, host: hostname(), runId, startedAt: new Date().toISOString() };
  for (;;) {
    if (await tryAcquire(path, me)) {
      return {
        release: async () => {
          const owner = await readOwner(path);
          if (owner?.pid === me.pid && owner.runId === me.runId) await rm(path, { force: true });
        },
      };
    }
    const owner = await readOwner(path);
    if (owner && owner.host === me.host && !alive(owner.pid)) {
      // Stale: its process is gone. Remove it and race for it again.
      await rm(path, { force: true });
      continue;
    }
    if (policy === 'skip') throw new LockedError(owner, path);
    await sleep(pollMs, signal);
  }
}
