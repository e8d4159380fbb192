/** The options of a run (see runPlan in runner.ts), with their defaults. */
import type { Adoption } from './attempt/adopt.js';
import type { GenerationClient } from '../api/client.js';
import type { TurnPollOptions } from '../api/agent.js';
import type { OptionsCatalog } from '../api/wire.js';
import type { Plan } from '../plan/plan.js';
import type { RunListener } from './events.js';
import type { RunObserver } from './observer.js';
import type { Executor } from './attempt/executor.js';
import type { PollScheduleOptions, SeenDuration } from './polling/poll-schedule.js';
import type { ReuseIndex } from './attempt/reuse.js';
import type { WebhookReceiver } from './polling/webhook-receiver.js';
import type { JournalRecordOf, RecordedOptions } from './journal/journal-records.js';
import type { InstanceState, RunState } from './journal/run-state.js';
import type { ImageSize } from '../util/image-size.js';
import { formatUsd } from '../util/format-usd.js';

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
  /**
   * US$ over the run's whole life (every resume and retry): new submits stop before what is
   * committed would go over it. Default: what the run recorded at its last start, else the manifest's.
   */
  budgetUsd?: number | undefined;
  /** Stop submitting at the first failure. Default: the manifest's on_failure. */
  failFast?: boolean | undefined;
  /** Resend submits whose fate is unknown (no key, no answer). Default false. */
  resubmitUnknown?: boolean | undefined;
  /**
   * Requests the service took whose ids the journal could not record (`resume --adopt`): checked
   * before anything is written (exit 2), journaled as adopted, then followed, never sent again.
   */
  adopt?: readonly Adoption[] | undefined;
  /** On resume, start a new attempt (new key) of the instances that ended so. Default: the run's recorded round. */
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
  /**
   * Reuse earlier runs' completed results instead of generating (`--reuse`): true, or an index
   * already built. Default: what the run recorded (a resume of a `--reuse` run reuses too).
   */
  reuse?: boolean | ReuseIndex | undefined;
  /** `--confirm-over`, recorded with the run. */
  confirmOverUsd?: number | undefined;
  /**
   * Where attempts are submitted and followed (executor.ts): this process (default) or a fleet's
   * queue (fleet/queue-executor.ts). Its name is recorded with the run.
   */
  executor?: Executor | undefined;
  /** Told of each request's answer, each journal sync and the run's throttling, for metrics (observer.ts). */
  observer?: RunObserver | undefined;
  /** On abort, cancel requests that are still queued. Default false. */
  cancelOnAbort?: boolean | undefined;
  /** Transient errors tolerated over the whole run before it stops, resumable. Default: recorded, else 200. */
  retryBudget?: number | undefined;
  /** Largest output file, in bytes. Default 256 MiB. */
  maxDownloadBytes?: number | undefined;
  poll?: Partial<PollScheduleOptions> | undefined;
  /**
   * Durations per model known before the run, each as the interval its polls saw it end in
   * (poll-prior.ts reads them from this pipeline's earlier runs); the first polls aim at them
   * instead of backing off from cold.
   */
  pollPrior?: ReadonlyMap<string, readonly SeenDuration[]> | undefined;
  agentPoll?: TurnPollOptions | undefined;
  onEvent?: RunListener | undefined;
  /**
   * The run's review decisions, read when needed (review.json, passed in as data: run/ knows no
   * review page): the approved instances (`for_each ... only: approved`) and the rejected ones with
   * the output each decision judged (`--retry rejected`). Default: none.
   */
  review?: ReviewDecisions | undefined;
  /**
   * The run's lock as a fence (lock.ts PipelineLock): `check()` is asked right before each spending
   * request, and once it fails or `signal` aborts the run writes nothing more to its directory: a
   * displaced holder stops before the new one sends anything.
   */
  fence?: { check(): Promise<boolean>; readonly signal: AbortSignal } | undefined;
  /** Views kept up to date while the run goes (the gallery): told of the state, finished instances and files. */
  view?: ((run: ViewedRun) => RunView) | undefined;
  /** Track request models by webhook (`?hf_webhook=`), with polling as a slow fallback. */
  webhook?: WebhookReceiver | undefined;
  /**
   * Where steps' outputs go besides the run directory (storage sinks, sink/run-sinks.ts RunSinks),
   * already preflighted: an instance is finished once its files are downloaded and uploaded.
   */
  sinks?: OutputSinks | undefined;
  random?: () => number;
  /** The run's submit-rate limiter. Default: a TokenBucket at `ratePerSecond`. Injected by tests. */
  limiter?: RateLimiter | undefined;
  /** How often the liveness watchdog looks, in ms; two looks without progress end a stuck run. Default 5,000. */
  watchdogMs?: number | undefined;
}

