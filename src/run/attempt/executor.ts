/**
 * The executor seam: where an attempt's submit and follow happen. The instance driver keeps an
 * instance's whole life (journal, money, re-rolls, downloads) and hands only these two steps to
 * an executor:
 *
 *   local  (this file)             the adapter's submit, then the follow loop (follow.ts), here;
 *   redis  (fleet/queue-executor)  a BullMQ job per attempt; a fleet worker runs this very local
 *                                  executor on it, and the coordinator waits for its result.
 *
 * Both implement `Executor`, so the driver has no fleet branch, and the conformance suite runs
 * every scenario on both.
 */
import { IndeterminateSubmissionError } from '../../api/errors.js';
import type { AdapterContext, InstanceScript, ModelAdapter, Submission } from '../../models/adapter.js';
import { follow, type FollowEffects, type Followed } from '../polling/follow.js';

/** One attempt of an instance: its identity names a fleet job, so a re-enqueue of it is a no-op. */
export interface Attempt {
  runId: string;
  instance: string;
  /** Which attempt: `<retries>.<rerolls>`. */
  tag: string;
  model: string;
  adapter: ModelAdapter;
  script: InstanceScript;
}

export interface Executor {
  readonly name: 'local' | 'redis';
  /** Sends the attempt's submit with its key; resolves once the service answered it. */
  submit(attempt: Attempt, body: unknown, idempotencyKey: string | undefined, ctx: AdapterContext): Promise<Submission>;
  /** Follows a submission of the attempt (sent now or by an earlier process) to its final status. */
  follow(attempt: Attempt, submission: Submission, ctx: AdapterContext, fx: FollowEffects): Promise<Followed>;
  /**
   * Whether this executor still holds an attempt an earlier process journaled the intent of but
   * never saw answered, so that `reclaim` can learn its submit instead of the run calling it
   * unknown: a fleet job still in Redis, which a worker sent or will send, once. The local
   * executor holds nothing: a process that died mid-POST leaves an unknown.
   */
  holds(attempt: Attempt): Promise<boolean>;
  /**
   * The submission of a held attempt, sending nothing new: once its job has one. Throws an
   * IndeterminateSubmissionError when nothing can be learnt (the job is gone, or ended unknown),
   * and a GenpipeError when its submit was refused.
   */
  reclaim(attempt: Attempt, ctx: AdapterContext): Promise<Submission>;
}

/** This process submits and follows. */
export const localExecutor: Executor = {
  name: 'local',
  submit: (attempt, body, idempotencyKey, ctx) => attempt.adapter.submit(body, { idempotencyKey, script: attempt.script }, ctx),
  follow: (attempt, submission, ctx, fx) => follow(attempt.adapter, submission, attempt.script, ctx, fx),
  holds: () => Promise.resolve(false),
  reclaim: (attempt) => Promise.reject(unreclaimable(attempt, 'this process holds no earlier attempt')),
};

/** The error of an attempt whose submit cannot be learnt: it may or may not have reached the service. */
export function unreclaimable(attempt: Attempt, why: string): IndeterminateSubmissionError {
  return new IndeterminateSubmissionError({
    method: 'POST',
    path: `(${attempt.model}, an earlier submit)`,
    idempotencyKey: undefined,
    bodyHash: '',
    cause: new Error(why),
  });
}
