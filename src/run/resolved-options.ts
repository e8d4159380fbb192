/**
 * The options one start of a run runs with, resolved once, every field defaulted: what the caller
 * gave (the session passes the flags through GivenRunOptions), else what the run recorded at its
 * last start, else the manifest's, else genpipe's default; and what the run is wired to (its
 * client, executor, sinks, review decisions...), each optional part defaulted here too. The runner
 * resolves them as soon as the journal is read (the recorded options are in it), and its parts and
 * views read them here: no part applies a default of its own and no view guesses one.
 */
import type { TurnPollOptions } from '../api/agent.js';
import type { GenerationClient } from '../api/client.js';
import type { OptionsCatalog } from '../api/wire.js';
import type { Plan } from '../plan/plan.js';
import { DEFAULT_CONFIRM_OVER_USD } from '../plan/guards.js';
import type { RecordedOptions } from './journal/journal-records.js';
import type { GivenRunOptions, OutputSinks, RateLimiter, RetryStatus, ReviewDecisions, RunOptions } from './run-options.js';
import type { RunListener } from './events.js';
import { localExecutor, type Executor } from './attempt/executor.js';
import { watchedBucket } from './limits/token-bucket.js';
import type { PollScheduleOptions, SeenDuration } from './polling/poll-schedule.js';
import type { WebhookReceiver } from './polling/webhook-receiver.js';
import { formatUsd } from '../util/format-usd.js';

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

export interface ResolvedRunOptions extends RunWiring {
  /**
   * What this start's run_started record keeps and the next start inherits: the flags given over
   * the run's life, null where none was (journal-records.ts RecordedOptions). Made here only.
   */
  readonly recorded: RecordedOptions;
  /** The budget in US$ over the run's life: given, else recorded at its last start, else the manifest's. */
  readonly budgetUsd: number | undefined;
  /** The spend a run without a budget asks about before it starts (`--confirm-over`), in US$. */
  readonly confirmOverUsd: number;
  readonly concurrency: number;
  readonly ratePerSecond: number;
  /** Transient errors tolerated over the whole run before it stops, resumable. */
  readonly retryBudget: number;
  readonly maxDownloadBytes: number;
  /** How often the liveness watchdog looks, in ms. */
  readonly watchdogMs: number;
  /** Earlier runs' completed results are reused (given now or at an earlier start). */
  readonly reuse: boolean;
  /** The `--retry` selection in force (given, or inherited with its round). */
  readonly retry: ReadonlySet<RetryStatus>;
  /** The steps whose first failure stops the run: every step with `--fail-fast`, else each step's on_failure (or the manifest's). */
  readonly failFastSteps: ReadonlySet<string>;
  readonly resubmitUnknown: boolean;
  readonly cancelOnAbort: boolean;
  /** The service the run used is gone with everything it knew: what was in flight there is unknown. */
  readonly serviceForgotten: boolean;
  /** This very start was given `--retry rejected` (not only inheriting it from the run's last start): rejected results not in the plan are said. */
  readonly remakeRejected: boolean;
}

/** What a run is wired to (RunOptions besides its flags), each optional part defaulted. */
export interface RunWiring {
  readonly plan: Plan;
  readonly runId: string;
  readonly runDir: string;
  /** Ctrl-C, or the caller's stop. */
  readonly signal: AbortSignal;
  readonly client: GenerationClient;
  /** The options catalog the plan's entries are built with, when the run has one. */
  readonly catalog: OptionsCatalog | undefined;
  /** Where attempts are submitted and followed: the caller's, else this process (localExecutor). */
  readonly executor: Executor;
  /** The run's randomness (jitter, seeds): the caller's, else Math.random. */
  readonly random: () => number;
  /** The submit-rate limiter: the caller's, else a TokenBucket at ratePerSecond the watchdog sees. */
  readonly limiter: RateLimiter;
  /** The poll schedule's settings: the manifest's polling under the caller's. */
  readonly pollSchedule: Partial<PollScheduleOptions>;
  /** Durations per model known before the run (poll-prior.ts); none when not given. */
  readonly pollPrior: ReadonlyMap<string, readonly SeenDuration[]>;
  readonly agentPoll: TurnPollOptions | undefined;
  /** Where requests are tracked by webhook, when they are. */
  readonly webhook: WebhookReceiver | undefined;
  /** The run's review decisions: the caller's, else none approved and none rejected. */
  readonly review: ReviewDecisions;
  /** The storage sinks, when the run has any (outputs.csv then has their columns). */
  readonly sinks: OutputSinks | undefined;
  /** The run's lock as a fence, when it has one (run-options.ts). */
  readonly fence: RunOptions['fence'];
  /** Told every event of the run: the caller's, else nobody. */
  readonly onEvent: RunListener;
}

/** A run without review decisions: nothing approved, nothing rejected. */
const NO_REVIEW: ReviewDecisions = {
  approved: () => Promise.resolve(new Set<string>()),
  rejected: () => Promise.resolve(new Map<string, string | undefined>()),
};

const NO_PRIOR: ReadonlyMap<string, readonly SeenDuration[]> = new Map();

/** How many instances a run keeps in flight: the caller's figure, else the manifest's, else the default. */
export const concurrencyOf = (given: number | undefined, plan: Plan): number =>
  given ?? plan.loaded.manifest.defaults?.concurrency ?? DEFAULT_CONCURRENCY;