/** A run's storage sinks as the driver uses them (sink/run-sinks.ts implements it). */
export interface OutputSinks {
  forStep(stepId: string): StepOutputSink | undefined;
}

export interface StepOutputSink {
  /**
   * Uploads the instance's downloaded files not yet in the sink with these bytes, journaling a
   * `sink_uploaded` record for each; `failed`: the first that could not be uploaded (it stays
   * pending on disk; `transient` false when the store refused that file alone, one changed since
   * its download, rather than failing itself). Throws on an abort.
   */
  uploadPending(
    runDir: string,
    instance: string,
    entry: Pick<InstanceState, 'downloads' | 'sinkUploads'>,
    options: { consumeRetry(): boolean; creditRetry?(): void; signal?: AbortSignal | undefined; checkExisting?: boolean | undefined },
    journal: (
      record: JournalRecordOf<
        'sink_uploaded' | 'sink_unverified' | 'sink_conflict' | 'sink_overwrite' | 'sink_multipart' | 'sink_part' | 'sink_multipart_aborted'
      >,
    ) => Promise<void>,
  ): Promise<{
    uploaded: number;
    bytes: number;
    failed: (Error & { transient?: boolean }) | undefined;
    /**
     * Outputs another object at their key kept out of the sink, nothing overwritten (journaled
     * `sink_conflict`): `failed` ones make the instance "completed, upload conflict" (exit 1).
     */
    conflicts: readonly { key: string; output: number; action: 'failed' | 'skipped' }[];
    /** Keys uploaded whose bytes in the store could not be checked (journaled `sink_unverified`). */
    unverified: readonly string[];
  }>;
  /** `s3://BUCKET/KEY` of an object key of this sink (a conflict's, told with its instance). */
  uriOfKey(key: string): string;
  /** The public URL of an uploaded file (outputs.csv sink_url), when the sink has one. */
  url(runRelativePath: string): string | undefined;
  /** The store it uploads to, shared by the steps with the same one: a store that keeps failing is given up on, not the others. */
  readonly store: object;
}

/**
 * The outcomes `genpipe resume --retry` can start over: an outcome of the run, or `rejected`, a
 * completed result the reviewer rejected (review.json), made again with a new seed.
 */
export type RetryStatus = 'failed' | 'canceled' | 'nsfw' | 'unknown' | 'rejected';
export const RETRY_STATUSES: readonly RetryStatus[] = ['failed', 'canceled', 'nsfw', 'unknown', 'rejected'];

export interface ReviewDecisions {
  approved(): Promise<ReadonlySet<string>>;
  /** Rejected instance -> the output the decision judged (undefined: not recorded, any output). */
  rejected(): Promise<ReadonlyMap<string, string | undefined>>;
}

/** What a view of a running run sees. */
export interface ViewedRun {
  /** The live state: instances still in it are not finished. */
  readonly state: RunState;
  /** A view that fails says so here; the run goes on. */
  failed(message: string): void;
}

/** A view of a running run (gallery.html): never holds the run up. */
export interface RunView {
  /** An instance finished, before its state is forgotten. */
  finished(id: string, entry: InstanceState): void;
  /** A file was downloaded (path relative to the run directory), with an image's size when known. */
  downloaded(path: string, imageSize: ImageSize | undefined): void;
  /** Now and then while the run goes. */
  update(): void;
  /** Once, when the run ends. */
  finish(): Promise<void>;
}

/** What the runner needs of a rate limiter (TokenBucket is the real one). */
export interface RateLimiter {
  take(signal?: AbortSignal): Promise<void>;
  /** True while the limiter has a timer pending that will serve its waiters. */
  readonly sleeping: boolean;
  /** Callers waiting for a token. */
  readonly waiting: number;
}

/** Instances in flight at once when neither the caller nor the manifest says. */
export const DEFAULT_CONCURRENCY = 8;
/** Submits per second when the caller does not say. */
export const DEFAULT_RATE_PER_SECOND = 20;
/** Transient errors tolerated over a run when neither the caller nor the run's record says. */
export const DEFAULT_RETRY_BUDGET = 200;
/** The largest output file, in bytes, when the caller does not say. */
export const DEFAULT_MAX_DOWNLOAD_BYTES = 256 * 1024 * 1024;
/** How often the liveness watchdog looks, in ms, when the caller does not say. */
export const DEFAULT_WATCHDOG_MS = 5_000;

