// Every way a session ends goes through one teardown: the pipeline's lock released once, the report
// written once when the run has a journal, and the notify targets told once. Each end is driven
// for real (the emulator on 127.0.0.1, a loopback webhook receiver for the notifications) and
// checked the same way: the lock is free again, report.json is there when a run was journaled,
// and exactly one notification arrived.
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { acquirePipelineLock, type PipelineLock } from '../../src/run/lock/lock.js';
import type { RunEvent } from '../../src/run/events.js';
import { startRun, type SessionOptions } from '../../src/session/run-session.js';
import { receiver } from '../notify/receiver.js';
import { cleanTemps, HF_KEY, sheetsManifest, tempDir } from '../run/runner-helpers.js';

let emu: Emulator;
let hook: Awaited<ReturnType<typeof receiver>>;

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  hook = await receiver();
});
afterAll(async () => {
  await hook?.close();
  await emu?.close();
  cleanTemps();
});
beforeEach(() => void hook.received.splice(0));

/** A pipeline of `count` sheets at US$0.50 each, with its runs folder. */
function pipeline(count: number): { manifest: string; out: string; lockPath: string } {
  const dir = tempDir('genpipe-teardown-');
  const manifest = sheetsManifest(dir, count, { name: 'nightly', extra: 'prices: { "character-sheet": 0.5 }\n' });
  const out = join(dir, 'runs');
  return { manifest, out, lockPath: join(out, 'nightly', '.lock') };
}

function options(out: string, extra: SessionOptions = {}): SessionOptions {
  return {
    env: { HF_KEY, GENPIPE_BASE_URL: emu.url },
    outDir: out,
    notify: [`${hook.url}/team`],
    quiet: true,
    yes: true,
    concurrency: 1,
    ...extra,
  };
}

/** True when the pipeline's lock can be taken now (and it is given back at once). */
async function lockIsFree(lockPath: string): Promise<boolean> {
  try {
    const probe = await acquirePipelineLock(lockPath, 'probe', 'skip', new AbortController().signal);
    await probe.release();
    return true;
  } catch {
    return false;
  }
}

/** The single run directory of the pipeline, if one was left. */
function runDirOf(out: string): string | undefined {
  const root = join(out, 'nightly');
  if (!existsSync(root)) return undefined;
  const dirs = readdirSync(root).filter((name) => !name.startsWith('.') && name !== 'not-started.jsonl');
  expect(dirs.length).toBeLessThanOrEqual(1);
  return dirs[0] === undefined ? undefined : join(root, dirs[0]);
}

/** The notifications delivered, once the deliveries of the ending have had their moment. */
function events(): string[] {
  return hook.received.map((r) => (r.body as { event: string }).event);
}

/** Runs a start to its end, resolved or thrown: the exit code, or the error. */
async function ended(run: Promise<{ exitCode: number }>): Promise<{ exitCode?: number; error?: Error }> {
  try {
    return { exitCode: (await run).exitCode };
  } catch (error) {
    return { error: error as Error };
  }
}

