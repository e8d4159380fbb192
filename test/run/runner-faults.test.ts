// Faults and limits (reliability.md #3, #8, #9): the built CLI against an emulator with the hostile
// fault profile (5xx, resets after processing, 429 with Retry-After, slow bodies) completes a
// 1,000-instance run with one request per Idempotency-Key, and never has more generations active
// or HTTP requests in flight than --concurrency. The 1,000-instance run is a conformance check: it
// runs on the local backend and on the fleet (a worker process doing all the service work).
import { afterAll, describe, expect, it } from 'vitest';
import { startEmulator } from '../../src/emulator/index.js';
import {
  cleanTemps,
  emuRequests,
  expectCompletedRun,
  expectNoSecret,
  expectOneRequestPerKey,
  findRunDir,
  runCli,
  sheetsManifest,
  spentUsd,
  tempDir,
} from './runner-helpers.js';

import { BACKENDS, backendFor } from '../fleet/backends.js';
import { useTestRedis } from '../fleet/fleet-helpers.js';

const redis = useTestRedis();
afterAll(cleanTemps);

describe('faults', () => {
  // The two backends at once: each has its own emulator and queue, and the local run mostly waits
  // out Retry-After pauses (about 10 s of CPU in 60 s), so the suite's slot is not held idle twice.
  it.concurrent.each(BACKENDS)(
    'a 1,000-instance run under the hostile profile completes every instance without a duplicate submit (%s backend)',
    { timeout: 180_000 },
    async (backend) => {
      const emu = await startEmulator({ port: 0, timeScale: 0, seed: 99, faults: 'hostile', log: () => {} });
      const fleet = await backendFor(backend, emu.url, redis.url, ['--concurrency', '100']);
      try {
        const count = 1_000;
        const concurrency = 100;
        const dir = tempDir();
        const out = tempDir();
        const manifest = sheetsManifest(dir, count, { name: 'hostile' });
        const result = await runCli(
          ['run', manifest, '--out', out, '--base-url', emu.url, '--concurrency', String(concurrency), '--rate', '1000', ...fleet.flags],
          { timeoutMs: 170_000 },
        );
        expect(result.code, result.stderr.slice(-2_000)).toBe(0);
        expect(result.stdout).toContain(`completed; ${count} completed, 0 failed`);

        // The profile did inject every kind of fault the issue names.
        const injected = emu.faults.injected as Record<string, number>;
        for (const kind of ['error_500', 'error_502', 'error_503', 'rate_429', 'reset_after', 'slow_body']) {
          expect(injected[`submit.${kind}`] ?? 0, `submit.${kind} in ${JSON.stringify(injected)}`).toBeGreaterThan(0);
        }
        const byKey = expectOneRequestPerKey(emu);
        expect(byKey.size).toBe(count);
        expect(emuRequests(emu)).toHaveLength(count);
        const runDir = findRunDir(out, 'hostile');
        expectCompletedRun(runDir, emu, count);
        expect(spentUsd(emu)).toBeCloseTo(count * 0.05, 6);
        // Concurrency: never more generations active, nor HTTP requests in flight, than the limit.
        expect(emu.requests.peakActive).toBeGreaterThan(1);
        expect(emu.requests.peakActive).toBeLessThanOrEqual(concurrency);
        expect(emu.stats.peakInFlight).toBeLessThanOrEqual(concurrency);
        expectNoSecret(runDir, result.stdout + result.stderr);
      } finally {
        await fleet.stop();
        await emu.close();
      }
    },
  );

  it.each([1, 3, 7])(
    '--concurrency %i bounds the active generations and the HTTP requests in flight',
    { timeout: 120_000 },
    async (limit) => {
      // Slow enough generations that every slot fills up: the emulator counts a generation active
      // until its end, so the shortest one (8.5 s of the model's, here 255 ms) must outlast the
      // spread of the first `limit` submits, each after its intent's fsync, on a loaded machine.
      // At 0.01 (85 ms) a fresh-clone CI on 2026-11-27 saw a peak of 6 for 7.
      const emu = await startEmulator({ port: 0, timeScale: 0.03, seed: limit, log: () => {} });
      try {
        const count = 3 * limit + 2;
        const dir = tempDir();
        const out = tempDir();
        const manifest = sheetsManifest(dir, count, { name: 'limited' });
        const result = await runCli([
          'run',
          manifest,
          '--out',
          out,
          '--base-url',
          emu.url,
          '--concurrency',
          String(limit),
          '--rate',
          '1000',
        ]);
        expect(result.code, result.stderr).toBe(0);
        expect(emuRequests(emu)).toHaveLength(count);
        expect(emu.requests.peakActive).toBe(limit);
        expect(emu.stats.peakInFlight).toBeLessThanOrEqual(limit);
        expectCompletedRun(findRunDir(out, 'limited'), emu, count);
      } finally {
        await emu.close();
      }
    },
  );
});