/**
 * What one start of a run runs with, every default applied: resolved once (runSettings), then read
 * by the runner's parts and told to the views (the run_started event carries the budget), so no
 * part applies a default of its own and no view guesses one.
 */
export interface RunSettings {
  /** The budget in US$ over the run's life: given, else recorded at its last start, else the manifest's. */
  budgetUsd: number | undefined;
  concurrency: number;
  ratePerSecond: number;
  retryBudget: number;
  maxDownloadBytes: number;
  watchdogMs: number;
}

/** How many instances a run keeps in flight: the caller's figure, else the manifest's, else the default. */
export const concurrencyOf = (given: number | undefined, plan: Plan): number =>
  given ?? plan.loaded.manifest.defaults?.concurrency ?? DEFAULT_CONCURRENCY;

/** The settings of this start, from the options given and those the run recorded (resolveRecordedOptions). */
export function runSettings(options: RunOptions, recorded: RecordedOptions): RunSettings {
  return {
    budgetUsd: recorded.budgetUsd ?? options.plan.loaded.manifest.defaults?.budget_usd,
    concurrency: concurrencyOf(options.concurrency, options.plan),
    ratePerSecond: options.ratePerSecond ?? DEFAULT_RATE_PER_SECOND,
    retryBudget: recorded.retryBudget ?? DEFAULT_RETRY_BUDGET,
    maxDownloadBytes: options.maxDownloadBytes ?? DEFAULT_MAX_DOWNLOAD_BYTES,
    watchdogMs: options.watchdogMs ?? DEFAULT_WATCHDOG_MS,
  };
}

/** The options a caller gives that the run records (RecordedOptions); undefined: not given, inherit. */
export interface GivenRecordedOptions {
  budgetUsd?: number | undefined;
  reuse?: boolean | undefined;
  retryBudget?: number | undefined;
  confirmOverUsd?: number | undefined;
  retry?: ReadonlySet<RetryStatus> | undefined;
  executor?: string | undefined;
}

/**
 * What a start of the run runs with: what it was given, else what its last start recorded, else the
 * defaults; and, for a resume, the lines that say what a flag changed ("budget: US$1.00 → US$5.00").
 * A `--retry` given starts a new round, so an instance is retried at most once per `--retry` given,
 * however often the run is resumed after it.
 */
export function resolveRecordedOptions(
  given: GivenRecordedOptions,
  recorded: RecordedOptions | undefined,
): { options: RecordedOptions; changes: string[] } {
  const options: RecordedOptions = {
    budgetUsd: given.budgetUsd ?? recorded?.budgetUsd ?? null,
    reuse: given.reuse === true || recorded?.reuse === true,
    retryBudget: given.retryBudget ?? recorded?.retryBudget ?? null,
    confirmOverUsd: given.confirmOverUsd ?? recorded?.confirmOverUsd ?? null,
    retry: given.retry ? [...given.retry] : (recorded?.retry ?? []),
    retryRound: given.retry ? (recorded?.retryRound ?? 0) + 1 : (recorded?.retryRound ?? 0),
    executor: given.executor ?? recorded?.executor ?? 'local',
  };
  const changes: string[] = [];
  if (recorded) {
    const usd = (v: number | null): string => (v === null ? 'none' : formatUsd(v));
    const whole = (v: number | null): string => (v === null ? 'default' : String(v));
    if (options.budgetUsd !== recorded.budgetUsd) changes.push(`budget: ${usd(recorded.budgetUsd)} → ${usd(options.budgetUsd)}`);
    if (options.reuse !== recorded.reuse) changes.push('reuse: off → on');
    if (options.retryBudget !== recorded.retryBudget)
      changes.push(`retry budget: ${whole(recorded.retryBudget)} → ${whole(options.retryBudget)}`);
    if (options.confirmOverUsd !== recorded.confirmOverUsd)
      changes.push(`confirm over: ${usd(recorded.confirmOverUsd)} → ${usd(options.confirmOverUsd)}`);
    if (given.retry) changes.push(`retry: ${given.retry.size === 0 ? 'none' : [...given.retry].join(', ')} (round ${options.retryRound})`);
    if (options.executor !== recorded.executor) changes.push(`executor: ${recorded.executor} → ${options.executor}`);
  }
  return { options, changes };
}
