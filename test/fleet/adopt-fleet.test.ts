// `resume --adopt` on a fleet run: a worker sent the submit (the service took and charged it), and
// the coordinator's journal could not record the answer (a full disk, injected by
// test/session/fail-submitted-write.mjs). The coordinator ends with exit 6 and prints the pair; a
// resume on the same queue with `--adopt` follows that request without a second POST, and its
// money is charged once (report = ledger). Against a redis-server of the file's own, the built CLI,
// a `genpipe worker` process and an emulator on 127.0.0.1.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { cleanTemps, emuRequests, findRunDir, journalOf, marketingManifest, runCli, spentUsd, tempDir } from '../run/runner-helpers.js';
import { killAll, startWorkerProcess, useTestRedis, type WorkerProcess } from './fleet-helpers.js';

/** US$ the emulator charges for one low-quality 1k marketing image. */
const PRICE = 0.008925;
const FAILING_WRITER = new URL('../session/fail-submitted-write.mjs', import.meta.url).pathname;

const redis = useTestRedis();
let emu: Emulator;
const workers: WorkerProcess[] = [];

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterAll(async () => {
  await killAll(workers);
  await emu?.close();
  cleanTemps();
});

describe('resume --adopt on a fleet run', () => {
  it(
    'follows the request a worker sent and the coordinator could not journal: one POST, report = ledger',
    { timeout: 120_000 },
    async () => {
      const queue = 'adopt-fleet';
      const flags = ['--base-url', emu.url, '--redis', redis.url, '--queue', queue, '--no-local-worker', '--rate', '1000'];
      workers.push(await startWorkerProcess(redis.url, emu.url, 'w1', ['--queue', queue]));
      const out = tempDir();
      const manifest = marketingManifest(tempDir(), 1, 'adopted-fleet');
      writeFileSync(manifest, readFileSync(manifest, 'utf8').replace('steps:', `prices: { marketing-image: ${PRICE} }\nsteps:`));
      const spentBefore = spentUsd(emu);

      const full = await runCli(['run', manifest, '--out', out, '--quiet', ...flags], {
        env: { NODE_OPTIONS: `--import=${FAILING_WRITER}` },
        timeoutMs: 60_000,
      });
      expect(full.code, full.stderr).toBe(6);
      expect(full.stderr).not.toMatch(/internal error|a bug in genpipe|\n\s+at /);
      const sent = emuRequests(emu);
      expect(sent).toHaveLength(1);
      const runDir = findRunDir(out, 'adopted-fleet');
      expect(journalOf(runDir).records.some((r) => r.type === 'submitted')).toBe(false);
      const line = full.stderr.split('\n').find((l) => l.includes('the journal could not record it')) ?? '';
      const pair = /--adopt (?:'([^']+)'|(\S+))$/.exec(line)?.slice(1).find(Boolean) ?? '';
      expect(pair).toMatch(new RegExp(`=${sent[0]!.request_id}$`));

      const adopted = await runCli(['resume', runDir, ...flags, '--adopt', pair], { timeoutMs: 60_000 });
      expect(adopted.code, adopted.stderr).toBe(0);
      expect(emuRequests(emu)).toHaveLength(1);
      expect(journalOf(runDir).records.filter((r) => r.type === 'submitted')).toEqual([expect.objectContaining({ adopted: true })]);
      const { total } = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as {
        total: { netUsd: number; unknownUsd: number; counts: { completed: number } };
      };
      expect(total.counts.completed).toBe(1);
      expect(total.unknownUsd).toBe(0);
      expect(total.netUsd).toBeCloseTo(spentUsd(emu) - spentBefore, 6);
      expect(total.netUsd).toBeCloseTo(PRICE, 6);
    },
  );
});
