/**
 * A fleet worker: takes instance jobs from the queue and runs each one's submit and tracking
 * against the service with its own credentials, then hands the final status and output URLs back
 * to the run's coordinator (which journals, downloads and reports). Limits are the queue's:
 * BullMQ's global concurrency and rate limit hold across every worker on every host. A 429 slows
 * the route it came from in this worker (run/limits/route-limiter.ts, as in a run), not the queue.
 *
 * Paying once across hosts: before its POST a worker writes the intent into the job (Redis), only
 * while the job's lock holds this worker's token (intent-write.ts); after it, the submission. A job taken over from a dead worker (BullMQ's stalled-job recovery) is
 * followed from its submission if there is one; otherwise a keyed submit is resent with the same
 * Idempotency-Key (the service answers with the same request) and a keyless one becomes *unknown*,
 * never resent. That needs the intent to survive a Redis crash too: see the README (appendfsync).
 */
import { setMaxListeners } from 'node:events';
import { hostname } from 'node:os';
import { DelayedError, Queue, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import type { GenerationClient } from '../api/client.js';
import { GenpipeError, IndeterminateSubmissionError } from '../api/errors.js';
import type { AdapterContext } from '../models/adapter.js';
import { adapterFor } from '../models/registry.js';
import type { AttemptRef } from '../run/attempt/attempt-ref.js';
import { isFate } from '../run/attempt/fate.js';
import { localExecutor, type AttemptWork } from '../run/attempt/executor.js';
import { resumeAction } from '../run/journal/run-state.js';
import { PollScheduler } from '../run/polling/poll-schedule.js';
import type { WebhookReceiver } from '../run/polling/webhook-receiver.js';
import { pauseBeforeIntent, writeIntent } from './intent-write.js';
import { submissionOf, type InstanceJobData, type InstanceJobResult, type JobPolling, type SubmittedProgress } from './instance-job.js';
import { commandOptions, DISCONNECT_MS, reportConnection, type RedisTarget } from './redis.js';
import { within } from '../util/within.js';
import { RouteLimiter } from '../run/limits/route-limiter.js';
import type { RunObserver } from '../run/observer.js';
import { HEARTBEAT_MS, LOCK_MS, WORKER_RECORD_TTL_MS, workerKey, type WorkerHeartbeat } from './queue-admin.js';

/** How long a worker's lock on a job lasts unless renewed (queue-admin.ts), and how often stalled jobs are looked for. */
export { LOCK_MS };
export const STALLED_CHECK_MS = 5_000;

export interface FleetWorkerOptions {
  redis: RedisTarget;
  queue: string;
  client: GenerationClient;
  concurrency: number;
  name: string;
  /** Where warnings go (one line each). */
  say: (line: string) => void;
  /**
   * Track this worker's own requests by webhook (§6): the service posts to the receiver, and a
   * delivery wakes the job for one confirming GET; polling stays on as a slow fallback. A job taken
   * over from another worker was submitted with that worker's URL, so it is polled.
   */
  webhook?: WebhookReceiver | undefined;
  /** Called once per job this worker ends (or gives up), for its log line (genpipe worker). */
  onJob?: ((job: JobLog) => void) | undefined;
  /** Told each request's answer and the worker's throttling, for `--metrics` (run/observer.ts). */
  observer?: RunObserver | undefined;
}

/** One job as a worker's log tells it: which, when, how it ended. */
export interface JobLog {
  runId: string;
  instance: string;
  model: string;
  /** `completed`, `failed`, `nsfw` (a final status), or `submit_error`, `track_error`, `unknown`, `withdrawn`, `handed_back` (to the queue, for another worker), `lock_lost`, `error`. */
  outcome: string;
  startedAt: string;
  endedAt: string;
  durationMs: number;
}

/** Thrown for a job whose lock this worker lost: BullMQ leaves a DelayedError's job alone (another worker holds it). */
class LostLock extends DelayedError {}

/** What a job's end is called in the log. */
function outcomeOf(result: InstanceJobResult | undefined, error: unknown): string {
  if (result) return result.kind === 'final' ? result.result.status : result.kind;
  if (error instanceof LostLock) return 'lock_lost';
  return error instanceof DelayedError ? 'handed_back' : 'error';
}

export interface FleetWorker {
  readonly name: string;
  /**
   * Stops taking jobs and lets those in flight finish for at most `graceMs`; a job still tracking
   * then is handed back (moved to delayed, due at once) for another worker to follow from its
   * submission. Resolves once the worker is closed.
   */
  close(graceMs: number): Promise<void>;
  /** Drops every connection at once, closing nothing in Redis: for a Redis that stopped answering (redis-watch.ts). */
  disconnect(): Promise<void>;
}

export async function startFleetWorker(o: FleetWorkerOptions): Promise<FleetWorker> {
  // One schedule per polling setting the jobs bring (a manifest's defaults.polling), each learning per model.
  const schedules = new Map<string, PollScheduler>();
  const pollsFor = (poll: JobPolling | undefined): PollScheduler => {
    const options = {
      ...(poll?.baseMs ? { baseMs: poll.baseMs } : {}),
      ...(poll?.capMs ? { capMs: poll.capMs } : {}),
      ...(poll?.floorMs ? { floorMs: poll.floorMs } : {}),
    };
    const key = JSON.stringify(options);
    let polls = schedules.get(key);
    if (!polls) {
      polls = new PollScheduler(options, Math.random);
      schedules.set(key, polls);
    }
    return polls;
  };
  // Aborted at the end of the grace: tracking stops and the job is handed back.
  const handBack = new AbortController();
  // Every job in flight listens to it (sleeps, requests): no leak warning at high concurrency.
  setMaxListeners(0, handBack.signal);
  const queue = new Queue<InstanceJobData, InstanceJobResult>(o.queue, { connection: commandOptions(o.redis) });
  const status = reportConnection(queue, o.redis, o.say, `worker ${o.name}`);
  const heartbeat = new Redis({ ...commandOptions(o.redis), lazyConnect: true });
  heartbeat.on('error', () => {});
  let active = 0;
  let done = 0;
  // A job whose lock this worker lost (BullMQ could not renew it: another worker may hold it now) is
  // left alone: nothing more is sent or written for it here, and BullMQ does not touch it either.
  const lostJob = (job: Job<InstanceJobData, InstanceJobResult>): LostLock => {
    o.say(
      `warning: worker ${o.name}: lost the lock of the job of ${job.data.instance}; another worker takes it, nothing was sent from here after that.`,
    );
    return new LostLock();
  };
  const processor = async (
    job: Job<InstanceJobData, InstanceJobResult>,
    token?: string,
    // Declared, so BullMQ hands each job a signal (it looks at the processor's arity).
    lockLost?: AbortSignal,
  ): Promise<InstanceJobResult> => {
    active++;
    const started = Date.now();
    let result: InstanceJobResult | undefined;
    let failure: unknown;
    try {
      result = await runJob(job, token, lockLost ?? new AbortController().signal);
      return result;
    } catch (error) {
      failure = error;
      throw error;
    } finally {
      active--;
      done++;
      const ended = Date.now();
      const d = job.data;
      o.onJob?.({
        runId: d.runId,
        instance: d.instance,
        model: d.model,
        outcome: outcomeOf(result, failure),
        startedAt: new Date(started).toISOString(),
        endedAt: new Date(ended).toISOString(),
        durationMs: ended - started,
      });
    }
  };
  const runJob = async (
    job: Job<InstanceJobData, InstanceJobResult>,
    token: string | undefined,
    lockLost: AbortSignal,
  ): Promise<InstanceJobResult> => {
    const data = job.data;
    const adapter = adapterFor(data.model);
    if (!adapter)
      return {
        kind: 'submit_error',
        code: 'invalid_input',
        message: `this worker does not know the model ${data.model}; update genpipe on ${hostname()}`,
        neverSent: true,
      };
    const ctx: AdapterContext = { client: o.client, signal: handBack.signal };
    // The local executor, run here: the same submit and follow loop as a run without a fleet.
    const attempt: AttemptRef = { runId: data.runId, instance: data.instance, retry: data.retry ?? 0, reroll: data.reroll ?? 0 };
    const work: AttemptWork = { model: data.model, adapter, script: {} };
    let submission = submissionOf(job);
    // Whether this worker sent the request, so its deliveries come to this worker's receiver.
    let submittedHere = false;
    if (!submission) {
      // The job's intent, read as a journal's is: an intent without an answer and without a key is
      // unknown (an earlier holder died mid-submit), one with a key is resent with it.
      const intent =
        data.intentAt === undefined
          ? undefined
          : { type: 'intent' as const, instance: data.instance, model: data.model, idempotencyKey: data.idempotencyKey, bodyHash: '' };
      if (resumeAction({ intent, retries: 0, rerolls: 0 }, adapter.idempotentSubmit).kind === 'unknown') {
        return {
          kind: 'unknown',
          message:
            'a fleet worker died while submitting this keyless request: it may or may not have reached the service, so it was not resent (`genpipe resume --retry unknown` resends it)',
        };
      }
      if (token === undefined || lockLost.aborted) throw lostJob(job);
      pauseBeforeIntent();
      // The intent reaches Redis before the POST (see the file comment), in one script that writes
      // it only while this worker's lock token holds the job (intent-write.ts): a worker that lost
      // the job while paused or cut off writes nothing and sends nothing.
      const written = await writeIntent(queue, job, token, Date.now());
      // Withdrawn by its coordinator (its run stopped while the job waited): nothing is sent, and the
      // coordinator, which saw it waiting, journals it as not sent (instance-job.ts withdrawnKey).
      if (written === 'withdrawn') return { kind: 'withdrawn' };
      if (written !== 'written') throw lostJob(job);
      try {
        const answer = await localExecutor.submit(attempt, work, data.body, data.idempotencyKey ?? undefined, {
          ...ctx,
          webhookUrl: o.webhook?.url,
          signal: AbortSignal.timeout(120_000),
        });
        if (isFate(answer)) return { kind: 'unknown', message: answer.message };
        submission = answer;
        submittedHere = true;
      } catch (error) {
        if (!(error instanceof GenpipeError)) throw error;
        if (error instanceof IndeterminateSubmissionError)
          return { kind: 'unknown', message: error.message, ...(error.protocol ? { protocol: true as const } : {}) };
        if (error.code === 'rate_limited' && token !== undefined) {
          // Refused before processing, never charged (§7): the job comes back no earlier than its
          // Retry-After, and the queue goes on. It is moved first, which checks this worker's lock
          // token, and only then is its intent withdrawn: a worker that lost the job clears nothing
          // another holder wrote.
          await job.moveToDelayed(Date.now() + (error.retryAfterMs ?? 1_000), token);
          await job.updateData({ ...job.data, intentAt: undefined });
          throw new DelayedError();
        }
        return {
          kind: 'submit_error',
          code: error.code,
          message: error.message,
          neverSent: error.neverSent,
          status: error.status,
          retryAfterMs: error.retryAfterMs,
        };
      }
      // One command keeps the submission in the job (for a later holder) and tells the coordinator.
      await job.updateProgress({ submission } satisfies SubmittedProgress);
    }
    const followed = submission;
    try {
      const timer = pollsFor(data.poll).start(data.model, Date.now());
      const webhook = submittedHere ? o.webhook : undefined;
      // The body sent, so the service's answer is checked against it (follow-check.ts).
      // A look that keeps failing is given up on within the look policy's tries (classify.ts); the
      // coordinator may then follow on, under its run's retry budget.
      const done = await localExecutor.follow(
        attempt,
        work,
        followed,
        { ...ctx, sentBody: data.body },
        { signal: AbortSignal.any([handBack.signal, lockLost]), timer, webhook, mayRetry: () => true },
      );
      return { kind: 'final', submission: done.submission, result: done.result, durationMs: done.durationMs };
    } catch (error) {
      if (lockLost.aborted) throw lostJob(job);
      if (handBack.signal.aborted && token !== undefined) {
        // Shutting down: another worker follows the submission (it is in the job's data).
        await job.moveToDelayed(Date.now(), token);
        throw new DelayedError();
      }
      if (!(error instanceof GenpipeError) || error.code === 'aborted') throw error;
      return { kind: 'track_error', submission: followed, code: error.code, message: error.message };
    }
  };
  const worker = new Worker<InstanceJobData, InstanceJobResult>(o.queue, processor, {
    connection: o.redis.options,
    concurrency: o.concurrency,
    name: o.name,
    lockDuration: LOCK_MS,
    stalledInterval: STALLED_CHECK_MS,
    // A job is taken over after a worker dies as often as that happens; it never fails for it.
    maxStalledCount: 1_000,
    // Never binds by itself; the queue's own (genpipe queue limits --rate) wins over it.
    limiter: { max: 1_000_000, duration: 1_000 },
    autorun: false,
  });
  reportConnection(worker, o.redis, o.say, `worker ${o.name}`);
  // A lock BullMQ could not renew is lost: the job's processing stops before any further request.
  worker.on('lockRenewalFailed', (jobIds) => {
    for (const id of jobIds) worker.cancelJob(id, 'lock lost');
  });
  worker.on('failed', (job, error) => {
    if (job && !(error instanceof DelayedError)) o.say(`warning: worker ${o.name}: job of ${job.data.instance} failed: ${error.message}`);
  });
  const beat = async (): Promise<void> => {
    const record: WorkerHeartbeat = {
      name: o.name,
      host: hostname(),
      pid: process.pid,
      at: new Date().toISOString(),
      active,
      done,
      concurrency: o.concurrency,
    };
    try {
      // Kept past the worker's death for WORKER_RECORD_TTL_MS, so queue status can call it lost.
      await heartbeat.set(workerKey(o.queue, o.name), JSON.stringify(record), 'PX', WORKER_RECORD_TTL_MS);
      status.ready();
    } catch {
      // Said once by the queue's error listener; the next beat tries again.
    }
  };
  // Every request of this worker goes through one per-route limiter: a 429 slows its own route.
  const routes = new RouteLimiter();
  const unpace = o.client.transport.pace(routes);
  const observer = o.observer;
  const unthrottle = observer?.throttling?.(routes);
  const unobserve = observer
    ? o.client.transport.onExchange((e) => observer.exchange?.(e.method, new URL(e.url).pathname, e.status))
    : () => {};
  const unsubscribe = (): void => {
    unpace();
    unobserve();
    routes.close();
    unthrottle?.();
  };
  await heartbeat.connect();
  await beat();
  const beating = setInterval(() => void beat(), HEARTBEAT_MS);
  await worker.waitUntilReady();
  void worker.run();
  let closing: Promise<void> | undefined;
  return {
    name: o.name,
    close: (graceMs) =>
      (closing ??= (async () => {
        clearInterval(beating);
        unsubscribe();
        const closed = worker.close();
        const grace = setTimeout(() => handBack.abort(new GenpipeError('aborted', 'the worker is shutting down')), graceMs);
        try {
          await closed;
        } finally {
          clearTimeout(grace);
        }
        await heartbeat.del(workerKey(o.queue, o.name)).catch(() => {});
        heartbeat.disconnect();
        await queue.close();
      })()),
    disconnect: async () => {
      clearInterval(beating);
      unsubscribe();
      handBack.abort(new GenpipeError('aborted', 'Redis stopped answering'));
      heartbeat.disconnect();
      // Bounded, as the coordinator's (redis.ts DISCONNECT_MS).
      await within(Promise.all([worker.disconnect().catch(() => {}), queue.disconnect().catch(() => {})]), DISCONNECT_MS);
    },
  };
}

/** A default worker name: host and pid. */
export const defaultWorkerName = (): string => `${hostname()}-${process.pid}`;
