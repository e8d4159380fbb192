// Pins the fence check before a spending request by itself: a run whose lock was
// taken over (broken by another holder) must send nothing more, even before its heartbeat notices.
// The lock's refresh period is an hour here, so the heartbeat never runs during the test: only
// the check of the lock's generation right before the intent and the POST can stop the run. The
// holder's clock is moved past the fence's lease (1 s, during which a breaking holder sends
// nothing: lock.test.ts pins the lease) once the lock is broken.
// Mutation this catches: `if (!(await this.#fx.fenced()))` removed from instance-driver.ts #submit.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { acquirePipelineLock } from '../../src/run/lock/lock.js';
import { runPlan } from '../../src/run/runner.js';
import { closeRun, isSubmit, prepareRun, runOf } from './pin-helpers.js';
import { journalOf, sheetsManifest, tempDir, withEmulator } from './runner-helpers.js';

const HOUR = 3_600_000;

describe('the fence before a spending request', () => {
  it('a run whose lock another holder broke sends nothing, before its heartbeat could notice', { timeout: 30_000 }, async () => {
    await withEmulator({ timeScale: 0 }, async (emu) => {
      const run = await prepareRun(emu, sheetsManifest(tempDir(), 3, { name: 'fenced' }));
      const lockPath = join(run.runDir, '..', '.lock');
      const signal = new AbortController().signal;
      try {
        let now = Date.now();
        const held = await acquirePipelineLock(lockPath, run.runId, 'skip', signal, {
          staleMs: HOUR,
          refreshMs: HOUR / 2,
          clock: () => now,
        });
        // Another process breaks it (--break-lock --force): the holder is not told; its heartbeat is an hour away.
        const other = await acquirePipelineLock(lockPath, 'another-run', 'skip', signal, {
          breakLock: true,
          force: true,
          staleMs: HOUR,
          refreshMs: HOUR / 2,
        });
        now += 1_000;
        try {
          expect(held.signal.aborted).toBe(false);
          const summary = await runPlan({ ...runOf(run), signal: AbortSignal.any([signal, held.signal]), fence: held, concurrency: 2 });
          expect(run.agent.exchanges.filter(isSubmit)).toHaveLength(0);
          expect(journalOf(run.runDir).records.filter((r) => r.type === 'intent')).toHaveLength(0);
          expect(summary.counts.completed).toBe(0);
        } finally {
          await other.release();
          await held.release();
        }
      } finally {
        await closeRun(run);
      }
    });
  });
});