/**
 * Resolves one start's options from the given ones and those the run recorded (undefined: a new
 * run), and, for a resume, the lines that say what a flag changed ("budget: US$1.00 → US$5.00").
 * A `--retry` given starts a new round, so an instance is retried at most once per `--retry` given,
 * however often the run is resumed after it.
 */
export function resolveRunOptions(
  given: RunOptions,
  previous: RecordedOptions | undefined,
): { options: ResolvedRunOptions; changes: string[] } {
  const recorded = recordedOptions(given, previous);
  const { plan } = given;
  const defaults = plan.loaded.manifest.defaults;
  const failFastSteps = plan.steps.filter((s) => given.failFast ?? (s.step.on_failure ?? defaults?.on_failure) === 'stop');
  const ratePerSecond = given.ratePerSecond ?? DEFAULT_RATE_PER_SECOND;
  const options: ResolvedRunOptions = {
    recorded,
    budgetUsd: recorded.budgetUsd ?? defaults?.budget_usd,
    confirmOverUsd: recorded.confirmOverUsd ?? DEFAULT_CONFIRM_OVER_USD,
    concurrency: concurrencyOf(given.concurrency, plan),
    ratePerSecond,
    retryBudget: recorded.retryBudget ?? DEFAULT_RETRY_BUDGET,
    maxDownloadBytes: given.maxDownloadBytes ?? DEFAULT_MAX_DOWNLOAD_BYTES,
    watchdogMs: given.watchdogMs ?? DEFAULT_WATCHDOG_MS,
    reuse: recorded.reuse,
    retry: new Set(recorded.retry),
    failFastSteps: new Set(failFastSteps.map((s) => s.id)),
    resubmitUnknown: given.resubmitUnknown === true,
    cancelOnAbort: given.cancelOnAbort === true,
    serviceForgotten: given.serviceForgotten === true,
    remakeRejected: given.retry?.has('rejected') === true,
    ...wiringOf(given, ratePerSecond),
  };
  return { options, changes: previous ? changedLines(given, recorded, previous) : [] };
}

/** What the run is wired to, each optional part defaulted. */
function wiringOf(given: RunOptions, ratePerSecond: number): RunWiring {
  const polling = given.plan.loaded.manifest.defaults?.polling;
  return {
    plan: given.plan,
    runId: given.runId,
    runDir: given.runDir,
    signal: given.signal,
    client: given.client,
    catalog: given.catalog,
    executor: given.executor ?? localExecutor,
    random: given.random ?? Math.random,
    limiter: given.limiter ?? watchedBucket(ratePerSecond),
    pollSchedule: {
      ...(polling?.initial_ms ? { baseMs: polling.initial_ms } : {}),
      ...(polling?.max_ms ? { capMs: polling.max_ms } : {}),
      ...(polling?.min_ms ? { floorMs: polling.min_ms } : {}),
      ...given.poll,
    },
    pollPrior: given.pollPrior ?? NO_PRIOR,
    agentPoll: given.agentPoll,
    webhook: given.webhook,
    review: given.review ?? NO_REVIEW,
    sinks: given.sinks,
    fence: given.fence,
    onEvent: given.onEvent ?? (() => {}),
  };
}

/** What this start records: given, else what the last start recorded, else none (null) or the default. */
function recordedOptions(given: RunOptions, previous: RecordedOptions | undefined): RecordedOptions {
  return {
    budgetUsd: given.budgetUsd ?? previous?.budgetUsd ?? null,
    reuse: given.reuse === true || previous?.reuse === true,
    retryBudget: given.retryBudget ?? previous?.retryBudget ?? null,
    confirmOverUsd: given.confirmOverUsd ?? previous?.confirmOverUsd ?? null,
    retry: given.retry ? [...given.retry] : (previous?.retry ?? []),
    retryRound: given.retry ? (previous?.retryRound ?? 0) + 1 : (previous?.retryRound ?? 0),
    executor: given.executor?.name ?? previous?.executor ?? 'local',
  };
}

/** The lines a resume says for the recorded options a flag changed. */
function changedLines(given: GivenRunOptions, now: RecordedOptions, was: RecordedOptions): string[] {
  const usd = (v: number | null): string => (v === null ? 'none' : formatUsd(v));
  const whole = (v: number | null): string => (v === null ? 'default' : String(v));
  const changes: string[] = [];
  if (now.budgetUsd !== was.budgetUsd) changes.push(`budget: ${usd(was.budgetUsd)} → ${usd(now.budgetUsd)}`);
  if (now.reuse !== was.reuse) changes.push('reuse: off → on');
  if (now.retryBudget !== was.retryBudget) changes.push(`retry budget: ${whole(was.retryBudget)} → ${whole(now.retryBudget)}`);
  if (now.confirmOverUsd !== was.confirmOverUsd) changes.push(`confirm over: ${usd(was.confirmOverUsd)} → ${usd(now.confirmOverUsd)}`);
  if (given.retry) changes.push(`retry: ${given.retry.size === 0 ? 'none' : [...given.retry].join(', ')} (round ${now.retryRound})`);
  if (now.executor !== was.executor) changes.push(`executor: ${was.executor} → ${now.executor}`);
  return changes;
}
