// The rules a fleet worker keeps for one job, against a real redis-server and a real emulator:
// the intent reaches Redis before the POST, a job taken over is followed from its submission, a
// keyed submit is resent with its key, a keyless one whose fate is unknown is never resent, and a
// 429 slows the worker's route, not the queue: the throttled job waits its Retry-After, the others go on.
import { Queue, type Job } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { GenerationClient } from '../../src/api/client.js';
import { resolveConfig } from '../../src/api/config.js';
import { submissionOf, type InstanceJobData, type InstanceJobResult } from '../../src/fleet/instance-job.js';
import { startFleetWorker, type FleetWorker } from '../../src/fleet/worker.js';
import { HF_KEY } from '../run/runner-helpers.js';
import { useInProcessFleet } from './fleet-helpers.js';

const fleet = useInProcessFleet();

const SHEET = { tier: 'cats' as const, seed: 7, brief: 'A mascot' };
const POLL = { baseMs: 20, floorMs: 20, capMs: 200 };

let queues = 0;
/** A queue of the test's own with one worker on it; `body` adds jobs and reads what they return. */
async function withWorker(body: (queue: Queue<InstanceJobData, InstanceJobResult>, worker: FleetWorker) => Promise<void>): Promise<void> {
  const name = `rules-${++queues}`;
  const queue = new Queue<InstanceJobData, InstanceJobResult>(name, { connection: fleet.target.options });
  const worker = await startFleetWorker({
    redis: fleet.target,
    queue: name,
    client: fleet.client,
    concurrency: 2,
    name: `w-${name}`,
    say: () => {},
  });
  try {
    await body(queue, worker);
  } finally {
    await worker.close(0);
    await queue.close();
  }
}

