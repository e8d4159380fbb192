/**
 * The executor seam: where an attempt's submit and follow happen. The instance driver keeps an
 * instance's whole life (journal, money, re-rolls, downloads) and hands only these steps to an
 * executor:
 *
 *   local  (this file)             the adapter's submit, then the follow loop (polling/follow.ts), here;
 *   redis  (fleet/queue-executor)  a BullMQ job per attempt; a fleet worker runs this very local
 *                                  executor on it, and the coordinator waits for its result.
 *
 * Both implement `Executor`, so the driver has no fleet branch, and the conformance suite runs
 * every scenario on both. A fact of the executor's own (a job Redis lost, a worker that died while
 * sending) is returned as the attempt's fate, never dressed as an HTTP error; an error the service
 * answered is thrown as the service's error, for classify() to decide.
 */
import type { AdapterContext, InstanceScript, ModelAdapter, Submission } from '../../models/adapter.js';
import { follow, type FollowEffects, type Followed } from '../polling/follow.js';
import type { AttemptRef } from './attempt-ref.js';
import type { FateOf } from './fate.js';

/** What an attempt runs on: its model, the model's adapter, and the replies a conversation sends. */
export interface AttemptWork {
  readonly model: string;
  readonly adapter: ModelAdapter;
  readonly script: InstanceScript;
}

/** A step's work for one attempt: its model, its adapter, and the replies its conversation sends (a new script each time). */
export const workOf = (step: { model: string; step: { replies?: InstanceScript['replies'] } }, adapter: ModelAdapter): AttemptWork => ({
  model: step.model,
  adapter,
  script: { replies: step.step.replies },
});

/**
 * What an executor can say of an attempt besides the service's answer: nobody can tell whether it
 * was sent, or (a fleet worker's keyless submit) an answer that was not the service's came back.
 */
export type ExecutorFate = FateOf<'unknown'> | FateOf<'protocol'>;

export interface Executor {
  readonly name: 'local' | 'redis';
  /** Sends the attempt's submit with its key; resolves once the service answered it. */
  submit(
    attempt: AttemptRef,
    work: AttemptWork,
    body: unknown,
    idempotencyKey: string | undefined,
    ctx: AdapterContext,
  ): Promise<Submission | ExecutorFate>;
  /** Follows a submission of the attempt (sent now or by an earlier process) to its final status. */
  follow(attempt: AttemptRef, work: AttemptWork, submission: Submission, ctx: AdapterContext, fx: FollowEffects): Promise<Followed>;
  /**
   * Whether this executor still holds an attempt an earlier process journaled the intent of but
   * never saw answered, so that `reclaim` can learn its submit instead of the run calling it
   * unknown: a fleet job still in Redis, which a worker sent or will send, once. The local
   * executor holds nothing: a process that died mid-POST leaves an unknown.
   */
  holds(attempt: AttemptRef, work: AttemptWork): Promise<boolean>;
  /**
   * The submission of a held attempt, sending nothing new: once its job has one. Unknown when
   * nothing can be learnt (the job is gone, or ended unknown); throws the service's error when its
   * submit was refused.
   */
  reclaim(attempt: AttemptRef, work: AttemptWork, ctx: AdapterContext): Promise<Submission | ExecutorFate>;
}

/** This process submits and follows. */
export const localExecutor: Executor = {
  name: 'local',
  submit: (_attempt, work, body, idempotencyKey, ctx) => work.adapter.submit(body, { idempotencyKey, script: work.script }, ctx),
  follow: (_attempt, work, submission, ctx, fx) => follow(work.adapter, submission, work.script, ctx, fx),
  holds: () => Promise.resolve(false),
  reclaim: (_attempt, work) => Promise.resolve(unreclaimable(work.model, 'this process holds no earlier attempt')),
};

/** The fate of an attempt whose submit cannot be learnt: it may or may not have reached the service. */
export function unreclaimable(model: string, why: string): FateOf<'unknown'> {
  return {
    kind: 'unknown',
    message: `The submission of ${model} may or may not have been accepted by the service (${why}); it was not resent, to avoid paying twice.`,
  };
}
