/**
 * The fleet's executor (run/attempt/executor.ts): the coordinator's instance driver keeps an instance's
 * whole life (journal, budget, re-rolls, downloads), and an attempt's submit and follow go through
 * the queue:
 *
 *   submit → enqueue a job (id from run, instance and attempt: a re-enqueue is a no-op) and wait
 *            for a worker's submission (job progress) or its result
 *   follow → wait for the job's result (final status and output URLs); the job is removed once
 *            read. A job that is gone (read before a coordinator crash, or lost by Redis) is
 *            followed here with the same follow loop the workers run (run/polling/follow.ts).
 *
 * Conversations (agent turns) stay with the coordinator: a session's turns are serialized, and a
 * turn's clarifying questions are answered from the manifest, which only the coordinator reads.
 */
import { Queue, QueueEvents, type Job } from 'bullmq';
import { GenpipeError } from '../api/errors.js';
import type { AdapterContext, Submission } from '../models/adapter.js';
import { attemptTag, type AttemptRef } from '../run/attempt/attempt-ref.js';
import { TRANSIENT } from '../run/attempt/classify.js';
import { localExecutor, unreclaimable, type AttemptWork, type Executor, type ExecutorFate } from '../run/attempt/executor.js';
import { follow, type FollowEffects, type Followed } from '../run/polling/follow.js';
import {
  INSTANCE_JOB,
  jobIdOf,
  submissionOf,
  submittedIn,
  type JobPolling,
  type InstanceJobData,
  type InstanceJobResult,
  withdrawnKey,
  WITHDRAWN_TTL_S,
} from './instance-job.js';
import { commandOptions, DISCONNECT_MS, redisCommands, reportConnection, type RedisTarget } from './redis.js';
import { within } from '../util/within.js';

/** How often jobs still awaited are looked at in Redis, besides the queue's events (a missed event, a Redis restart); GENPIPE_FLEET_SWEEP_MS: tests. */
const sweepMs = (): number => Number(process.env.GENPIPE_FLEET_SWEEP_MS) || 2_000;
/** How long jobs may wait with no worker on the queue before the run says so (GENPIPE_NO_WORKER_NOTICE_MS: tests). */
const noWorkerNoticeMs = (): number => Number(process.env.GENPIPE_NO_WORKER_NOTICE_MS) || 30_000;

interface Waiter {
  model: string;
  submitted: Deferred<Submission>;
  finished: Deferred<InstanceJobResult>;
  /** Resolved when a sweep finds the job gone from Redis before its result was read (Redis lost its data). */
  lost: Deferred<true>;
  /** Set once the job was added (or found): only then does a sweep call a missing job lost. */
  enqueued: boolean;
}

class Deferred<T> {
  readonly promise: Promise<T>;
  resolve!: (value: T) => void;
  done = false;
  value: T | undefined;
  constructor() {
    this.promise = new Promise<T>((resolve) => {
      this.resolve = (value) => {
        if (this.done) return;
        this.done = true;
        this.value = value;
        resolve(value);
      };
    });
  }
}

export interface QueueExecutorOptions {
  redis: RedisTarget;
  queue: string;
  runId: string;
  say: (line: string) => void;
  /** The manifest's polling settings, passed to the workers with each job. */
  poll?: JobPolling | undefined;
  /**
   * An earlier coordinator ran this run (a resume, a takeover): jobs of its attempts, and its
   * withdrawal marks, may be in Redis. False for a new run: job ids hash the run's id, so no job
   * or mark of it can exist yet, and a first submit neither reads the job before adding it nor
   * after (three round trips per instance fewer; events and the sweep still bring its news).
   */
  resumed: boolean;
}

export class QueueExecutor implements Executor {
  readonly name = 'redis';
  readonly #o: QueueExecutorOptions;
  readonly #queue: Queue<InstanceJobData, InstanceJobResult>;
  readonly #events: QueueEvents;
  readonly #waiters = new Map<string, Waiter>();
  readonly #sweep: NodeJS.Timeout;
  #sweeping = false;
  /** Since when some job has waited for a worker, none taken since. */
  #waitingSince: number | undefined;
  #noWorkerSaid = false;

