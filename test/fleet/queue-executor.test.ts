// The coordinator's side of the fleet (fleet/queue-executor.ts), in process against a real redis-server,
// a real emulator and a real worker: what a submit does with a job an earlier coordinator left in
// Redis, and with a job Redis lost.
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { GenpipeError } from '../../src/api/errors.js';
import { QueueExecutor } from '../../src/fleet/queue-executor.js';
import { jobIdOf, type InstanceJobData, type InstanceJobResult } from '../../src/fleet/instance-job.js';
import { startFleetWorker } from '../../src/fleet/worker.js';
import type { AdapterContext, ModelAdapter } from '../../src/models/adapter.js';
import { adapterFor } from '../../src/models/registry.js';
import type { AttemptRef } from '../../src/run/attempt/attempt-ref.js';
import type { AttemptWork } from '../../src/run/attempt/executor.js';
import { PollScheduler } from '../../src/run/polling/poll-schedule.js';
import { runPlan } from '../../src/run/runner.js';
import { closeRun, prepareRun, runOf } from '../run/pin-helpers.js';
import { sheetsManifest, tempDir } from '../run/runner-helpers.js';
import { useInProcessFleet } from './fleet-helpers.js';

const fleet = useInProcessFleet();

const BANNER = { prompt: 'Banner of the dispatch test', resolution: '1k', quality: 'low' };
let runs = 0;

async function withDispatch(
  body: (
    executor: QueueExecutor,
    attempt: AttemptRef,
    work: AttemptWork,
    queue: Queue<InstanceJobData, InstanceJobResult>,
    runId: string,
    ctx: AdapterContext,
  ) => Promise<void>,
  // `resumed`: the executor of a coordinator that meets what an earlier one left (the default here).
  options: { worker?: boolean; resumed?: boolean } = {},
): Promise<void> {
  const name = `dispatch-${++runs}`;
  const runId = `run-${runs}`;
  const queue = new Queue<InstanceJobData, InstanceJobResult>(name, { connection: fleet.target.options });
  const dispatch = await QueueExecutor.open({
    redis: fleet.target,
    queue: name,
    runId,
    say: () => {},
    poll: { baseMs: 20, floorMs: 20 },
    resumed: options.resumed ?? true,
  });
  const worker =
    options.worker === false
      ? undefined
      : await startFleetWorker({
          redis: fleet.target,
          queue: name,
          client: fleet.client,
          concurrency: 2,
          name: `w-${name}`,
          say: () => {},
        });
  const attempt: AttemptRef = { runId, instance: 'ads[n=1]', retry: 0, reroll: 0 };
  const work: AttemptWork = { model: 'marketing-image', adapter: adapterFor('marketing-image') as ModelAdapter, script: {} };
  const ctx: AdapterContext = { client: fleet.client, signal: AbortSignal.timeout(20_000) };
  try {
    await body(dispatch, attempt, work, queue, runId, ctx);
  } finally {
    await worker?.close(0);
    await dispatch.close();
    await queue.close();
  }
}

