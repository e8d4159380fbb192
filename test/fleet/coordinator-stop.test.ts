// A fleet coordinator that stops withdraws its jobs still waiting in the queue, so no worker
// started later pays for them, and a run whose jobs no worker takes says so.
// Against a redis-server of the file's own, the built CLI and an emulator on 127.0.0.1.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { cleanTemps, findRunDir, runCli, spentUsd, tempDir } from '../run/runner-helpers.js';
import { fastSheets, killAll, startWorkerProcess, useTestRedis, type WorkerProcess } from './fleet-helpers.js';

const redis = useTestRedis();
let emu: Emulator;
const workers: WorkerProcess[] = [];

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterEach(async () => {
  await killAll(workers.splice(0));
  cleanTemps();
});
afterAll(async () => {
  await emu?.close();
});

describe('a coordinator that stops', () => {
  it(
    'says when no worker takes its jobs, withdraws them on Ctrl-C, and a worker started later pays for none of them',
    { timeout: 90_000 },
    async () => {
      const dir = tempDir();
      const out = join(dir, 'runs');
      const queue = 'withdrawn';
      const flags = ['--out', out, '--redis', redis.url, '--queue', queue, '--no-local-worker', '--rate', '1000'];
      // No worker anywhere: the run says so (here after 1 s, 30 s by default), then Ctrl-C.
      const stopped = await runCli(['run', fastSheets(dir, 3, 'withdrawn'), ...flags], {
        env: { GENPIPE_BASE_URL: emu.url, GENPIPE_NO_WORKER_NOTICE_MS: '1000' },
        killWhen: { signal: 'SIGINT', pattern: /No worker has taken this run's jobs/ },
        timeoutMs: 60_000,
      });
      expect(stopped.stderr).toContain(
        `No worker has taken this run's jobs for 1 s, and none is on queue ${queue}: start one with \`genpipe worker --redis`,
      );
      expect(stopped.code).toBe(130);
      const runDir = findRunDir(out, 'withdrawn');
      // The step's first job, waiting in the queue, was withdrawn and journaled as not sent. The
      // other two waited for its answer (a step's first submit goes alone): no intent, no job.
      const journal = readFileSync(join(runDir, 'journal.jsonl'), 'utf8').split('\n');
      expect(journal.filter((l) => l.includes('"type":"refused"'))).toHaveLength(1);
      expect(journal.filter((l) => l.includes('"type":"intent"'))).toHaveLength(1);
      // A worker started now finds nothing of this run to pay for.
      workers.push(await startWorkerProcess(redis.url, emu.url, 'late', ['--queue', queue]));
      const status = await runCli(['queue', 'status', '--redis', redis.url, '--queue', queue, '--json']);
      expect(status.code).toBe(0);
      expect(emu.requests.inspect({})).toHaveLength(0);
      // The resume sends each instance once, with the late worker, and the report is the ledger.
      const resumed = await runCli(['resume', runDir, '--redis', redis.url, '--queue', queue, '--no-local-worker'], {
        env: { GENPIPE_BASE_URL: emu.url },
        timeoutMs: 60_000,
      });
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(emu.requests.inspect({})).toHaveLength(3);
      const report = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { total: { netUsd: number } };
      expect(report.total.netUsd).toBe(spentUsd(emu));
    },
  );
});