  private constructor(o: QueueExecutorOptions, queue: Queue<InstanceJobData, InstanceJobResult>, events: QueueEvents) {
    this.#o = o;
    this.#queue = queue;
    this.#events = events;
    events.on('progress', ({ jobId, data }) => {
      const submission = submittedIn(data);
      if (submission) this.#waiters.get(jobId)?.submitted.resolve(submission);
    });
    events.on('completed', ({ jobId, returnvalue }) => {
      const result = (typeof returnvalue === 'string' ? JSON.parse(returnvalue) : returnvalue) as InstanceJobResult;
      this.#waiters.get(jobId)?.finished.resolve(result);
    });
    events.on('failed', ({ jobId, failedReason }) => {
      const waiter = this.#waiters.get(jobId);
      if (waiter) waiter.finished.resolve(workerFailure(waiter, failedReason));
    });
    this.#sweep = setInterval(() => void this.#lookAll(), sweepMs());
  }

  static async open(o: QueueExecutorOptions): Promise<QueueExecutor> {
    const queue = new Queue<InstanceJobData, InstanceJobResult>(o.queue, { connection: commandOptions(o.redis) });
    reportConnection(queue, o.redis, o.say, 'coordinator');
    // Only events from now on: what happened before (a resume) is read from the jobs themselves.
    const events = new QueueEvents(o.queue, { connection: o.redis.options, lastEventId: '$' });
    reportConnection(events, o.redis, o.say, 'coordinator');
    await queue.waitUntilReady();
    await events.waitUntilReady();
    return new QueueExecutor(o, queue, events);
  }

  submit(
    attempt: AttemptRef,
    work: AttemptWork,
    body: unknown,
    idempotencyKey: string | undefined,
    ctx: AdapterContext,
  ): Promise<Submission | ExecutorFate> {
    if (work.adapter.conversational) return localExecutor.submit(attempt, work, body, idempotencyKey, ctx);
    return this.#submit(attempt, work, body, idempotencyKey, ctx);
  }

  follow(attempt: AttemptRef, work: AttemptWork, submission: Submission, ctx: AdapterContext, fx: FollowEffects): Promise<Followed> {
    if (work.adapter.conversational) return localExecutor.follow(attempt, work, submission, ctx, fx);
    return this.#follow(attempt, work, submission, ctx, fx);
  }