describe("the fleet coordinator's executor", () => {
  it('a job an earlier coordinator left ended unknown is replaced when the instance is deliberately resent (--resubmit-unknown): one new request', async () => {
    await withDispatch(async (executor, attempt, work, queue, runId, ctx) => {
      const jobId = jobIdOf(runId, 'ads[n=1]', '0.0');
      // What a worker leaves when it finds a keyless intent without an answer: a finished job, unknown.
      await queue.add(
        'instance',
        { v: 1, runId, instance: 'ads[n=1]', model: 'marketing-image', body: BANNER, idempotencyKey: null, intentAt: 1 },
        { jobId },
      );
      const end = Date.now() + 10_000;
      // Bounded by the deadline.
      while (Date.now() < end && (await queue.getJob(jobId))?.returnvalue?.kind !== 'unknown') await new Promise((r) => setTimeout(r, 20));
      expect((await queue.getJob(jobId))?.returnvalue?.kind).toBe('unknown');
      const before = fleet.emu.requests.byId.size;
      const submission = await executor.submit(attempt, work, BANNER, undefined, ctx);
      if (submission.kind !== 'request') throw new Error(`submitted nothing: ${JSON.stringify(submission)}`);
      const timer = new PollScheduler({ baseMs: 20, floorMs: 20 }, Math.random).start('marketing-image', Date.now());
      const followed = await executor.follow(attempt, work, submission, ctx, { signal: ctx.signal, timer, mayRetry: () => false });
      expect(followed.result).toMatchObject({ done: true, status: 'completed' });
      expect(fleet.emu.requests.byId.size).toBe(before + 1);
      // Read and journaled: the job is gone from Redis.
      expect(await queue.getJob(jobId)).toBeUndefined();
    });
  });

  it("a new run's submit reads no job before or after adding it (no job of a new run can be in Redis); a resumed run's reads both", async () => {
    const redis = new Redis(fleet.target.options);
    // HGETALL is how a job is read (Job.fromId): counted on the server, around one submit and its follow.
    const hgetalls = async (): Promise<number> => Number(/cmdstat_hgetall:calls=(\d+)/.exec(await redis.info('commandstats'))?.[1] ?? 0);
    const reads: Record<string, number> = {};
    // No sweep during the count: a look of its own, on a loaded machine, would read the job once more.
    process.env.GENPIPE_FLEET_SWEEP_MS = '600000';
    try {
      for (const resumed of [false, true]) {
        await withDispatch(
          async (executor, attempt, work, _queue, _runId, ctx) => {
            const before = fleet.emu.requests.byId.size;
            const start = await hgetalls();
            const submission = await executor.submit(attempt, work, BANNER, undefined, ctx);
            reads[String(resumed)] = (await hgetalls()) - start;
            if (submission.kind !== 'request') throw new Error(`submitted nothing: ${JSON.stringify(submission)}`);
            const timer = new PollScheduler({ baseMs: 20, floorMs: 20 }, Math.random).start('marketing-image', Date.now());
            const followed = await executor.follow(attempt, work, submission, ctx, { signal: ctx.signal, timer, mayRetry: () => false });
            expect(followed.result).toMatchObject({ done: true, status: 'completed' });
            expect(fleet.emu.requests.byId.size).toBe(before + 1);
          },
          { resumed },
        );
      }
    } finally {
      delete process.env.GENPIPE_FLEET_SWEEP_MS;
      redis.disconnect();
    }
    // The worker reads the job as it takes it either way; the resumed coordinator twice more.
    expect(reads.true).toBeGreaterThanOrEqual((reads.false ?? 0) + 2);
  });

  it('a stopped coordinator never calls a job a worker already finished "not sent" (soak seed 50366: a keyless poster paid twice)', async () => {
    await withDispatch(async (executor, attempt, work, queue, runId) => {
      const jobId = jobIdOf(runId, 'ads[n=1]', '0.0');
      // A worker takes and finishes the job before its coordinator hears of it…
      await queue.add(
        'instance',
        { v: 1, runId, instance: 'ads[n=1]', model: 'marketing-image', body: BANNER, idempotencyKey: null },
        { jobId },
      );
      const end = Date.now() + 10_000;
      // Bounded by the deadline.
      while (Date.now() < end && (await queue.getJob(jobId))?.returnvalue?.kind !== 'final') await new Promise((r) => setTimeout(r, 20));
      expect((await queue.getJob(jobId))?.returnvalue?.kind).toBe('final');
      const sent = fleet.emu.requests.byId.size;
      // …and the coordinator stops (Ctrl-C) as it looks: the request was sent, so it is never journaled as not sent.
      const stopped = new AbortController();
      stopped.abort(new GenpipeError('aborted', 'Interrupted.'));
      const error = await executor
        .submit(attempt, work, BANNER, undefined, { client: fleet.client, signal: stopped.signal })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(GenpipeError);
      expect((error as GenpipeError).neverSent).not.toBe(true);
      expect(fleet.emu.requests.byId.size).toBe(sent);
    });
  });

  it('a stopped coordinator never calls "not sent" a waiting job an earlier holder may have sent: back in the queue with its intent (its holder died), or with its submission (handed back)', async () => {
    const leftBy = {
      'a holder that died after its intent': { intentAt: 1 },
      'a holder that handed it back': { intentAt: 1, submission: { kind: 'request', requestId: '00000000-0000-4000-8000-0000000000aa' } },
    } as const;
    for (const [what, extra] of Object.entries(leftBy)) {
      await withDispatch(
        async (executor, attempt, work, queue, runId) => {
          const jobId = jobIdOf(runId, 'ads[n=1]', '0.0');
          await queue.add(
            'instance',
            {
              v: 1,
              runId,
              instance: 'ads[n=1]',
              model: 'marketing-image',
              body: BANNER,
              idempotencyKey: null,
              ...extra,
            } as InstanceJobData,
            { jobId },
          );
          expect(await queue.getJobState(jobId)).toBe('waiting');
          const stopped = new AbortController();
          stopped.abort(new GenpipeError('aborted', 'Interrupted.'));
          const error = await executor
            .submit(attempt, work, BANNER, undefined, { client: fleet.client, signal: stopped.signal })
            .catch((e: unknown) => e);
          expect(error, what).toBeInstanceOf(GenpipeError);
          expect((error as GenpipeError).neverSent, what).not.toBe(true);
          // Kept, for a resume to follow.
          expect(await queue.getJob(jobId), what).toBeDefined();
        },
        { worker: false },
      );
    }
  });

  it('a worker that takes a job its coordinator withdrew sends nothing; a later coordinator hands it out again, sent once', async () => {
    await withDispatch(
      async (executor, attempt, work, queue, runId, ctx) => {
        const jobId = jobIdOf(runId, 'ads[n=1]', '0.0');
        // A coordinator that stopped with the job waiting: it withdrew it, and nothing was sent.
        const stopped = new AbortController();
        stopped.abort(new GenpipeError('aborted', 'Interrupted.'));
        const error = await executor.submit(attempt, work, BANNER, undefined, { ...ctx, signal: stopped.signal }).catch((e: unknown) => e);
        expect((error as GenpipeError).neverSent).toBe(true);
        // Its mark stays: a worker that took the job between the mark and the removal would find it.
        await queue.add(
          'instance',
          { v: 1, runId, instance: 'ads[n=1]', model: 'marketing-image', body: BANNER, idempotencyKey: null },
          { jobId },
        );
        const before = fleet.emu.requests.byId.size;
        const worker = await startFleetWorker({
          redis: fleet.target,
          queue: queue.name,
          client: fleet.client,
          concurrency: 1,
          name: 'late',
          say: () => {},
        });
        try {
          const end = Date.now() + 10_000;
          // Bounded by the deadline.
          while (Date.now() < end && (await queue.getJob(jobId))?.finishedOn === undefined) await new Promise((r) => setTimeout(r, 20));
          expect((await queue.getJob(jobId))?.returnvalue).toEqual({ kind: 'withdrawn' });
          expect(fleet.emu.requests.byId.size).toBe(before);
          // A resumed coordinator sends it: the withdrawal no longer stands, and one request goes.
          const submission = await executor.submit(attempt, work, BANNER, undefined, ctx);
          expect(submission.kind).toBe('request');
          expect(fleet.emu.requests.byId.size).toBe(before + 1);
        } finally {
          await worker.close(0);
        }
      },
      { worker: false },
    );
  });

  it('a keyless job Redis lost before any worker took it ends unknown, never sent', async () => {
    await withDispatch(
      async (executor, attempt, work, queue, runId, ctx) => {
        const jobId = jobIdOf(runId, 'ads[n=1]', '0.0');
        const before = fleet.emu.requests.byId.size;
        const submitting = executor.submit(attempt, work, BANNER, undefined, ctx);
        const end = Date.now() + 10_000;
        // Bounded by the deadline.
        while (Date.now() < end && !(await queue.getJob(jobId))) await new Promise((r) => setTimeout(r, 20));
        // Redis loses it (a restart without persistence): as far as the coordinator knows, it may have been sent.
        await queue.obliterate({ force: true });
        // A queue fact, returned as the attempt's fate: no HTTP error is made up for it.
        expect(await submitting).toMatchObject({ kind: 'unknown', message: expect.stringContaining('may or may not') });
        expect(fleet.emu.requests.byId.size).toBe(before);
      },
      { worker: false },
    );
  });

  it(
    'a run waiting on its workers is not taken for stuck: the watchdog sees the follow under way (soak seeds 30008, 30009)',
    { timeout: 30_000 },
    async () => {
      const name = `dispatch-${++runs}`;
      // Workers look only after a second, so the coordinator waits with nothing of its own busy; the
      // watchdog looks every 100 ms (two looks without progress would end the run with exit 70).
      const executor = await QueueExecutor.open({
        redis: fleet.target,
        queue: name,
        runId: 'watched',
        say: () => {},
        poll: { baseMs: 1_000, floorMs: 1_000 },
        resumed: false,
      });
      const worker = await startFleetWorker({
        redis: fleet.target,
        queue: name,
        client: fleet.client,
        concurrency: 4,
        name: `w-${name}`,
        say: () => {},
      });
      const run = await prepareRun(fleet.emu, sheetsManifest(tempDir(), 3, { name: 'watched' }));
      try {
        const summary = await runPlan({ ...runOf(run), signal: new AbortController().signal, executor, watchdogMs: 100 });
        expect(summary.counts.completed).toBe(3);
      } finally {
        await closeRun(run);
        await worker.close(0);
        await executor.close();
      }
    },
  );
});
