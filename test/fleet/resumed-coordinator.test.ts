// A resumed fleet coordinator meets what an earlier one left in Redis (fleet/queue-executor.ts,
// `resumed`): a new run's submits skip reading their jobs, and a resume must not. Here a keyless
// instance's job ended *unknown* while no coordinator ran (its worker died mid-submit, the next one
// would not resend it); `genpipe resume --resubmit-unknown` then resends it deliberately, once.
// Against a redis-server of the file's own, the built CLI, a `genpipe worker` and an emulator on 127.0.0.1.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { jobIdOf, type InstanceJobData, type InstanceJobResult } from '../../src/fleet/instance-job.js';
import { parseRedisUrl } from '../../src/fleet/redis.js';
import { cleanTemps, emuRequests, findRunDir, journalOf, marketingManifest, runCli, spentUsd, tempDir } from '../run/runner-helpers.js';
import { killAll, startWorkerProcess, useTestRedis, type WorkerProcess } from './fleet-helpers.js';

const redis = useTestRedis();
let emu: Emulator;
const workers: WorkerProcess[] = [];

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0.01, seed: 3, log: () => {} });
});
afterAll(async () => {
  await killAll(workers);
  await emu?.close();
  cleanTemps();
});

describe('a resumed fleet coordinator', () => {
  it(
    'replaces a job an earlier run left ended unknown when told to resend it (--resubmit-unknown): one request, paid once',
    { timeout: 90_000 },
    async () => {
      const dir = tempDir();
      const out = tempDir();
      const queue = 'resumed-unknown';
      const flags = ['--base-url', emu.url, '--redis', redis.url, '--queue', queue, '--no-local-worker', '--rate', '1000'];
      // The first coordinator journals the intent of its one keyless instance and dies before enqueueing it.
      const first = await runCli(['run', marketingManifest(dir, 1, 'unknown'), '--out', out, ...flags], {
        env: { GENPIPE_CRASH_AT: 'after_intent_sync:1' },
      });
      expect(first.signal, first.stderr).toBe('SIGKILL');
      const runDir = findRunDir(out, 'unknown');
      const intent = journalOf(runDir).records.find((r) => r.type === 'intent');
      expect(intent?.type).toBe('intent');
      if (intent?.type !== 'intent') return;
      const { runId } = JSON.parse(readFileSync(join(runDir, 'plan.json'), 'utf8')) as { runId: string };

      // What the fleet left of it meanwhile: its job, whose holder wrote the intent and died before an
      // answer; a worker that takes it over ends it unknown and sends nothing (never a second keyless POST).
      const jobId = jobIdOf(runId, intent.instance, '0.0');
      const jobs = new Queue<InstanceJobData, InstanceJobResult>(queue, { connection: parseRedisUrl(redis.url).options });
      try {
        await jobs.add(
          'instance',
          {
            v: 1,
            runId,
            instance: intent.instance,
            model: 'marketing-image',
            body: { prompt: 'left by a dead holder', resolution: '1k', quality: 'low' },
            idempotencyKey: null,
            intentAt: Date.now(),
          },
          { jobId },
        );
        workers.push(await startWorkerProcess(redis.url, emu.url, 'w1', ['--queue', queue]));
        const end = Date.now() + 20_000;
        // Bounded by the deadline.
        while (Date.now() < end && (await jobs.getJob(jobId))?.returnvalue?.kind !== 'unknown') await new Promise((r) => setTimeout(r, 50));
        expect((await jobs.getJob(jobId))?.returnvalue?.kind).toBe('unknown');
        expect(emuRequests(emu)).toHaveLength(0);

        // Told to resend it, the resumed coordinator drops the stale job and hands it out anew: sent once, completed.
        const resumed = await runCli(['resume', runDir, ...flags, '--resubmit-unknown'], { timeoutMs: 60_000 });
        expect(resumed.code, resumed.stderr).toBe(0);
        expect(resumed.stdout).toContain('completed; 1 completed, 0 failed');
        const rows = emuRequests(emu);
        expect(rows).toHaveLength(1);
        expect(rows[0]?.body_hash).toBe(intent.bodyHash);
        // Paid once, and the report says what it knows of it: the service charged the one request, and
        // marketing images have no published price, so the report counts the instance as unpriced, not as US$0.
        expect(spentUsd(emu)).toBeGreaterThan(0);
        const { total } = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as {
          total: { unpricedInstances: number; counts: { completed: number; unknown: number } };
        };
        expect(total).toMatchObject({ unpricedInstances: 1, counts: { completed: 1, unknown: 0 } });
        // Read and journaled: the job is gone from Redis.
        expect(await jobs.getJob(jobId)).toBeUndefined();
      } finally {
        await jobs.close();
      }
    },
  );
});