  async holds(attempt: AttemptRef, work: AttemptWork): Promise<boolean> {
    if (work.adapter.conversational) return false;
    const job = await redisCommands(this.#o.redis, () => this.#queue.getJob(this.#jobId(attempt)));
    const ended = (job as Job<InstanceJobData, InstanceJobResult> | undefined)?.returnvalue?.kind;
    // A job that ended unknown (its worker died mid-submit) or withdrawn teaches nothing more.
    return job !== undefined && ended !== 'unknown' && ended !== 'withdrawn';
  }

  /**
   * The job an earlier coordinator queued for this attempt, followed to its submission: the one a
   * worker sent, or will send (a job never taken; one whose holder died mid-submit ends unknown,
   * worker.ts). Nothing new is queued, so nothing is paid twice.
   */
  async reclaim(attempt: AttemptRef, work: AttemptWork, ctx: AdapterContext): Promise<Submission | ExecutorFate> {
    const jobId = this.#jobId(attempt);
    const waiter = this.#waiter(jobId, work.model);
    const held = await redisCommands(this.#o.redis, async () => {
      // This coordinator follows it now: an earlier one's withdrawal no longer stands, so a worker
      // that takes a job nobody began to send sends it.
      await (await this.#queue.getBackend().client).del(withdrawnKey(this.#queue, jobId));
      return this.#look(jobId, waiter);
    });
    if (!held) {
      this.#waiters.delete(jobId);
      return unreclaimable(work.model, 'the job is gone from Redis');
    }
    waiter.enqueued = true;
    const first = await this.#first(jobId, waiter, ctx.signal);
    if ('submission' in first) return first.submission;
    if ('lost' in first) {
      this.#waiters.delete(jobId);
      return unreclaimable(work.model, 'the job is gone from Redis');
    }
    const result = first.result;
    if (result.kind === 'final' || result.kind === 'track_error') return result.submission;
    await this.#forget(jobId);
    if (result.kind === 'submit_error') throw refusalOf(result);
    return unreclaimable(work.model, result.kind === 'unknown' ? result.message : 'another coordinator withdrew the job');
  }

  async close(): Promise<void> {
    clearInterval(this.#sweep);
    await this.#events.close();
    await this.#queue.close();
  }

  /** Drops its connections at once: for a Redis that stopped answering, where a close would wait on it. */
  async disconnect(): Promise<void> {
    clearInterval(this.#sweep);
    // Bounded: after a Redis restart a connection still opening may never finish disconnecting
    // (soak seeds 60402, 80000: a fleet command that never ended); what is left is dropped with the process.
    await within(Promise.all([this.#events.disconnect().catch(() => {}), this.#queue.disconnect().catch(() => {})]), DISCONNECT_MS);
  }

  #jobId(attempt: AttemptRef): string {
    return jobIdOf(this.#o.runId, attempt.instance, attemptTag(attempt));
  }

  #waiter(jobId: string, model: string): Waiter {
    let waiter = this.#waiters.get(jobId);
    if (!waiter) {
      waiter = { model, submitted: new Deferred(), finished: new Deferred(), lost: new Deferred(), enqueued: false };
      this.#waiters.set(jobId, waiter);
    }
    return waiter;
  }

  async #submit(
    attempt: AttemptRef,
    work: AttemptWork,
    body: unknown,
    key: string | undefined,
    ctx: AdapterContext,
  ): Promise<Submission | ExecutorFate> {
    const { model } = work;
    const jobId = this.#jobId(attempt);
    const data: InstanceJobData = {
      v: 1,
      runId: this.#o.runId,
      instance: attempt.instance,
      model,
      body,
      idempotencyKey: key ?? null,
      retry: attempt.retry,
      reroll: attempt.reroll,
      ...(this.#o.poll ? { poll: this.#o.poll } : {}),
    };
    // Bounded: each round is a job Redis lost, and a keyless one ends the loop at once.
    for (let round = 0; ; round++) {
      const waiter = this.#waiter(jobId, model);
      // A Redis command that fails (its deadline, a lost connection) is a network error the run
      // knows how to treat (retried with the key, or left for a resume), never an internal one.
      // A new run's first submit of an attempt: nothing of it can be in Redis yet (`resumed`).
      const known = this.#o.resumed || round > 0;
      if (known && round === 0) await redisCommands(this.#o.redis, () => this.#dropStaleUnknown(jobId));
      // An existing job of the same attempt (a resumed coordinator) is kept as it is: no second job.
      // This coordinator sends it now: an earlier one's withdrawal of it no longer stands.
      await redisCommands(this.#o.redis, async () => {
        if (known) await (await this.#queue.getBackend().client).del(withdrawnKey(this.#queue, jobId));
        await this.#queue.add(INSTANCE_JOB, data, { jobId, attempts: 1, removeOnComplete: false, removeOnFail: false });
      });
      waiter.enqueued = true;
      if (known) await redisCommands(this.#o.redis, () => this.#look(jobId, waiter));
      const first = await this.#first(jobId, waiter, ctx.signal);
      if ('submission' in first) return first.submission;
      if ('lost' in first) {
        this.#waiters.delete(jobId);
        // Redis lost the job (a restart without its data). A keyed submit is safe to hand out
        // again: its key makes a second POST answer with the same request. A keyless one may have
        // been sent: unknown, never resent.
        if (key !== undefined && round < 100) continue;
        return unreclaimable(model, 'a fleet job Redis lost');
      }
      const result = first.result;
      if (result.kind === 'final' || result.kind === 'track_error') return result.submission;
      await this.#forget(jobId);
      // An earlier coordinator withdrew it and a worker sent nothing: handed out again, as new.
      if (result.kind === 'withdrawn' && round < 100) continue;
      if (result.kind === 'withdrawn') throw new GenpipeError('internal', 'The fleet job was withdrawn again and again; nothing was sent.');
      // The worker's own sentence: it saw the submit's fate stay unknown.
      if (result.kind === 'unknown')
        return result.protocol ? { kind: 'protocol', keyed: false, message: result.message } : { kind: 'unknown', message: result.message };
      throw refusalOf(result);
    }
  }

  async #follow(attempt: AttemptRef, work: AttemptWork, submission: Submission, ctx: AdapterContext, fx: FollowEffects): Promise<Followed> {
    const jobId = this.#jobId(attempt);
    let waiter = this.#waiters.get(jobId);
    if (!waiter) {
      // A resumed coordinator: the job may be in the queue, or already read and removed.
      const fresh = this.#waiter(jobId, work.model);
      waiter = fresh;
      if (await redisCommands(this.#o.redis, () => this.#look(jobId, fresh))) waiter.enqueued = true;
      else {
        // Gone: the submission is journaled, so it is followed here, as a worker would.
        this.#waiters.delete(jobId);
        return localExecutor.follow(attempt, work, submission, ctx, fx);
      }
    }
    const result = await unlessAborted(Promise.race([waiter.finished.promise, waiter.lost.promise]), fx.signal);
    await this.#forget(jobId);
    // Redis lost the job: the submission is journaled, so the service is asked from here.
    if (result === true) return follow(work.adapter, submission, work.script, ctx, fx);
    if (result.kind === 'final')
      return { submission: result.submission, result: result.result, durationMs: result.durationMs ?? fx.timer.complete(Date.now(), true) };
    if (result.kind === 'track_error') {
      // The worker gave up on a failure that may pass (its own budget, or it died): followed from here while the run's retry policy allows.
      if (TRANSIENT.has(result.code) && fx.mayRetry(0)) return follow(work.adapter, result.submission, work.script, ctx, fx);
      throw new GenpipeError(result.code, result.message);
    }
    throw new GenpipeError('internal', `A fleet worker answered a followed submission with ${result.kind}.`);
  }

  /**
   * What is heard of a job first: its submission, its result, or that Redis lost it. A stop
   * (`signal`) meanwhile withdraws it when no worker began to send it (#withdrawn).
   */
  #first(
    jobId: string,
    waiter: Waiter,
    signal: AbortSignal,
  ): Promise<{ submission: Submission } | { result: InstanceJobResult } | { lost: true }> {
    return unlessAborted(
      Promise.race([
        waiter.submitted.promise.then((submission) => ({ submission })),
        waiter.finished.promise.then((result) => ({ result })),
        waiter.lost.promise.then(() => ({ lost: true as const })),
      ]),
      signal,
    ).catch((error: unknown) => this.#withdrawn(jobId, error));
  }

  /**
   * A job of this attempt that already ended *unknown* (a worker died mid-submit) was an earlier
   * coordinator's verdict, never read before it stopped: the run reported the instance unknown,
   * and a submit now is the deliberate resend of `--resubmit-unknown`. The old job goes, so the
   * resend is a new job. (A job that knows its submission is kept: it is followed, not resent.)
   */
  async #dropStaleUnknown(jobId: string): Promise<void> {
    const job = (await this.#queue.getJob(jobId)) as Job<InstanceJobData, InstanceJobResult> | undefined;
    if (job?.finishedOn !== undefined && job.returnvalue?.kind === 'unknown') await job.remove();
  }

  /**
   * The run stopped (Ctrl-C, a lost lock) while this job waited in the queue: it is withdrawn, so no
   * worker started later pays for it. Removed while still waiting, it was never
   * sent: the error says so (neverSent), and the run journals it as not sent. A job a worker holds
   * already stays, and a resume follows it.
   */
  async #withdrawn(jobId: string, error: unknown): Promise<never> {
    let waiting = false;
    try {
      // The mark first: a worker that takes the job from now on sends nothing (worker.ts). Then a
      // job still waiting was never sent, and never will be. One a worker took, or finished, may
      // have been: a removal that succeeds says nothing (a finished job is removed as readily).
      const client = await this.#queue.getBackend().client;
      await client.set(withdrawnKey(this.#queue, jobId), '1', { EX: WITHDRAWN_TTL_S });
      const state = await this.#queue.getJobState(jobId);
      // Waiting is not enough: a job is waiting again after its holder died (its lock expired) or
      // handed it back, and that holder may have sent it. Only a job no worker ever began to send
      // (no intent, no submission) was never sent; any other is left for a resume to follow.
      const job = (await this.#queue.getJob(jobId)) as Job<InstanceJobData, InstanceJobResult> | undefined;
      waiting =
        (state === 'waiting' || state === 'prioritized' || state === 'delayed') &&
        job !== undefined &&
        job.data.intentAt === undefined &&
        submissionOf(job) === undefined;
      if (waiting) await this.#queue.remove(jobId).catch(() => 0);
    } catch {
      // Redis did not answer: nothing can be said of the job, which a resume follows.
    }
    if (waiting) {
      this.#waiters.delete(jobId);
      throw new GenpipeError('aborted', 'Interrupted: withdrawn from the queue before any worker took it.', {
        neverSent: true,
        cause: error,
      });
    }
    throw error;
  }

  /** Reads a job's state from Redis into its waiter; false when the job does not exist. */
  async #look(jobId: string, waiter: Waiter): Promise<boolean> {
    const job = (await this.#queue.getJob(jobId)) as Job<InstanceJobData, InstanceJobResult> | undefined;
    if (!job) return false;
    const submission = submissionOf(job);
    if (submission) waiter.submitted.resolve(submission);
    if (job.finishedOn !== undefined) {
      if (job.returnvalue !== null && job.returnvalue !== undefined) waiter.finished.resolve(job.returnvalue);
      else if (job.failedReason) waiter.finished.resolve(workerFailure(waiter, job.failedReason));
    }
    return true;
  }

  async #lookAll(): Promise<void> {
    if (this.#sweeping) return;
    this.#sweeping = true;
    try {
      let waiting = false;
      for (const [jobId, waiter] of this.#waiters) {
        if (waiter.finished.done || !waiter.enqueued) continue;
        if (!(await this.#look(jobId, waiter))) waiter.lost.resolve(true);
        if (!waiter.submitted.done) waiting = true;
      }
      await this.#noticeNoWorker(waiting);
    } catch {
      // Redis is away: said once by the connection's listener; the next sweep tries again.
    } finally {
      this.#sweeping = false;
    }
  }

  /**
   * Jobs that no worker has taken for NO_WORKER_NOTICE_MS while the queue has no worker: said once,
   * with the command that starts one, instead of a progress line that never moves.
   */
  async #noticeNoWorker(waiting: boolean): Promise<void> {
    if (!waiting) {
      this.#waitingSince = undefined;
      return;
    }
    this.#waitingSince ??= Date.now();
    if (this.#noWorkerSaid || Date.now() - this.#waitingSince < noWorkerNoticeMs()) return;
    if ((await this.#queue.getWorkersCount()) > 0) return;
    this.#noWorkerSaid = true;
    this.#o.say(
      `No worker has taken this run's jobs for ${Math.round(noWorkerNoticeMs() / 1000)} s, and none is on queue ${this.#o.queue}: start one with \`genpipe worker --redis ${this.#o.redis.shown} --queue ${this.#o.queue}\` (or run without --no-local-worker). The run waits for it; Ctrl-C stops it, resumable.`,
    );
  }

  /** The result is read: the job goes, so Redis holds only what is in flight. */
  async #forget(jobId: string): Promise<void> {
    this.#waiters.delete(jobId);
    await this.#queue.remove(jobId).catch(() => 0);
  }
}

/** A worker's refused submit, as the error the run's driver handles as it would its own. */
function refusalOf(result: Extract<InstanceJobResult, { kind: 'submit_error' }>): GenpipeError {
  return new GenpipeError(result.code, result.message, {
    neverSent: result.neverSent,
    status: result.status,
    retryAfterMs: result.retryAfterMs,
  });
}

function workerFailure(waiter: Waiter, reason: string): InstanceJobResult {
  const message = `a fleet worker failed on it: ${reason}`;
  const submission = waiter.submitted.value;
  return submission
    ? { kind: 'track_error', submission, code: 'server_error', message }
    : { kind: 'submit_error', code: 'server_error', message, neverSent: false };
}

/** `promise`, or a rejection once `signal` aborts; the listener goes either way (no leak per instance). */
function unlessAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(new GenpipeError('aborted', 'Interrupted.', { cause: signal.reason }));
  return new Promise<T>((resolve, reject) => {
    const fail = (): void => reject(new GenpipeError('aborted', 'Interrupted.', { cause: signal.reason }));
    signal.addEventListener('abort', fail, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', fail);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', fail);
        reject(error instanceof Error ? error : new Error(String(error)));
      },
    );
  });
}
