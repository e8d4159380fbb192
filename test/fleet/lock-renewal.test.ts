// A worker whose lock renewal fails stops the job's processing at once: against a real
// redis-server and emulator, the lock of a job a worker follows is given another token (as a
// takeover does); BullMQ's next renewal fails, the worker says it lost the job and stops following
// it, and leaves it alone. Once that foreign lock lapses the job is taken again and followed from
// its submission: one request for its key, completed.
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GenerationClient } from '../../src/api/client.js';
import { resolveConfig } from '../../src/api/config.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { submissionOf, type InstanceJobData, type InstanceJobResult } from '../../src/fleet/instance-job.js';
import { parseRedisUrl } from '../../src/fleet/redis.js';
import { startFleetWorker, type JobLog } from '../../src/fleet/worker.js';
import { HF_KEY } from '../run/runner-helpers.js';
import { useTestRedis } from './fleet-helpers.js';

const redis = useTestRedis();
let emu: Emulator;
let client: GenerationClient;
beforeAll(async () => {
  // Slow enough that the job is still followed when its lock is taken (8 to 20 s a sheet).
  emu = await startEmulator({ port: 0, timeScale: 1, log: () => {} });
  client = new GenerationClient(resolveConfig({ flags: { baseUrl: emu.url }, env: { HF_KEY } }));
});
afterAll(async () => {
  await client.close();
  await emu.close();
});

async function until(what: () => boolean | Promise<boolean>, ms: number, label: string): Promise<number> {
  const start = Date.now();
  // Bounded by the deadline.
  while (!(await what())) {
    if (Date.now() - start > ms) throw new Error(`not within ${ms} ms: ${label}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return Date.now() - start;
}

describe('a lock renewal that fails', () => {
  it(
    'stops the job’s following at once; the job is followed again from its submission once free, one request',
    { timeout: 90_000 },
    async () => {
      const name = 'renewal';
      const target = parseRedisUrl(redis.url);
      const queue = new Queue<InstanceJobData, InstanceJobResult>(name, { connection: target.options });
      const said: string[] = [];
      const jobs: JobLog[] = [];
      const worker = await startFleetWorker({
        redis: target,
        queue: name,
        client,
        concurrency: 1,
        name: 'w-renewal',
        say: (line) => said.push(line),
        onJob: (job) => jobs.push(job),
      });
      const raw = new Redis(redis.url);
      try {
        const key = 'renewal-key';
        await queue.add(
          'instance',
          {
            v: 1,
            runId: 'r',
            instance: 'sheets[seed=9]',
            model: 'character-sheet',
            body: { tier: 'cats', seed: 9, brief: 'A mascot' },
            idempotencyKey: key,
            poll: { baseMs: 100, floorMs: 50, capMs: 400 },
          },
          { jobId: 'grenewal' },
        );
        await until(
          async () => submissionOf((await queue.getJob('grenewal')) ?? { data: {} as InstanceJobData, progress: 0 }) !== undefined,
          15_000,
          'submitted',
        );
        // Another holder's token on the lock, lapsing in 8 s: the worker's next renewal (every 5 s) fails.
        await raw.set(`${queue.toKey('grenewal')}:lock`, 'another-worker', 'PX', 8_000);
        const took = await until(
          () => said.some((l) => /lost the lock of the job of sheets\[seed=9\]/.test(l)),
          8_000,
          `the worker said it lost the job: ${said.join(' | ')}`,
        );
        expect(took).toBeLessThan(8_000);
        expect(jobs[0]).toMatchObject({ instance: 'sheets[seed=9]', outcome: 'lock_lost' });
        // Left alone: still active, and no result written by the worker that lost it.
        expect(await queue.getJobState('grenewal')).toBe('active');
        // Free again: the stalled-job check hands it back, and it is followed from its submission.
        await until(async () => (await queue.getJob('grenewal'))?.returnvalue?.kind === 'final', 60_000, 'followed to its end');
        const result = (await queue.getJob('grenewal'))?.returnvalue;
        expect(result?.kind === 'final' && result.result.status).toBe('completed');
        const requests = (emu.requests.inspect({}) as { idempotency_key: string | null }[]).filter((r) => r.idempotency_key === key);
        expect(requests).toHaveLength(1);
      } finally {
        raw.disconnect();
        await worker.close(0);
        await queue.close();
      }
    },
  );
});
