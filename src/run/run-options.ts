import type { ModelAdapter } from '../models/adapter.js';
/** The options of a run (see runPlan in runner.ts), with their defaults. */
import type { GenerationClient } from '../api/client.js';
import type { TurnPollOptions } from '../api/agent.js';
import type { OptionsCatalog } from '../api/wire.js';
import type { Plan } from '../plan/plan.js';
import type { RunListener } from './events.js';
import type { PollScheduleOptions } from './poll-schedule.js';
import type { ReuseIndex } from './reuse.js';
import type { WebhookReceiver } from './webhook-receiver.js';

export interface RunOptions {
  plan: Plan;
  client: GenerationClient;
  /** The run directory (created by createRunDir, or an existing one to resume). */
  runDir: string;
  runId: string;
  planHash: string;
  signal: AbortSignal;
  catalog?: OptionsCatalog | undefined;
  /** Instances in flight at once, over the whole run. Default: the manifest's, else 8. */
  concurrency?: number | undefined;
  /** Submits per second (token bucket). Default 20. */
  ratePerSecond?: number | undefined;
  /** US$; new submits stop before the estimate would go over it. Default: the manifest's. */
  budgetUsd?: number | undefined;
  /** Stop submitting at the first failure. Default: the manifest's on_failure. */
  failFast?: boolean | undefined;
  /** Resend submits whose fate is unknown (no key, no answer). Default false. */
  resubmitUnknown?: boolean | undefined;
  /** On resume, start a new attempt (new key) of the instances that ended so. Default none. */
  retry?: ReadonlySet<RetryStatus> | undefined;
  /**
   * Resume past corrupt journal lines that are not the torn tail, treating every instance such a
   * line could belong to as unknown. Default false: such a journal is refused (exit 2).
   */
  acceptCorrupt?: boolean | undefined;
  /**
   * The service the run used is gone with everything it knew (a run made on an embedded emulator,
   * resumed on a fresh one): what was in flight there is unknown, not something to follow.
   */
  serviceForgotten?: boolean | undefined;
  /** Earlier runs' completed results to reuse instead of generating (`--reuse`). */
  reuse?: ReuseIndex | undefined;
  /** On abort, cancel requests that are still queued. Default false. */
  cancelOnAbort?: boolean | undefined;
  /** Transient errors tolerated over the whole run before it stops, resumable. Default 200. */
  retryBudget?: number | undefined;
  /** Largest output file, in bytes. Default 256 MiB. */
  maxDownloadBytes?: number | undefined;
  poll?: Partial<PollScheduleOptions> | undefined;
  /**
   * Durations per model known before the run (poll-prior.ts reads them from this pipeline's
   * earlier runs); the first polls aim at them instead of backing off from cold.
   */
  pollPrior?: ReadonlyMap<string, readonly number[]> | undefined;
  agentPoll?: TurnPollOptions | undefined;
  onEvent?: RunListener | undefined;
  /** Track request models by webhook (`?hf_webhook=`), with polling as a slow fallback. */
  webhook?: WebhookReceiver | undefined;
  /**
   * Where submits and tracking go instead of this process (a fleet coordinator's queue, see
   * fleet/dispatch.ts): given a model and its own adapter, the adapter the run uses.
   */
  dispatch?: { adapterFor(model: string, inner: ModelAdapter | undefined): ModelAdapter | undefined } | undefined;
  random?: () => number;
  /** The run's submit-rate limiter. Default: a TokenBucket at `ratePerSecond`. Injected by tests. */
  limiter?: RateLimiter | undefined;
  /** How often the liveness watchdog looks, in ms; two looks without progress end a stuck run. Default 5,000. */
  watchdogMs?: number | undefined;
}

/**
 * The outcomes `genpipe resume --retry` can start over: an outcome of the run, or `rejected`, a
 * completed result the reviewer rejected (review.json), made again with a new seed.
 */
export type RetryStatus = 'failed' | 'canceled' | 'nsfw' | 'unknown' | 'rejected';
export const RETRY_STATUSES: readonly RetryStatus[] = ['failed', 'canceled', 'nsfw', 'unknown', 'rejected'];

/** What the runner needs of a rate limiter (TokenBucket is the real one). */
export interface RateLimiter {
  take(signal?: AbortSignal): Promise<void>;
  /** The service throttled (429): slow the whole run down. */
  slowDown(retryAfterMs?: number): void;
  /** True while the limiter has a timer pending that will serve its waiters. */
  readonly sleeping: boolean;
  /** Callers waiting for a token. */
  readonly waiting: number;
}
