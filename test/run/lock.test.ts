import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { acquirePipelineLock, LockedError } from '../../src/run/lock.js';

const dir = mkdtempSync(join(tmpdir(), 'genpipe-lock-'));
const never = new AbortController().signal;

/** A pid that surely is not running: a child that has exited. */
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ['-e', '']);
  await new Promise((resolve) => child.on('exit', resolve));
  return child.pid as number;
}

describe('the pipeline lock', () => {
  it('refuses a second run with skip, naming the owner, and frees the lock on release', async () => {
    const path = join(dir, 'a', '.lock');
    const first = await acquirePipelineLock(path, 'run-1', 'skip', never);
    const error = await acquirePipelineLock(path, 'run-2', 'skip', never).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(LockedError);
    expect((error as LockedError).message).toMatch(new RegExp(`run run-1, pid ${process.pid} on `));
    await first.release();
    expect(existsSync(path)).toBe(false);
    const second = await acquirePipelineLock(path, 'run-2', 'skip', never);
    await second.release();
  });

  it('takes over a lock left by a dead process', async () => {
    const path = join(dir, 'b', '.lock');
    mkdirSync(join(dir, 'b'), { recursive: true });
    writeFileSync(path, JSON.stringify({ pid: await deadPid(), host: hostname(), runId: 'crashed', startedAt: '2026-01-01T00:00:00.000Z' }));
    const lock = await acquirePipelineLock(path, 'run-3', 'skip', never);
    expect(JSON.parse(readFileSync(path, 'utf8'))).toMatchObject({ pid: process.pid, runId: 'run-3' });
    await lock.release();
  });

  it('wait: takes the lock once its owner releases it', async () => {
    const path = join(dir, 'c', '.lock');
    const first = await acquirePipelineLock(path, 'run-1', 'skip', never);
    let acquired = false;
    const waiting = acquirePipelineLock(path, 'run-2', 'wait', never, 10).then((lock) => {
      acquired = true;
      return lock;
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(acquired).toBe(false);
    await first.release();
    const second = await waiting;
    expect(JSON.parse(readFileSync(path, 'utf8'))).toMatchObject({ runId: 'run-2' });
    await second.release();
  });

  it('allow takes no lock at all', async () => {
    const path = join(dir, 'd', '.lock');
    const first = await acquirePipelineLock(path, 'run-1', 'skip', never);
    const overlapping = await acquirePipelineLock(path, 'run-2', 'allow', never);
    await overlapping.release();
    expect(JSON.parse(readFileSync(path, 'utf8'))).toMatchObject({ runId: 'run-1' });
    await first.release();
  });

  it('release never removes a lock that another run took over', async () => {
    const path = join(dir, 'e', '.lock');
    const first = await acquirePipelineLock(path, 'run-1', 'skip', never);
    writeFileSync(path, JSON.stringify({ pid: process.pid, host: hostname(), runId: 'someone-else', startedAt: 'x' }));
    await first.release();
    expect(existsSync(path)).toBe(true);
  });
});
