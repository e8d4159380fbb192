/**
 * An attempt: one send of one instance. An instance may be sent more than once over its run's
 * life (a `--retry`, an nsfw re-roll, a rejected result made again), and each send is an attempt,
 * named by how many retries and re-rolls came before it. This file is the one place that names an
 * attempt: its tag (a fleet job's identity) and its Idempotency-Key come from here.
 */
import { runIdempotencyKey } from '../../plan/instance.js';
import type { InstanceState } from '../journal/run-state.js';

export interface AttemptRef {
  readonly runId: string;
  readonly instance: string;
  /** `--retry` attempts before this one: part of the Idempotency-Key, so each has its own. */
  readonly retry: number;
  /** Re-rolls before this one: a re-roll sends another body (its seed), hence another key already. */
  readonly reroll: number;
}

/** The instance's attempt now, as its journaled state counts retries and re-rolls. */
export function attemptOf(runId: string, instance: string, entry: Pick<InstanceState, 'retries' | 'rerolls'> | undefined): AttemptRef {
  return { runId, instance, retry: entry?.retries ?? 0, reroll: entry?.rerolls ?? 0 };
}

/** `<retry>.<reroll>`: names the attempt among the instance's, so a fleet job of it is enqueued once. */
export const attemptTag = (attempt: AttemptRef): string => `${attempt.retry}.${attempt.reroll}`;

/**
 * The Idempotency-Key the attempt sends: the plan's key bound to the run and the retry (undefined
 * for a model without keys). Re-rolls change the body, so the plan key already differs for them.
 */
export const attemptKey = (attempt: AttemptRef, planKey: string | undefined): string | undefined =>
  planKey === undefined ? undefined : runIdempotencyKey(planKey, attempt.runId, attempt.retry);