describe('one teardown on every way a session ends', () => {
  it('completed: lock free, report written, notified once', async () => {
    const p = pipeline(2);
    const end = await ended(startRun(p.manifest, options(p.out)));
    expect(end).toEqual({ exitCode: 0 });
    expect(await lockIsFree(p.lockPath)).toBe(true);
    expect(existsSync(join(runDirOf(p.out) ?? '', 'report.json'))).toBe(true);
    expect(events()).toEqual(['finish']);
  });

  it('stopped by the budget: lock free, report written, notified once', async () => {
    const p = pipeline(5);
    const end = await ended(startRun(p.manifest, options(p.out, { budgetUsd: 1.2 })));
    expect(end).toEqual({ exitCode: 3 });
    expect(await lockIsFree(p.lockPath)).toBe(true);
    expect(existsSync(join(runDirOf(p.out) ?? '', 'report.json'))).toBe(true);
    expect(events()).toEqual(['budget']);
  });

  it('interrupted (Ctrl-C after the first submit): lock free, report written, notified once', async () => {
    const p = pipeline(6);
    const ctrlC = new AbortController();
    const onEvent = (event: RunEvent): void => {
      if (event.type === 'instance_submitted') ctrlC.abort();
    };
    const end = await ended(startRun(p.manifest, options(p.out, { signal: ctrlC.signal, onEvent })));
    expect(end).toEqual({ exitCode: 130 });
    expect(await lockIsFree(p.lockPath)).toBe(true);
    expect(existsSync(join(runDirOf(p.out) ?? '', 'report.json'))).toBe(true);
    expect(events()).toEqual(['interrupted']);
  });

  it('failed after its journal began: lock free, report written, notified once', async () => {
    const p = pipeline(2);
    const onEvent = (event: RunEvent): void => {
      if (event.type === 'run_started') throw new Error('a listener that fails');
    };
    const end = await ended(startRun(p.manifest, options(p.out, { onEvent })));
    expect(end.error?.message).toBe('a listener that fails');
    expect(await lockIsFree(p.lockPath)).toBe(true);
    expect(existsSync(join(runDirOf(p.out) ?? '', 'report.json'))).toBe(true);
    expect(events()).toEqual(['failure']);
  });

  it('failed before its journal began: lock free, the empty run directory gone, notified once', async () => {
    const p = pipeline(2);
    const onRunDir = async (): Promise<void> => {
      throw new Error('told of the run directory, and failed');
    };
    const end = await ended(startRun(p.manifest, options(p.out, { onRunDir })));
    expect(end.error?.message).toBe('told of the run directory, and failed');
    expect(await lockIsFree(p.lockPath)).toBe(true);
    expect(runDirOf(p.out)).toBeUndefined();
    expect(events()).toEqual(['failure']);
  });

  it('its lock taken over mid-run: exit 4, its report written, notified once, the new holder untouched', async () => {
    const p = pipeline(6);
    let intruder: Promise<PipelineLock> | undefined;
    const onEvent = (event: RunEvent): void => {
      if (event.type === 'instance_submitted')
        intruder ??= acquirePipelineLock(p.lockPath, 'intruder', 'skip', new AbortController().signal, { breakLock: true, force: true });
    };
    const end = await ended(startRun(p.manifest, options(p.out, { onEvent })));
    const holder = await intruder;
    try {
      expect(end.error?.message).toMatch(/lock/);
      expect(existsSync(join(runDirOf(p.out) ?? '', 'report.json'))).toBe(true);
      expect(events()).toEqual(['failure']);
      // Released once, and only its own generation: the run that took the lock still holds it.
      expect(await lockIsFree(p.lockPath)).toBe(false);
    } finally {
      await holder?.release();
    }
    expect(await lockIsFree(p.lockPath)).toBe(true);
  });

  it('refused before it started: no run directory, notified once', async () => {
    const p = pipeline(2);
    const end = await ended(startRun(p.manifest, options(p.out, { retry: new Set(['failed']) })));
    expect(end.error?.message).toMatch(/^--retry starts new attempts/);
    expect(runDirOf(p.out)).toBeUndefined();
    expect(await lockIsFree(p.lockPath)).toBe(true);
    expect(events()).toEqual(['failure']);
  });

  it('refused the lock: the holder keeps it, no run directory, notified once', async () => {
    const p = pipeline(2);
    const holder = await acquirePipelineLock(p.lockPath, 'yesterday', 'skip', new AbortController().signal);
    try {
      const end = await ended(startRun(p.manifest, options(p.out)));
      expect(end.error?.message).toMatch(/holds the lock/);
      expect(runDirOf(p.out)).toBeUndefined();
      expect(await lockIsFree(p.lockPath)).toBe(false);
      expect(events()).toEqual(['failure']);
    } finally {
      await holder.release();
    }
  });
});
