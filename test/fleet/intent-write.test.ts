// The worker's intent write against a real redis-server: it is written only while the job's BullMQ
// lock holds the writer's token, the job is not withdrawn, and no other holder wrote an intent
// since the writer read the job; the same write sent twice (a client re-sending after a
// reconnect) is written once.
import { Queue, Worker, type Job } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withdrawnKey, type InstanceJobData, type InstanceJobResult } from '../../src/fleet/instance-job.js';
import { writeIntent } from '../../src/fleet/intent-write.js';
import { useTestRedis } from './fleet-helpers.js';

const redis = useTestRedis();
let queue: Queue<InstanceJobData, InstanceJobResult>;
let worker: Worker<InstanceJobData, InstanceJobResult>;
beforeAll(async () => {
  queue = new Queue('intent-write', { connection: { url: redis.url } });
  worker = new Worker('intent-write', null, { connection: { url: redis.url }, lockDuration: 30_000 });
  await worker.waitUntilReady();
});
afterAll(async () => {
  await worker.close();
  await queue.close();
});

let ids = 0;
/** Adds a job and takes it by hand with `token`, as a worker's processor holds it. */
async function taken(token: string): Promise<Job<InstanceJobData, InstanceJobResult>> {
  const jobId = `gintent${++ids}`;
  await queue.add(
    'instance',
    { v: 1, runId: 'r', instance: `p[n=${ids}]`, model: 'soul-standard', body: {}, idempotencyKey: null },
    { jobId },
  );
  const job = (await worker.getNextJob(token)) as Job<InstanceJobData, InstanceJobResult> | undefined;
  expect(job?.id).toBe(jobId);
  return job as Job<InstanceJobData, InstanceJobResult>;
}

const stored = async (id: string | undefined): Promise<InstanceJobData | undefined> => (await queue.getJob(id ?? ''))?.data;
const client = async () => await queue.getBackend().client;

describe('the intent write', () => {
  it('is written while the lock holds the writer’s token, and once when the same write comes twice', async () => {
    const job = await taken('token-a');
    expect(await writeIntent(queue, job, 'token-a', 1_764_680_000_123)).toBe('written');
    expect((await stored(job.id))?.intentAt).toBe(1_764_680_000_123);
    // The same write again (re-sent after a reconnect): already done, still one intent.
    const before = { ...job, data: { ...job.data, intentAt: undefined } } as unknown as Job<InstanceJobData, InstanceJobResult>;
    expect(await writeIntent(queue, before, 'token-a', 1_764_680_000_123)).toBe('written');
    expect((await stored(job.id))?.intentAt).toBe(1_764_680_000_123);
  });

  it('is refused when the lock holds another token (the job was taken over), and nothing is written', async () => {
    const job = await taken('token-a');
    const lock = `${queue.toKey(job.id ?? '')}:lock`;
    await (await client()).set(lock, 'token-b');
    expect(await writeIntent(queue, job, 'token-a', Date.now())).toBe('lock_lost');
    expect((await stored(job.id))?.intentAt).toBeUndefined();
    // And when the lock lapsed and nobody holds it yet.
    await (await client()).del(lock);
    expect(await writeIntent(queue, job, 'token-a', Date.now())).toBe('lock_lost');
    expect((await stored(job.id))?.intentAt).toBeUndefined();
  });

  it('is refused when another holder wrote an intent since the job was read', async () => {
    const job = await taken('token-a');
    await job.updateData({ ...job.data, intentAt: 42 });
    const stale = { ...job, id: job.id, data: { ...job.data, intentAt: undefined } } as unknown as Job<InstanceJobData, InstanceJobResult>;
    expect(await writeIntent(queue, stale, 'token-a', Date.now())).toBe('intent_changed');
    expect((await stored(job.id))?.intentAt).toBe(42);
    // One that read that intent (a keyed resend) writes its own.
    const fresh = { ...job, id: job.id, data: { ...job.data, intentAt: 42 } } as unknown as Job<InstanceJobData, InstanceJobResult>;
    expect(await writeIntent(queue, fresh, 'token-a', 43)).toBe('written');
    expect((await stored(job.id))?.intentAt).toBe(43);
  });

  it('is refused when the coordinator withdrew the job, and nothing is written', async () => {
    const job = await taken('token-a');
    await (await client()).set(withdrawnKey(queue, job.id ?? ''), '1');
    expect(await writeIntent(queue, job, 'token-a', Date.now())).toBe('withdrawn');
    expect((await stored(job.id))?.intentAt).toBeUndefined();
  });
});
