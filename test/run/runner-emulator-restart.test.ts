// A run resumed after the emulator restarts, as it would be after a service deploy.
// genpipe submits every sheet and is killed while they run; the emulator stops, and starts again on
// the same --state directory at another address; `genpipe resume` follows the same requests there
// and completes, with nothing sent twice and the cost equal to the emulator's ledger.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startEmulator } from '../../src/emulator/index.js';
import {
  cleanTemps,
  emuRequests,
  expectCompletedRun,
  expectOneRequestPerKey,
  findRunDir,
  runCli,
  sheetsManifest,
  spentUsd,
  tempDir,
  waitForRequests,
} from './runner-helpers.js';

afterAll(cleanTemps);

describe('resume after an emulator restart (--state)', () => {
  it(
    'follows the requests it submitted on the restarted emulator, sends nothing twice, and its cost equals the ledger',
    { timeout: 120_000 },
    async () => {
      const count = 6;
      const stateDir = join(mkdtempSync(join(tmpdir(), 'genpipe-emu-state-')), 'state');
      // Sheets run 3 s: all are still running when genpipe is killed, even on a loaded machine.
      const options = {
        port: 0,
        timeScale: 1,
        seed: 27,
        stateDir,
        log: () => {},
        durations: { 'character-sheet': { queuedMs: [0, 0] as const, runMs: [3_000, 3_000] as const } },
      };
      const first = await startEmulator(options);
      const dir = tempDir();
      const out = tempDir();
      const manifest = sheetsManifest(dir, count, { name: 'restart' });
      let killed: Promise<boolean> | undefined;
      const run = await runCli(['run', manifest, '--out', out, '--base-url', first.url, '--concurrency', String(count), '--yes'], {
        onSpawn: (send) => {
          killed = waitForRequests(first, count).then((all) => {
            send('SIGKILL');
            return all;
          });
        },
      });
      expect(await killed).toBe(true);
      expect(run.signal).toBe('SIGKILL');
      const submitted = emuRequests(first)
        .map((r) => r.request_id)
        .sort();
      await first.close();

      const second = await startEmulator(options);
      try {
        expect(second.url).not.toBe(first.url);
        const runDir = findRunDir(out, 'restart');
        const resumed = await runCli(['resume', runDir, '--base-url', second.url, '--yes']);
        expect(resumed.code, resumed.stderr.slice(-2_000)).toBe(0);
        expect(resumed.stdout).toContain(`completed; ${count} completed, 0 failed`);
        // The same requests, no new one, each charged once.
        expect(
          emuRequests(second)
            .map((r) => r.request_id)
            .sort(),
        ).toEqual(submitted);
        expect(expectOneRequestPerKey(second).size).toBe(count);
        expectCompletedRun(runDir, second, count);
        expect(spentUsd(second)).toBeCloseTo(count * 0.05, 9);
      } finally {
        await second.close();
      }
    },
  );
});
