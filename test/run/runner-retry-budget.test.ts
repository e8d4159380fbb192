// A retry budget (reliability.md #10): when the service keeps failing, the run stops with a clear
// message instead of retrying without end, sends nothing blindly, and a resume once the service is
// back finishes the work with one request per Idempotency-Key. In-process with zero backoff jitter
// (random: () => 0), so the test does not wait out real backoff delays.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { GenerationClient } from '../../src/api/client.js';
import { resolveConfig } from '../../src/api/config.js';
import { startEmulator } from '../../src/emulator/index.js';
import { loadManifestFile } from '../../src/manifest/load.js';
import { buildPlan } from '../../src/plan/plan.js';
import type { RunEvent } from '../../src/run/events.js';
import { createRunDir, planHash } from '../../src/run/files/run-dir.js';
import { runFile } from '../../src/run/files/run-layout.js';
import { RunFold } from '../../src/run/journal/run-fold.js';
import { replayFile } from '../../src/run/journal/run-state.js';
import { plannedSteps } from '../../src/run/run-context.js';
import { runPlan } from '../../src/run/runner.js';
import { cleanTemps, emuRequests, expectCompletedRun, expectOneRequestPerKey, HF_KEY, sheetsManifest, tempDir } from './runner-helpers.js';

afterAll(cleanTemps);

describe('the retry budget', () => {
  it('stops a run whose service keeps failing, and a resume finishes it once the service is back', { timeout: 120_000 }, async () => {
    const dir = tempDir();
    const faults = join(dir, 'down.yaml');
    writeFileSync(faults, 'submit:\n  error_503: 1\n');
    const emu = await startEmulator({ port: 0, timeScale: 0.001, seed: 31, faults, log: () => {} });
    const client = new GenerationClient(resolveConfig({ flags: { baseUrl: emu.url }, env: { HF_KEY } }));
    try {
      const manifest = sheetsManifest(dir, 6, { name: 'down' });
      const plan = await buildPlan(loadManifestFile(manifest));
      const hash = planHash(plan);
      const { runId, dir: runDir } = await createRunDir(tempDir(), plan, manifest, hash);
      const options = {
        plan,
        client,
        runDir,
        runId,
        planHash: hash,
        concurrency: 2,
        ratePerSecond: 10_000,
        retryBudget: 5,
        random: () => 0,
        poll: { floorMs: 1, baseMs: 2, capMs: 20 },
      };
      const events: RunEvent[] = [];
      const stopped = await runPlan({ ...options, signal: new AbortController().signal, onEvent: (e) => events.push(e) });
      expect(stopped.outcome).toBe('stopped');
      expect(stopped.message).toBe(
        'The service kept failing, so the run stopped instead of retrying without end; resume it once the service is back.',
      );
      // Counted as the report counts the journal: a keyed submit left for a resume (its intent
      // journaled, never answered) is unknown until the resume sends it again with its key; the
      // others never started.
      const journaled = RunFold.of(await replayFile(runFile(runDir, 'journal')), plannedSteps(plan)).counts();
      expect(stopped.counts).toMatchObject({ completed: 0, failed: 0, pending: journaled.not_started, unknown: journaled.unknown });
      expect(stopped.counts.pending + stopped.counts.unknown).toBe(6);
      expect(stopped.counts.pending).toBeGreaterThan(0);
      expect(events.filter((e) => e.type === 'run_stopping')).toHaveLength(1);
      // Every 503 came before processing: nothing exists at the service.
      expect(emuRequests(emu)).toHaveLength(0);
      expect(emu.faults.injected['submit.error_503']).toBeGreaterThan(0);

      emu.setFaults('none');
      const resumed = await runPlan({ ...options, signal: new AbortController().signal });
      expect(resumed.outcome).toBe('completed');
      expect(resumed.counts.completed).toBe(6);
      expect(expectOneRequestPerKey(emu).size).toBe(6);
      expectCompletedRun(runDir, emu, 6);
    } finally {
      await client.close();
      await emu.close();
    }
  });
});
