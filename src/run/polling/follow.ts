/**
 * The one follow loop: looks at a submission until it is final, the same code wherever it runs (a
 * local run's executor, a fleet worker, a fleet coordinator following a submission whose job Redis
 * lost). Between looks it waits on the poll schedule (poll-schedule.ts), on the webhook delivery
 * when there is a receiver (wait-for-news.ts), or on the model's own pace (agent turns). A look that
 * fails is retried when classify() says so (attempt/classify.ts: a failure that may pass, within
 * the look policy's tries) and the caller's retry budget allows it; any other failure, and the
 * abort, are thrown to the caller, which decides what the attempt comes to.
 */
import type { TurnPollOptions } from '../../api/agent.js';
import { sleep } from '../../api/sleep.js';
import type { AdapterContext, InstanceScript, ModelAdapter, Submission, TrackResult } from '../../models/adapter.js';
import type { PollTimer } from './poll-schedule.js';
import { deliveryArrived, waitForNews } from './wait-for-news.js';
import type { WebhookReceiver } from './webhook-receiver.js';

import { classify } from '../attempt/classify.js';

export type FinalTrack = Extract<TrackResult, { done: true }>;

/** What a follow needs of whoever runs it. */
export interface FollowEffects {
  signal: AbortSignal;
  /** The submission's poll schedule (PollScheduler.start). */
  timer: PollTimer;
  /** Webhook deliveries for requests this process submitted, when it uses webhooks. */
  webhook?: WebhookReceiver | undefined;
  /** An agent's pace (tests make it fast). */
  turnPoll?: TurnPollOptions | undefined;
  random?: (() => number) | undefined;
  /**
   * A look failed for the `failures`-th time in a row, in a way classify() would retry: true to
   * look again after its backoff (a local run draws it from the run's retry budget).
   */
  mayRetry(failures: number): boolean;
  /** A look was answered (the run's retry budget earns one back). */
  answered?(): void;
  /** The submission moved on (an agent reply was sent): journaled by a local run. */
  moved?(next: Submission): Promise<void>;
  /** Wraps each wait and look, for the run's watchdog. */
  op?<T>(work: () => Promise<T>): Promise<T>;
}

export interface Followed {
  /** The submission the final status belongs to (an agent turn may have moved on). */
  submission: Submission;
  result: FinalTrack;
  /** The poll schedule's duration of it: exact when a webhook told the end as it happened. */
  durationMs: number;
}

/** Follows `first` to its final status; throws what the caller must decide (aborted, a permanent error, a retry refused). */
export async function follow(
  adapter: ModelAdapter,
  first: Submission,
  script: InstanceScript,
  ctx: AdapterContext,
  fx: FollowEffects,
): Promise<Followed> {
  const op = fx.op ?? (<T>(work: () => Promise<T>): Promise<T> => work());
  let submission = first;
  for (let paced = 0, failures = 0, looks = 0; ; looks++) {
    const delay = adapter.lookDelay ? adapter.lookDelay(paced++, fx.turnPoll) : fx.timer.next(Date.now());
    const waitingOn = submission;
    const deliverySpent = looks > 0 && deliveryArrived(fx.webhook, submission);
    await op(() => waitForNews(fx.webhook, waitingOn, delay, deliverySpent, fx.signal));
    let result: TrackResult;
    try {
      result = await op(() => adapter.track(waitingOn, script, ctx));
      fx.answered?.();
    } catch (error) {
      const decision = classify('look', error, { tries: failures, random: fx.random });
      if (decision.kind !== 'retry' || !fx.mayRetry(failures)) throw error;
      failures++;
      await op(() => sleep(decision.delayMs, fx.signal));
      continue;
    }
    failures = 0;
    if (!result.done) {
      if (result.next) {
        submission = result.next;
        paced = 0;
        await fx.moved?.(submission);
      }
      continue;
    }
    return { submission, result, durationMs: fx.timer.complete(Date.now(), deliveryArrived(fx.webhook, submission)) };
  }
}