async function resultOf(
  queue: Queue<InstanceJobData, InstanceJobResult>,
  jobId: string,
  timeoutMs = 15_000,
): Promise<{ result: InstanceJobResult; job: Job<InstanceJobData, InstanceJobResult> }> {
  const end = Date.now() + timeoutMs;
  // Bounded by the deadline.
  while (Date.now() < end) {
    const job = await queue.getJob(jobId);
    if (job?.finishedOn !== undefined && job.returnvalue) return { result: job.returnvalue, job };
    if (job?.failedReason) throw new Error(`job failed: ${job.failedReason}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`job ${jobId} did not finish within ${timeoutMs} ms`);
}

const requestsWithKey = (key: string | null): number =>
  (fleet.emu.requests.inspect({}) as { idempotency_key: string | null }[]).filter((r) => r.idempotency_key === key).length;

describe('a fleet worker', () => {
  it("submits with the job's Idempotency-Key, writes the intent and then the submission into the job, and hands back the final status with output URLs", async () => {
    await withWorker(async (queue) => {
      const key = 'rules-fresh-key';
      await queue.add(
        'instance',
        { v: 1, runId: 'r1', instance: 'sheets[seed=7]', model: 'character-sheet', body: SHEET, idempotencyKey: key, poll: POLL },
        { jobId: 'gfresh' },
      );
      const { result, job } = await resultOf(queue, 'gfresh');
      expect(result.kind).toBe('final');
      if (result.kind !== 'final') return;
      expect(result.result.status).toBe('completed');
      expect(result.result.files[0]?.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\//);
      expect(job.data.intentAt).toBeTypeOf('number');
      // The submission is kept as the job's progress, where a later holder and a resumed coordinator read it.
      expect(job.progress).toEqual({ submission: result.submission });
      expect(submissionOf(job)).toEqual(result.submission);
      expect(requestsWithKey(key)).toBe(1);
    });
  });

  it("follows the submission a dead worker left as the job's progress, without a second POST, keyless too", async () => {
    // Keyless: a resend would be a second request, and an intent without a submission would end unknown.
    const submission = await fleet.client.characterSheet.submit(SHEET, {});
    const sent = fleet.emu.requests.byId.size;
    const queue = new Queue<InstanceJobData, InstanceJobResult>(`rules-progress-${Date.now()}`, { connection: fleet.target.options });
    try {
      const handle = { kind: 'request' as const, requestId: submission.request_id };
      const job = await queue.add(
        'instance',
        {
          v: 1,
          runId: 'r1',
          instance: 'sheets[seed=6]',
          model: 'character-sheet',
          body: SHEET,
          idempotencyKey: null,
          intentAt: Date.now(),
          poll: POLL,
        },
        { jobId: 'gprogress' },
      );
      // What the dead holder wrote once the service answered: the progress, not the data.
      await job.updateProgress({ submission: handle });
      const worker = await startFleetWorker({
        redis: fleet.target,
        queue: queue.name,
        client: fleet.client,
        concurrency: 1,
        name: 'later',
        say: () => {},
      });
      try {
        const { result } = await resultOf(queue, 'gprogress');
        expect(result).toMatchObject({ kind: 'final', submission: handle, result: { status: 'completed' } });
        expect(fleet.emu.requests.byId.size).toBe(sent);
      } finally {
        await worker.close(0);
      }
    } finally {
      await queue.obliterate({ force: true }).catch(() => {});
      await queue.close();
    }
  });

  it("follows the submission a dead worker left in the job's data (as workers before 2026-11-27 wrote it), without a second POST", async () => {
    const key = 'rules-followed-key';
    const submission = await fleet.client.characterSheet.submit(SHEET, { idempotencyKey: key });
    await withWorker(async (queue) => {
      const handle = { kind: 'request' as const, requestId: submission.request_id };
      await queue.add(
        'instance',
        {
          v: 1,
          runId: 'r1',
          instance: 'sheets[seed=8]',
          model: 'character-sheet',
          body: SHEET,
          idempotencyKey: key,
          intentAt: Date.now(),
          submission: handle,
          poll: POLL,
        },
        { jobId: 'gfollow' },
      );
      const { result } = await resultOf(queue, 'gfollow');
      expect(result).toMatchObject({ kind: 'final', submission: handle, result: { status: 'completed' } });
      expect(requestsWithKey(key)).toBe(1);
    });
  });

  it('resends a keyed submit whose holder died after its intent with the same key: the service answers with the same request', async () => {
    const key = 'rules-resent-key';
    const first = await fleet.client.characterSheet.submit(SHEET, { idempotencyKey: key });
    await withWorker(async (queue) => {
      await queue.add(
        'instance',
        {
          v: 1,
          runId: 'r1',
          instance: 'sheets[seed=9]',
          model: 'character-sheet',
          body: SHEET,
          idempotencyKey: key,
          intentAt: Date.now(),
          poll: POLL,
        },
        { jobId: 'gresend' },
      );
      const { result } = await resultOf(queue, 'gresend');
      expect(result).toMatchObject({ kind: 'final', submission: { kind: 'request', requestId: first.request_id } });
      expect(requestsWithKey(key)).toBe(1);
    });
  });

  it('never resends a keyless submit whose holder died after its intent: the job ends unknown and nothing is sent', async () => {
    const before = fleet.emu.requests.byId.size;
    await withWorker(async (queue) => {
      const body = { prompt: 'Banner for the fleet', resolution: '1k', quality: 'low' };
      await queue.add(
        'instance',
        { v: 1, runId: 'r1', instance: 'ads[n=1]', model: 'marketing-image', body, idempotencyKey: null, intentAt: Date.now(), poll: POLL },
        { jobId: 'gkeyless' },
      );
      const { result } = await resultOf(queue, 'gkeyless');
      expect(result.kind).toBe('unknown');
      expect(fleet.emu.requests.byId.size).toBe(before);
    });
  });

  it('sends a keyless submit once when no intent was written before (the accepted case of the rule above)', async () => {
    const before = fleet.emu.requests.byId.size;
    await withWorker(async (queue) => {
      const body = { prompt: 'Banner for the fleet, fresh', resolution: '1k', quality: 'low' };
      await queue.add(
        'instance',
        { v: 1, runId: 'r1', instance: 'ads[n=2]', model: 'marketing-image', body, idempotencyKey: null, poll: POLL },
        { jobId: 'gkeylessfresh' },
      );
      const { result } = await resultOf(queue, 'gkeylessfresh');
      expect(result).toMatchObject({ kind: 'final', result: { status: 'completed' } });
      expect(fleet.emu.requests.byId.size).toBe(before + 1);
    });
  });

  it('hands a refused submit back as an error with its code, for the coordinator to decide', async () => {
    await withWorker(async (queue) => {
      await queue.add(
        'instance',
        {
          v: 1,
          runId: 'r1',
          instance: 'sheets[seed=10]',
          model: 'character-sheet',
          body: { ...SHEET, tier: 'no-such-tier' },
          idempotencyKey: 'rules-refused',
          poll: POLL,
        },
        { jobId: 'grefused' },
      );
      const { result } = await resultOf(queue, 'grefused');
      expect(result).toMatchObject({ kind: 'submit_error' });
      expect(requestsWithKey('rules-refused')).toBe(0);
    });
  });

  it('a 429 met by one worker slows its route, not the queue: the job waits its Retry-After, another worker goes on', async () => {
    const name = `rules-${++queues}`;
    const queue = new Queue<InstanceJobData, InstanceJobResult>(name, { connection: fleet.target.options });
    const clientB = new GenerationClient(resolveConfig({ flags: { baseUrl: fleet.emu.url }, env: { HF_KEY } }));
    const a = await startFleetWorker({
      redis: fleet.target,
      queue: name,
      client: fleet.client,
      concurrency: 1,
      name: `a-${name}`,
      say: () => {},
    });
    const b = await startFleetWorker({
      redis: fleet.target,
      queue: name,
      client: clientB,
      concurrency: 1,
      name: `b-${name}`,
      say: () => {},
    });
    try {
      // The emulator's Retry-After is 1 s: the first submit is refused once.
      fleet.emu.forceFaults('submit', 'rate_429');
      const refusedBefore = Object.values(fleet.emu.faults.injected).reduce((x, y) => x + y, 0);
      await queue.add(
        'instance',
        {
          v: 1,
          runId: 'r2',
          instance: 'sheets[seed=11]',
          model: 'character-sheet',
          body: { ...SHEET, seed: 11 },
          idempotencyKey: 'rules-429-first',
          poll: POLL,
        },
        { jobId: 'g429a' },
      );
      const end = Date.now() + 5_000;
      // Bounded by the deadline.
      while (Date.now() < end && Object.values(fleet.emu.faults.injected).reduce((x, y) => x + y, 0) === refusedBefore)
        await new Promise((r) => setTimeout(r, 5));
      const refusedAt = Date.now();
      expect(refusedAt).toBeLessThan(end);
      // The queue is not paused: BullMQ's limiter holds nothing, and the idle worker takes the next job.
      expect(await queue.getRateLimitTtl(Number.MAX_SAFE_INTEGER)).toBeLessThanOrEqual(0);
      await queue.add(
        'instance',
        {
          v: 1,
          runId: 'r2',
          instance: 'sheets[seed=12]',
          model: 'character-sheet',
          body: { ...SHEET, seed: 12 },
          idempotencyKey: 'rules-429-second',
          poll: POLL,
        },
        { jobId: 'g429b' },
      );
      await resultOf(queue, 'g429a');
      await resultOf(queue, 'g429b');
      const created = (key: string): number =>
        Date.parse(
          (fleet.emu.requests.inspect({}) as { idempotency_key: string | null; created_at: string }[]).find(
            (r) => r.idempotency_key === key,
          )?.created_at ?? '',
        );
      // The throttled job was sent again no earlier than its Retry-After (seen here a little after
      // the emulator sent it, so 50 ms spare); the other went while it waited.
      expect(created('rules-429-first')).toBeGreaterThanOrEqual(refusedAt + 1_000 - 50);
      expect(created('rules-429-second')).toBeLessThan(created('rules-429-first'));
      expect(requestsWithKey('rules-429-first')).toBe(1);
    } finally {
      await a.close(0);
      await b.close(0);
      await clientB.close();
      await queue.close();
    }
  });
});
