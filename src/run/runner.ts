/**
 * The runner: walks the plan's DAG under limits, submits through per-model adapters, tracks,
 * downloads, and journals every step so that a crash or Ctrl-C never costs a second payment or a
 * paid result. One instance's life:
 *
 *   journal intent (synced) → submit → journal submitted → poll until final → journal status
 *   → download each output (temp, fsync, rename) → journal downloaded
 *
 * A resumed run replays the journal first and, per instance, skips it (final), re-attaches to it
 * (submitted), resends it with the same Idempotency-Key (an intent, idempotent model), or reports it
 * as unknown (an intent without a key: resent only with `resubmitUnknown`).
 */
import { join } from 'node:path';
import type { GenerationClient } from '../api/client.js';
import { agentPollInterval, AGENT_POLL, type TurnPollOptions } from '../api/agent.js';
import { GenpipeError, IndeterminateSubmissionError } from '../api/errors.js';
import { backoffDelay } from '../api/retry.js';
import { abortError, sleep } from '../api/sleep.js';
import { sha256Hex } from '../api/transport.js';
import type { OptionsCatalog } from '../api/wire.js';
import { compileTemplate } from '../manifest/template.js';
import type { AdapterContext, ModelAdapter, OutputRef, Submission, TrackResult } from '../models/adapter.js';
import { adapterFor, definitionOf, isRemoteUrl, mapImageFields } from '../models/registry.js';
import { InstanceError, type Plan, type PlannedInstance, type StepPlan } from '../plan/plan.js';
import { runIdempotencyKey } from '../plan/instance.js';
import { csvRow } from '../util/csv.js';
import { formatUsd } from '../util/format-usd.js';
import { OutputsCsv } from './outputs-csv.js';
import { DownloadError, downloadToFile } from './download.js';
import type { RunCounts, RunEvent, RunListener, RunOutcome, RunSummary, StopReason } from './events.js';
import type { JournalRecord, TerminalStatus } from './journal-records.js';
import { Journal } from './journal.js';
import { crashPoint } from './crash-points.js';
import { safeFileName } from './output-names.js';
import { PollScheduler, type PollScheduleOptions } from './poll-schedule.js';
import { applyRecord, emptyRunState, markCorrupt, resumeAction, type InstanceState, type RunState } from './run-state.js';
import { AsyncQueue, Slots } from './slots.js';
import { TokenBucket } from './token-bucket.js';
import type { WebhookReceiver } from './webhook-receiver.js';
import { linkEarlierFile, type ReuseIndex } from './reuse.js';
import { readdir, unlink } from 'node:fs/promises';
import { setMaxListeners } from 'node:events';

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
  agentPoll?: TurnPollOptions | undefined;
  onEvent?: RunListener | undefined;
  /** Track request models by webhook (`?hf_webhook=`), with polling as a slow fallback. */
  webhook?: WebhookReceiver | undefined;
  random?: () => number;
  /** The run's submit-rate limiter. Default: a TokenBucket at `ratePerSecond`. Injected by tests. */
  limiter?: RateLimiter | undefined;
  /** How often the liveness watchdog looks, in ms; two looks without progress end a stuck run. Default 5,000. */
  watchdogMs?: number | undefined;
}

/** The outcomes `genpipe resume --retry` can start over. */
export type RetryStatus = 'failed' | 'canceled' | 'nsfw' | 'unknown';
export const RETRY_STATUSES: readonly RetryStatus[] = ['failed', 'canceled', 'nsfw', 'unknown'];

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

const MAX_REROLLS = 3;
/** After Ctrl-C or a halt, how long the walk may take to settle before the run ends without it. */
const HALT_GRACE_MS = 1_500;
/** How long a cancel (--cancel-on-abort) or an agent interrupt may take after Ctrl-C. */
const CANCEL_TIMEOUT_MS = 4_000;
/** In webhook mode, how long to wait for a delivery before polling anyway (§6 rule 3: it may never come). */
const WEBHOOK_FALLBACK_POLL_MS = 30_000;
const BUSY_WAIT: TurnPollOptions = { initialMs: 2_000, maxMs: 10_000, factor: 1.5 };

/** Codes that a later attempt may not meet again: the network, the service's own trouble. */
const TRANSIENT = new Set(['network', 'timeout', 'request_timeout', 'server_error', 'backend_unavailable', 'rate_limited', 'conflict', 'invalid_response']);

interface InstanceRecord {
  step: string;
  values: Record<string, unknown>;
}

class StopSignal {
  reason: StopReason | undefined;
  message: string | undefined;
}

export async function runPlan(options: RunOptions): Promise<RunSummary> {
  const runner = new Runner(options);
  return runner.run();
}

class Runner {
  readonly #o: RunOptions;
  readonly #plan: Plan;
  #journal!: Journal;
  #state!: RunState;
  readonly #counts: RunCounts = { completed: 0, failed: 0, nsfw: 0, canceled: 0, unknown: 0, pending: 0, rerolled: 0, reused: 0 };
  readonly #stop = new StopSignal();
  readonly #global: Slots;
  /** Step and model limits, by `step:<id>` or `model:<name>`. */
  readonly #pools = new Map<string, Slots>();
  readonly #bucket: RateLimiter;
  /** Aborted when the watchdog finds the run stuck: every wait of the run ends, as on Ctrl-C. */
  readonly #halt = new AbortController();
  /** The user's signal or the watchdog's halt: what every wait and request of the run listens to. */
  readonly #signal: AbortSignal;
  /** Set by the watchdog: the run ends with this internal error (exit 70), its journal flushed. */
  #stuck: GenpipeError | undefined;
  /** Operations under way that settle by themselves (requests, sleeps, file writes). */
  #busy = 0;
  /** Bumped whenever a busy operation starts or ends: the watchdog's measure of progress. */
  #progress = 0;
  /** Waits on another part of the run (limiter, slots, a conversation, upstream), by what they wait for. */
  readonly #waits = new Map<string, number>();
  readonly #polls: PollScheduler;
  readonly #conversations = new Map<string, Promise<void>>();
  readonly #records = new Map<string, InstanceRecord>();
  /** Seeds given to re-rolls (journaled ones included), so two re-rolls never send the same one. */
  readonly #rerollSeeds = new Set<number>();
  /** Per step, which seeds its own instances send (see seedMembership). */
  readonly #stepSeeds = new Map<string, (seed: number) => boolean>();
  /** outputs.csv; a finished instance's rows go there at once (spilled to disk), and the run forgets it. */
  #outputs!: OutputsCsv;
  readonly #random: () => number;
  #estimatedUsd = 0;
  /** Set when the service refused the credentials: the run stops and runPlan throws it (exit 5). */
  #refused: GenpipeError | undefined;
  #failures = 0;
  #retriesLeft: number;
  readonly #retryBudget: number;
  readonly #started = Date.now();

  constructor(options: RunOptions) {
    this.#o = options;
    this.#plan = options.plan;
    const defaults = options.plan.loaded.manifest.defaults ?? {};
    this.#global = new Slots(options.concurrency ?? defaults.concurrency ?? 8);
    this.#bucket = options.limiter ?? watchedBucket(options.ratePerSecond ?? 20);
    this.#random = options.random ?? Math.random;
    this.#polls = new PollScheduler(
      {
        ...(defaults.polling?.initial_ms ? { baseMs: defaults.polling.initial_ms } : {}),
        ...(defaults.polling?.max_ms ? { capMs: defaults.polling.max_ms } : {}),
        ...(defaults.polling?.min_ms ? { floorMs: defaults.polling.min_ms } : {}),
        ...options.poll,
      },
      this.#random,
    );
    this.#retryBudget = options.retryBudget ?? 200;
    this.#retriesLeft = this.#retryBudget;
    // Every instance in flight listens to the run's signal (sleeps, requests): no leak warning at high concurrency.
    setMaxListeners(0, options.signal);
    this.#signal = AbortSignal.any([options.signal, this.#halt.signal]);
    setMaxListeners(0, this.#signal);
  }

  /** Journals a record and applies it to the in-memory state, so both always agree. */
  #log(record: JournalRecord, durable = false): Promise<void> {
    applyRecord(this.#state, record);
    return this.#op(() => this.#journal.append(record, { durable }));
  }

  #emit(event: RunEvent): void {
    this.#o.onEvent?.(event);
  }

  get #budget(): number | undefined {
    return this.#o.budgetUsd ?? this.#plan.loaded.manifest.defaults?.budget_usd;
  }

  #stopRun(reason: StopReason, message: string): void {
    if (this.#stop.reason) return;
    this.#stop.reason = reason;
    this.#stop.message = message;
    this.#emit({ type: 'run_stopping', reason, message });
  }

  get #stopping(): boolean {
    return this.#stop.reason !== undefined || this.#refused !== undefined || this.#signal.aborted;
  }

  /** Runs an operation that settles by itself (a request, a sleep, a write), counted for the watchdog. */
  #op<T>(work: () => Promise<T>): Promise<T> {
    this.#busy++;
    this.#progress++;
    return work().finally(() => {
      this.#busy--;
      this.#progress++;
    });
  }

  /** Waits on another part of the run (a limiter, a slot, a conversation), counted for the watchdog's sentence. */
  #wait<T>(what: string, work: () => Promise<T>): Promise<T> {
    this.#waits.set(what, (this.#waits.get(what) ?? 0) + 1);
    return work().finally(() => {
      const left = (this.#waits.get(what) ?? 1) - 1;
      if (left === 0) this.#waits.delete(what);
      else this.#waits.set(what, left);
    });
  }

  /**
   * Liveness as an invariant: a run with work left, nothing under way that settles by itself (no
   * request, sleep or write) and no limiter timer pending can never move again. Two looks in a row
   * without progress end it with an internal error naming the stuck state: every wait is aborted,
   * the journal is flushed, and the run stays resumable. The timer is not unref'd on purpose: a
   * stuck run must be found, not left to exit quietly with an empty event loop.
   */
  #startWatchdog(): NodeJS.Timeout {
    let seen = this.#progress;
    let idleLooks = 0;
    const timer = setInterval(() => {
      if (this.#busy > 0 || this.#bucket.sleeping || this.#progress !== seen) {
        seen = this.#progress;
        idleLooks = 0;
        return;
      }
      if (++idleLooks < 2) return;
      clearInterval(timer);
      const waits = [...this.#waits].map(([what, n]) => `${n} waiting for ${what}`).join(', ');
      this.#stuck = new GenpipeError(
        'internal',
        `The run is stuck: nothing is in flight and no timer is pending${waits === '' ? '' : `, with ${waits}`}. This is a bug in genpipe; the journal is flushed, and \`genpipe resume\` continues the run.`,
      );
      this.#stopRun('stuck', this.#stuck.message);
      this.#halt.abort(this.#stuck);
    }, this.#o.watchdogMs ?? 5_000);
    return timer;
  }

  /**
   * The walk, or, once the run is halted (stuck) or interrupted, at most a short grace for it to
   * settle: a wait that ignores the abort must not keep the run from ending.
   */
  async #untilHalted(walk: Promise<void>): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const ended = new Promise<void>((resolve) => {
      const onAbort = (): void => {
        timer = setTimeout(resolve, this.#o.cancelOnAbort ? CANCEL_TIMEOUT_MS + HALT_GRACE_MS : HALT_GRACE_MS);
      };
      if (this.#signal.aborted) onAbort();
      else this.#signal.addEventListener('abort', onAbort, { once: true });
    });
    try {
      await Promise.race([walk, ended]);
    } finally {
      clearTimeout(timer);
    }
  }

  async run(): Promise<RunSummary> {
    const budget = this.#budget;
    const unpriced = this.#plan.steps.filter((s) => s.priceUsd === undefined).map((s) => s.id);
    if (budget !== undefined && unpriced.length > 0) {
      // A budget is a promise about money: an instance of unknown price could break it unseen.
      throw new GenpipeError('invalid_input', `With a budget, every step needs a price; ${unpriced.join(', ')} ${unpriced.length === 1 ? 'has' : 'have'} none: add it to the manifest's prices (or price_usd on the step).`);
    }
    this.#outputs = await OutputsCsv.open(this.#o.runDir);
    // A resume replays the journal as it is read, never holding its records.
    const state = emptyRunState();
    try {
      this.#journal = await Journal.open(join(this.#o.runDir, 'journal.jsonl'), {
        onRecord: (record) => applyRecord(state, record),
        // Refused unless accepted; accepted, the instance a corrupt line may have been is unknown, never fresh.
        acceptCorrupt: this.#o.acceptCorrupt === true,
        onCorrupt: (corrupt) => {
          markCorrupt(state, corrupt.instance);
          this.#emit({ type: 'journal_corrupt_accepted', line: corrupt.line, instance: corrupt.instance });
        },
      });
    } catch (error) {
      await this.#outputs.abandon();
      throw error;
    }
    this.#state = state;
    for (const entry of state.instances.values()) {
      if (entry.rerollSeed !== undefined) this.#rerollSeeds.add(entry.rerollSeed);
      if (this.#o.serviceForgotten && !entry.final && !entry.failed && (entry.submission || entry.intent)) {
        entry.submission = undefined;
        entry.suspect = true;
      }
    }
    const resumed = !this.#journal.created;
    if (resumed) await removePartialDownloads(join(this.#o.runDir, 'outputs'));
    await this.#log({ type: 'run_started', runId: this.#o.runId, pipeline: this.#plan.name, planHash: this.#o.planHash }, true);
    this.#emit({ type: 'run_started', runId: this.#o.runId, runDir: this.#o.runDir, pipeline: this.#plan.name, instances: this.#plan.totalInstances, resumed });
    const onAbort = (): void => this.#stopRun('aborted', 'Interrupted: stopped submitting; the journal is flushed and `genpipe resume` continues the run.');
    this.#o.signal.addEventListener('abort', onAbort, { once: true });
    // A 429 anywhere (a submit the transport retries by itself included) slows the whole run.
    const unsubscribe = this.#o.client.transport.onThrottle((retryAfterMs) => this.#bucket.slowDown(retryAfterMs));
    const watchdog = this.#startWatchdog();
    try {
      await this.#untilHalted(this.#walk());
    } finally {
      clearInterval(watchdog);
      unsubscribe();
      this.#o.signal.removeEventListener('abort', onAbort);
      const outcome = this.#outcome();
      try {
        await this.#log({ type: 'run_finished', outcome });
        await this.#journal.close();
      } finally {
        await this.#writeOutputsCsv();
      }
    }
    if (this.#stuck) throw this.#stuck;
    if (this.#refused) throw this.#refused;
    const summary: RunSummary = {
      runId: this.#o.runId,
      runDir: this.#o.runDir,
      pipeline: this.#plan.name,
      outcome: this.#outcome(),
      message: this.#stop.message,
      stopReason: this.#stop.reason,
      counts: { ...this.#counts },
      estimatedUsd: Math.round(this.#estimatedUsd * 1e6) / 1e6,
      durationMs: Date.now() - this.#started,
    };
    this.#emit({ type: 'run_finished', summary });
    return summary;
  }

  #outcome(): RunOutcome {
    if (this.#o.signal.aborted) return 'aborted';
    if (this.#stop.reason === 'budget') return 'budget';
    if (this.#stop.reason !== undefined || this.#refused !== undefined) return 'stopped';
    const c = this.#counts;
    return c.failed + c.nsfw + c.canceled + c.unknown + c.pending === 0 ? 'completed' : 'failed';
  }

  // -------------------------------------------------------------------------------------------
  // The DAG walk: one feeder per step; needs wait for whole steps, for_each for single instances.

  async #walk(): Promise<void> {
    const done = new Map<string, Promise<void>>();
    const completions = new Map<string, AsyncQueue<{ instance: PlannedInstance; outputs: Record<string, unknown> }>>();
    for (const step of this.#plan.steps) {
      if (this.#plan.steps.some((s) => s.forEach === step.id)) completions.set(step.id, new AsyncQueue());
    }
    for (const step of this.#plan.steps) {
      done.set(
        step.id,
        (async () => {
          for (const need of step.needs) await done.get(need);
          this.#emit({ type: 'step_started', step: step.id });
          // Only the instances in flight are held: a finished one's promise (and all it closes over)
          // is let go at once, so memory stays flat however many instances a step has.
          const running = new Set<Promise<void>>();
          let firstError: { error: unknown } | undefined;
          const launch = async (instance: PlannedInstance): Promise<void> => {
            if (this.#stopping) {
              this.#counts.pending++;
              return;
            }
            const limits = this.#limitsFor(step);
            const held: Slots[] = [];
            try {
              for (const slots of limits) {
                await this.#wait('a concurrency slot', () => slots.acquire(this.#signal));
                held.push(slots);
              }
            } catch {
              for (const slots of held) slots.release();
              this.#counts.pending++;
              return;
            }
            const processed = this.#process(step, instance, completions.get(step.id)).finally(() => {
              for (const slots of held) slots.release();
            });
            running.add(processed);
            // Settled here, rethrown after the step: an unhandled rejection would kill the process.
            processed
              .catch((error: unknown) => {
                firstError ??= { error };
              })
              .finally(() => running.delete(processed));
          };
          try {
            if (step.forEach === undefined) {
              let seen = 0;
              for (const entry of this.#plan.entries(step.id, this.#o.catalog)) {
                // Once the run stops, the rest of the step is not even rendered: Ctrl-C on a plan of
                // millions ends in moments, and what never started is counted, not walked.
                if (this.#stopping) {
                  this.#counts.pending += Math.max(0, step.count - seen);
                  break;
                }
                seen++;
                if (entry instanceof InstanceError) throw new GenpipeError('invalid_input', `The plan changed while running: ${entry.message}`);
                await launch(entry);
              }
            } else {
              for await (const up of completions.get(step.forEach) as AsyncQueue<{ instance: PlannedInstance; outputs: Record<string, unknown> }>) {
                for (const entry of this.#plan.downstreamOf(step.id, up.instance, up.outputs, this.#o.catalog)) {
                  if (entry instanceof InstanceError) {
                    this.#fail(step, entry.instance, 'invalid_input', entry.message);
                    continue;
                  }
                  await launch(entry);
                }
              }
            }
            await Promise.allSettled([...running]);
            if (firstError) throw firstError.error;
          } finally {
            completions.get(step.id)?.close();
          }
        })(),
      );
    }
    const results = await Promise.allSettled(done.values());
    const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failure) throw failure.reason;
  }

  /**
   * The limits an instance of `step` holds while in flight, in the order they are taken: its step's
   * (`concurrency` on the step), its model's (`defaults.model_concurrency`, shared by every step of
   * that model), and the run's.
   */
  #limitsFor(step: StepPlan): Slots[] {
    const limits: Slots[] = [];
    const pool = (key: string, size: number): Slots => {
      let slots = this.#pools.get(key);
      if (!slots) {
        slots = new Slots(size);
        this.#pools.set(key, slots);
      }
      return slots;
    };
    if (step.step.concurrency !== undefined) limits.push(pool(`step:${step.id}`, step.step.concurrency));
    const perModel = this.#plan.loaded.manifest.defaults?.model_concurrency?.[step.model];
    if (perModel !== undefined) limits.push(pool(`model:${step.model}`, perModel));
    limits.push(this.#global);
    return limits;
  }

  // -------------------------------------------------------------------------------------------
  // One instance.

  async #process(step: StepPlan, planned: PlannedInstance, completions: AsyncQueue<{ instance: PlannedInstance; outputs: Record<string, unknown> }> | undefined): Promise<void> {
    const adapter = adapterFor(step.model);
    this.#records.set(planned.id, { step: step.id, values: planned.values });
    if (!adapter) {
      this.#fail(step, planned.id, 'invalid_input', `raw model path ${step.model} can be planned but not run yet`);
      return;
    }
    let entry = this.#state.instances.get(planned.id);
    try {
      const retrying = this.#retryStatusOf(entry, adapter);
      if (retrying !== undefined && this.#o.retry?.has(retrying)) {
        // `--retry`: a new attempt of the same instance, with a new key; what came before is history.
        await this.#log({ type: 'retry', instance: planned.id, attempt: (entry?.retries ?? 0) + 1, previous: retrying }, true);
        entry = this.#state.instances.get(planned.id);
      }
      const instance = entry?.rerollSeed !== undefined ? withSeed(planned, entry.rerollSeed) : entry && entry.rerolls > 0 ? rerolledBefore(planned, entry.rerolls) : planned;
      const final = await this.#drive(step, adapter, instance, entry);
      if (final?.status === 'completed' && completions) completions.push({ instance: planned, outputs: final.outputs });
      if (final) this.#compact(planned.id);
    } catch (error) {
      if (error instanceof GenpipeError && error.code === 'aborted') return;
      throw error;
    }
  }

  /** What `--retry` calls an instance's outcome so far (failed, canceled, nsfw, unknown), if it is one of those. */
  #retryStatusOf(entry: InstanceState | undefined, adapter: ModelAdapter): RetryStatus | undefined {
    const action = resumeAction(entry, adapter.idempotentSubmit, this.#state.suspectAll);
    if (action.kind === 'failed') return 'failed';
    if (action.kind === 'unknown') return 'unknown';
    if (action.kind === 'done' && action.status !== 'completed') return action.status;
    return undefined;
  }

  /** The key this run sends for an instance: the plan's key bound to the run and the attempt (undefined for keyless models). */
  #keyOf(adapter: ModelAdapter, instance: PlannedInstance, entry: InstanceState | undefined): string | undefined {
    const planKey = adapter.idempotentSubmit ? instance.key : undefined;
    return planKey === undefined ? undefined : runIdempotencyKey(planKey, this.#o.runId, entry?.retries ?? 0);
  }

  /** Runs an instance to a final status (or gives up on it); returns the final result, if any. */
  async #drive(step: StepPlan, adapter: ModelAdapter, instance: PlannedInstance, entry: InstanceState | undefined): Promise<{ status: TerminalStatus; outputs: Record<string, unknown> } | undefined> {
    let action = resumeAction(entry, adapter.idempotentSubmit, this.#state.suspectAll);
    if (action.kind === 'done' && entry?.final) {
      const final = entry.final;
      if (final.status === 'completed' && !(await this.#downloadAll(step, instance.id, final.outputs as OutputRef[], entry))) return undefined;
      if (entry.reusedFrom !== undefined) this.#counts.reused++;
      else {
        this.#count(final.status);
        this.#estimatedUsd += step.priceUsd ?? 0;
      }
      return { status: final.status, outputs: final.result ?? {} };
    }
    if (action.kind === 'failed') {
      this.#counts.failed++;
      this.#failures++;
      return undefined;
    }
    if (action.kind === 'unknown') {
      if (!this.#o.resubmitUnknown) {
        this.#counts.unknown++;
        this.#emit({ type: 'instance_unknown', step: step.id, instance: instance.id, message: 'an earlier submit may or may not have reached the service; resend it with `genpipe resume --retry unknown`' });
        return undefined;
      }
      action = { kind: 'fresh' };
    }
    if (action.kind === 'fresh' && this.#o.reuse) {
      const reused = await this.#reuse(step, instance);
      if (reused) return reused;
    }
    const script = this.#script(step);
    const conversation = step.model === 'agent' ? this.#conversationOf(step, instance) : undefined;
    const release = conversation === undefined ? undefined : await this.#lockConversation(conversation);
    try {
      let submission: Submission | undefined = action.kind === 'reattach' ? action.submission : undefined;
      let submittedAt = entry?.submittedAt ?? Date.now();
      if (!submission) {
        if (conversation !== undefined) script.sessionId = this.#state.sessions.get(conversation);
        const key = action.kind === 'resubmit_same_key' ? action.key : this.#keyOf(adapter, instance, this.#state.instances.get(instance.id));
        submission = await this.#submit(step, adapter, instance, key, script);
        if (!submission) return undefined;
        submittedAt = Date.now();
        if (conversation !== undefined && submission.kind === 'agent_turn' && this.#state.sessions.get(conversation) !== submission.sessionId) {
          await this.#log({ type: 'agent_session', conversation, sessionId: submission.sessionId }, true);
        }
      } else {
        this.#estimatedUsd += step.priceUsd ?? 0;
      }
      const result = await this.#track(step, adapter, instance, submission, submittedAt, script);
      if (!result) return undefined;
      if (result.status === 'nsfw' && (step.step.on_nsfw ?? this.#plan.loaded.manifest.defaults?.on_nsfw) === 'reroll') {
        const attempt = (this.#state.instances.get(instance.id)?.rerolls ?? 0) + 1;
        const seed = attempt <= MAX_REROLLS ? this.#rerollSeed(step, instance, attempt) : undefined;
        if (seed !== undefined) {
          // The nsfw attempt is refunded (§8); the instance goes on with a seed no other instance
          // of the plan has, so the re-roll never buys a duplicate. The seed is journaled as sent.
          await this.#log({ type: 'reroll', instance: instance.id, attempt, seed }, true);
          this.#counts.rerolled++;
          this.#emit({ type: 'instance_rerolled', step: step.id, instance: instance.id, attempt, seed, estimatedUsd: step.priceUsd });
          this.#estimatedUsd -= step.priceUsd ?? 0;
          release?.();
          return this.#drive(step, adapter, withSeed(instance, seed), this.#state.instances.get(instance.id));
        }
      }
      this.#emit({ type: 'instance_finished', step: step.id, instance: instance.id, status: result.status, estimatedUsd: step.priceUsd, actualCostUsd: result.actualCostUsd, error: result.error });
      if (result.status === 'completed' && !(await this.#downloadAll(step, instance.id, result.files, this.#state.instances.get(instance.id)))) return undefined;
      this.#count(result.status);
      if (result.status !== 'completed') this.#noteFailure(step, instance.id);
      return { status: result.status, outputs: result.outputs };
    } finally {
      release?.();
    }
  }

  /**
   * `--reuse`: an earlier run completed the same model and body, so its files are linked in and the
   * instance is done at US$0, with nothing sent. Undefined when there is nothing to reuse (or an
   * earlier file is gone or changed): the instance is generated as usual.
   */
  async #reuse(step: StepPlan, instance: PlannedInstance): Promise<{ status: TerminalStatus; outputs: Record<string, unknown> } | undefined> {
    const bodyHash = sha256Hex(JSON.stringify(instance.body));
    const found = this.#o.reuse?.find(step.model, bodyHash);
    if (!found) return undefined;
    const paths = found.outputs.map((file, index) => outputPath(step.id, instance.id, file, found.outputs.length, index));
    for (const [index, file] of found.files.entries()) {
      const path = paths[index] as string;
      if (!(await this.#op(() => linkEarlierFile(found, file, this.#o.runDir, path)))) return undefined;
    }
    await this.#log({ type: 'reused', instance: instance.id, model: step.model, bodyHash, fromRunId: found.runId, outputs: found.outputs, ...(found.result === undefined ? {} : { result: found.result }) }, true);
    for (const [index, file] of found.files.entries()) {
      await this.#log({ type: 'downloaded', instance: instance.id, output: index, path: paths[index] as string, sha256: file.sha256, size: file.size });
    }
    this.#counts.reused++;
    this.#emit({ type: 'instance_reused', step: step.id, instance: instance.id, fromRunId: found.runId });
    return { status: 'completed', outputs: found.result ?? {} };
  }

  /**
   * A seed for a re-roll that no instance of the step uses and no earlier re-roll of this run took:
   * drawn from the instance id and attempt (so it is stable to read), then probed upwards. Undefined
   * when the model takes no seed.
   */
  #rerollSeed(step: StepPlan, instance: PlannedInstance, attempt: number): number | undefined {
    if (definitionOf(step.model)?.seeded !== true || instance.body === null || typeof instance.body !== 'object') return undefined;
    const used = this.#seedsOf(step);
    const start = Number.parseInt(sha256Hex(`${instance.id}\u0000${attempt}`).slice(0, 8), 16) % SEED_MAX;
    for (let probe = 0; probe < SEED_MAX; probe++) {
      const seed = ((start + probe) % SEED_MAX) + 1;
      if (!used(seed) && !this.#rerollSeeds.has(seed)) {
        this.#rerollSeeds.add(seed);
        return seed;
      }
    }
    return undefined;
  }

  /** Which seeds the step's own instances send, as a membership test (computed once per step). */
  #seedsOf(step: StepPlan): (seed: number) => boolean {
    let test = this.#stepSeeds.get(step.id);
    if (!test) {
      test = seedMembership(step, () => {
        const seeds = new Set<number>();
        for (const entry of this.#plan.entries(step.id, this.#o.catalog)) {
          if (entry instanceof InstanceError) continue;
          const seed = (entry.body as { seed?: unknown } | null)?.seed;
          if (typeof seed === 'number') seeds.add(seed);
        }
        return seeds;
      });
      this.#stepSeeds.set(step.id, test);
    }
    return test;
  }

  /**
   * Forgets a finished instance once its outputs.csv rows are set aside. Nothing reads its state
   * again in this run (the journal holds it for a resume), so memory stays flat however many
   * instances finish.
   */
  #compact(id: string): void {
    const entry = this.#state.instances.get(id);
    if (!entry?.final) return;
    this.#outputs.add(id, this.#csvRows(id, entry));
    this.#state.instances.delete(id);
    this.#records.delete(id);
  }

  #count(status: TerminalStatus): void {
    this.#counts[status]++;
  }

  #noteFailure(step: StepPlan, id: string): void {
    this.#failures++;
    const failFast = this.#o.failFast ?? (step.step.on_failure ?? this.#plan.loaded.manifest.defaults?.on_failure) === 'stop';
    if (failFast) this.#stopRun('fail_fast', `Stopped at the first failure (${id}); resume after fixing it.`);
    const max = this.#plan.loaded.manifest.defaults?.max_failures;
    if (max !== undefined && this.#failures >= max) this.#stopRun('max_failures', `Stopped after ${this.#failures} failures (max_failures ${max}).`);
  }

  #fail(step: StepPlan, id: string, code: string, message: string): void {
    this.#counts.failed++;
    this.#emit({ type: 'instance_failed', step: step.id, instance: id, code, message });
    void this.#log({ type: 'failed', instance: id, code, message }).catch(() => {});
    this.#noteFailure(step, id);
  }

  #script(step: StepPlan): { replies?: readonly string[] | undefined; sessionId?: string | undefined } {
    return { replies: step.step.replies };
  }

  #conversationOf(step: StepPlan, instance: PlannedInstance): string {
    if (!step.step.conversation) return `${step.id}:${instance.id}`;
    const rendered = compileTemplate(step.step.conversation).render({ vars: this.#plan.loaded.manifest.vars ?? {}, ...instance.values });
    return `${step.id}:${String(rendered)}`;
  }

  /** One turn per session at a time (§4.6 rule 3): instances of one conversation take turns. */
  async #lockConversation(conversation: string): Promise<() => void> {
    const previous = this.#conversations.get(conversation) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    this.#conversations.set(conversation, previous.then(() => mine));
    await this.#wait('an agent conversation', () => previous);
    let released = false;
    return () => {
      if (!released) {
        released = true;
        release();
      }
    };
  }

  // -------------------------------------------------------------------------------------------
  // Submitting.

  async #submit(step: StepPlan, adapter: ModelAdapter, instance: PlannedInstance, key: string | undefined, script: { replies?: readonly string[] | undefined; sessionId?: string | undefined }): Promise<Submission | undefined> {
    const price = step.priceUsd ?? 0;
    const budget = this.#budget;
    if (this.#stopping) {
      this.#counts.pending++;
      return undefined;
    }
    if (budget !== undefined && this.#estimatedUsd + price > budget + 1e-9) {
      this.#stopRun('budget', `Stopped before going over the budget of ${formatUsd(budget)} (${formatUsd(this.#estimatedUsd)} committed).`);
      this.#counts.pending++;
      return undefined;
    }
    this.#estimatedUsd += price;
    const body = await this.#prepareBody(step, instance.body);
    const bodyHash = sha256Hex(JSON.stringify(body));
    const ctx = this.#ctx();
    const retries = step.step.retries ?? this.#plan.loaded.manifest.defaults?.retries ?? 3;
    let busyPolls = 0;
    // Whether an earlier attempt of this submit may have reached the service (then it is never called unsent).
    let mayHaveArrived = false;
    for (let attempt = 0; ; attempt++) {
      await this.#wait('the rate limiter', () => this.#bucket.take(this.#signal));
      crashPoint('before_intent_sync');
      await this.#log({ type: 'intent', instance: instance.id, model: step.model, idempotencyKey: key ?? null, bodyHash }, true);
      crashPoint('after_intent_sync');
      try {
        const submission = await this.#op(() => adapter.submit(body, { idempotencyKey: key, script }, ctx));
        crashPoint('after_post');
        this.#creditRetry();
        // Synced only where losing it would cost: a keyed submit lost in a crash is resent with its
        // key and the service answers with the same request; a keyless one would become unknown.
        await this.#log({ type: 'submitted', instance: instance.id, handle: submission }, key === undefined);
        this.#emit({ type: 'instance_submitted', step: step.id, instance: instance.id, model: step.model, estimatedUsd: step.priceUsd });
        return submission;
      } catch (error) {
        if (!(error instanceof GenpipeError)) throw error;
        if (error.code === 'aborted') throw error;
        if (error instanceof IndeterminateSubmissionError) {
          this.#counts.unknown++;
          this.#emit({ type: 'instance_unknown', step: step.id, instance: instance.id, message: error.message });
          return undefined;
        }
        if (this.#credentialsRefused(error)) {
          this.#estimatedUsd -= price;
          await this.#log({ type: 'refused', instance: instance.id, code: error.code });
          return undefined;
        }
        if (error.code === 'insufficient_credits') {
          this.#estimatedUsd -= price;
          await this.#log({ type: 'refused', instance: instance.id, code: error.code });
          this.#stopRun('insufficient_credits', `${error.message} Top up the account, then resume the run.`);
          this.#counts.pending++;
          return undefined;
        }
        if (error.code === 'session_busy' || error.code === 'rate_limited') {
          // Both are refusals before processing, never charged (§7): a 409 waits for the running turn,
          // a 429 slows the whole run down. Either way the retry draws from the run's budget, so a
          // service that never stops refusing ends the run (exit 5) instead of looping forever.
          if (error.code === 'rate_limited') this.#bucket.slowDown(error.retryAfterMs);
          if (!this.#consumeRetry()) {
            this.#estimatedUsd -= price;
            await this.#log({ type: 'refused', instance: instance.id, code: error.code });
            this.#counts.pending++;
            return undefined;
          }
          if (error.code === 'session_busy') {
            const wait = agentPollInterval(busyPolls++, BUSY_WAIT);
            await this.#op(() => sleep(wait, this.#signal));
          }
          attempt--;
          continue;
        }
        if (error.neverSent && !mayHaveArrived) {
          // Provably never reached the service (connection refused, DNS), after the transport's own
          // retries: nothing was created or charged, and the journal says so. A service that cannot
          // be reached at all ends the run (exit 5), resumable.
          this.#estimatedUsd -= price;
          await this.#log({ type: 'refused', instance: instance.id, code: 'not_sent' });
          this.#counts.pending++;
          this.#stopRun('unreachable', `The service could not be reached (${error.message.replace(/[.]$/, '')}); nothing was sent. Resume the run once it is reachable.`);
          return undefined;
        }
        if (!error.neverSent) mayHaveArrived = true;
        // A keyed submit that kept failing in transit is safe to repeat with the same key.
        if (TRANSIENT.has(error.code) && key !== undefined && attempt < retries && this.#consumeRetry()) {
          const wait = backoffDelay(attempt, { baseMs: 1_000, capMs: 30_000 }, this.#random);
          await this.#op(() => sleep(wait, this.#signal));
          continue;
        }
        if (TRANSIENT.has(error.code)) {
          // Resumable: the intent stays in the journal without an answer.
          this.#estimatedUsd -= price;
          this.#counts.pending++;
          this.#emit({ type: 'instance_failed', step: step.id, instance: instance.id, code: error.code, message: `${error.message} (left for a resume)` });
          return undefined;
        }
        this.#estimatedUsd -= price;
        this.#fail(step, instance.id, error.code, error.message);
        return undefined;
      }
    }
  }

  /**
   * A 401 means every later request fails too: stop the run (the instance stays resumable, it is
   * not failed) and let runPlan end with one sentence. Returns true when it handled the error.
   */
  #credentialsRefused(error: GenpipeError): boolean {
    if (error.code !== 'unauthorized') return false;
    this.#counts.pending++;
    this.#refused ??= new GenpipeError('unauthorized', `${error.message.replace(/[.]$/, '')}; the run stopped, and \`genpipe resume\` continues it once the credentials are fixed.`);
    return true;
  }

  /** A success earns one retry back, up to the budget: only a service that keeps failing exhausts it. */
  #creditRetry(): void {
    if (this.#retriesLeft < this.#retryBudget) this.#retriesLeft++;
  }

  #consumeRetry(): boolean {
    if (this.#retriesLeft <= 0) {
      this.#stopRun('retry_budget', 'The service kept failing, so the run stopped instead of retrying without end; resume it once the service is back.');
      return false;
    }
    this.#retriesLeft--;
    return true;
  }

  /** Uploads local image paths once per run (journaled, so a resume sends the same URL and body). */
  async #prepareBody(step: StepPlan, body: unknown): Promise<unknown> {
    const locals: string[] = [];
    mapImageFields(body, step.spec.imageFields, (v) => {
      if (!isRemoteUrl(v)) locals.push(v);
      return v;
    });
    for (const path of locals) {
      if (this.#state.uploads.has(path)) continue;
      const url = await this.#op(() => this.#o.client.media.uploadLocalImage(path, { signal: this.#signal }));
      await this.#log({ type: 'uploaded', path, url }, true);
    }
    return locals.length === 0 ? body : mapImageFields(body, step.spec.imageFields, (v) => this.#state.uploads.get(v) ?? v);
  }

  #ctx(): AdapterContext {
    return { client: this.#o.client, signal: this.#signal, webhookUrl: this.#o.webhook?.url };
  }

  /**
   * Waits before the next look at a submission. With a webhook receiver, a request is looked at as
   * soon as its delivery arrives (to confirm it with a GET: a payload is never trusted), and
   * otherwise only by slow fallback polls. Once a look after the delivery found the request not
   * final (a forged or early payload), the delivery is spent: it polls, never hot.
   */
  async #waitForNews(submission: Submission, delayMs: number, deliverySpent: boolean): Promise<void> {
    const receiver = this.#o.webhook;
    if (!receiver || submission.kind !== 'request' || deliverySpent) return sleep(delayMs, this.#signal);
    if (receiver.arrived(submission.requestId)) return;
    const done = new AbortController();
    const signal = AbortSignal.any([this.#signal, done.signal]);
    try {
      await Promise.race([sleep(Math.max(delayMs, WEBHOOK_FALLBACK_POLL_MS), signal).catch(() => {}), receiver.wait(submission.requestId, signal)]);
    } finally {
      done.abort();
    }
    if (this.#signal.aborted) throw abortError(this.#signal);
  }

  // -------------------------------------------------------------------------------------------
  // Tracking.

  async #track(step: StepPlan, adapter: ModelAdapter, instance: PlannedInstance, first: Submission, submittedAt: number, script: { replies?: readonly string[] | undefined; sessionId?: string | undefined }): Promise<Extract<TrackResult, { done: true }> | undefined> {
    let submission = first;
    const timer = this.#polls.start(step.model, submittedAt);
    const ctx = this.#ctx();
    for (let agentPolls = 0, failures = 0, looks = 0; ; looks++) {
      const delay = submission.kind === 'agent_turn' ? agentPollInterval(agentPolls++, this.#o.agentPoll ?? AGENT_POLL) : timer.next(Date.now());
      try {
        const waitingOn = submission;
        const deliverySpent = submission.kind === 'request' && looks > 0 && this.#o.webhook?.arrived(submission.requestId) === true;
        await this.#op(() => this.#waitForNews(waitingOn, delay, deliverySpent));
      } catch (error) {
        if (adapter.stop && (this.#o.cancelOnAbort || submission.kind === 'agent_turn')) {
          const stopping = submission;
          const stop = adapter.stop;
          const accepted = await this.#op(() => stop(stopping, { ...ctx, signal: AbortSignal.timeout(CANCEL_TIMEOUT_MS) }).catch(() => false));
          if (this.#o.cancelOnAbort && accepted === true) {
            // The service took the cancel of a queued request: it ends canceled (and refunded), so the
            // journal says so and a resume does not wait for it.
            const message = 'canceled by genpipe on abort (--cancel-on-abort)';
            await this.#log({ type: 'status', instance: instance.id, status: 'canceled', outputs: [], error: message }, true);
            this.#counts.canceled++;
            this.#emit({ type: 'instance_finished', step: step.id, instance: instance.id, status: 'canceled', estimatedUsd: step.priceUsd, error: message });
          }
        }
        throw error;
      }
      let result: TrackResult;
      try {
        const looking = submission;
        result = await this.#op(() => adapter.track(looking, script, ctx));
        this.#creditRetry();
      } catch (error) {
        if (!(error instanceof GenpipeError)) throw error;
        if (error.code === 'aborted') throw error;
        if (this.#credentialsRefused(error)) return undefined;
        if (TRANSIENT.has(error.code) && failures < 20 && this.#consumeRetry()) {
          // Backoff of its own: in webhook mode a request whose delivery has arrived is looked at
          // again at once, so without it a failing look would be retried hot.
          const wait = backoffDelay(failures++, { baseMs: 200, capMs: 10_000 }, this.#random);
          await this.#op(() => sleep(wait, this.#signal));
          continue;
        }
        if (TRANSIENT.has(error.code)) {
          this.#counts.pending++;
          this.#emit({ type: 'instance_failed', step: step.id, instance: instance.id, code: error.code, message: `${error.message} (left for a resume)` });
          return undefined;
        }
        this.#fail(step, instance.id, error.code, error.message);
        return undefined;
      }
      if (!result.done) {
        if (result.next) {
          submission = result.next;
          agentPolls = 0;
          await this.#log({ type: 'submitted', instance: instance.id, handle: submission }, true);
        }
        continue;
      }
      timer.complete(Date.now());
      await this.#log(
        {
          type: 'status',
          instance: instance.id,
          status: result.status,
          outputs: result.files.map((f) => ({ url: f.url, name: f.name, accept: [...f.accept] })),
          result: result.outputs,
          ...(result.error === undefined ? {} : { error: result.error }),
          ...(result.actualCostUsd === undefined ? {} : { actualCostUsd: result.actualCostUsd }),
        },
        // Not synced: lost in a crash, the status is read again from the service on resume.
        false,
      );
      return result;
    }
  }

  // -------------------------------------------------------------------------------------------
  // Downloads.

  /**
   * Downloads the outputs not downloaded yet. Transient failures (the CDN's 5xx, resets) are retried
   * with backoff; a download that still fails is reported and left for a resume (the status record
   * is journaled, so a resume downloads again). Returns false when a file is missing.
   */
  async #downloadAll(step: StepPlan, id: string, files: readonly OutputRef[] | readonly { url: string; name?: string | undefined; accept?: string[] | undefined }[], entry: InstanceState | undefined): Promise<boolean> {
    const list = files as readonly { url: string; name?: string | undefined; accept?: readonly string[] | undefined }[];
    for (const [index, file] of list.entries()) {
      if (entry?.downloads?.has(index)) continue;
      const accept = file.accept ?? [];
      const relativePath = outputPath(step.id, id, file, list.length, index);
      let result: Awaited<ReturnType<typeof downloadToFile>>;
      for (let failures = 0; ; ) {
        try {
          result = await this.#op(() => downloadToFile({
            url: file.url,
            runDir: this.#o.runDir,
            relativePath,
            maxBytes: this.#o.maxDownloadBytes ?? 256 * 1024 * 1024,
            allowedContentTypes: accept.length > 0 ? accept : ['*/*'],
            dispatcher: this.#o.client.transport.dispatcher,
            signal: this.#signal,
          }));
          this.#creditRetry();
          break;
        } catch (error) {
          if (!(error instanceof GenpipeError) || error.code === 'aborted') throw error;
          // A refusal (content type, size, unsafe path, a different existing file) would only repeat.
          const transient = TRANSIENT.has(error.code) && !(error instanceof DownloadError);
          if (transient && failures < 20 && this.#consumeRetry()) {
            const wait = backoffDelay(failures++, { baseMs: 200, capMs: 10_000 }, this.#random);
            await this.#op(() => sleep(wait, this.#signal));
            continue;
          }
          if (transient) {
            this.#counts.pending++;
            this.#emit({ type: 'instance_failed', step: step.id, instance: id, code: error.code, message: `${error.message} (the download is left for a resume)` });
            return false;
          }
          this.#fail(step, id, error.code, error.message);
          return false;
        }
      }
      crashPoint('mid_rename');
      await this.#log({ type: 'downloaded', instance: id, output: index, path: result.relativePath, sha256: result.sha256, size: result.size });
    }
    return true;
  }

  /** outputs.csv, with the rows of the instances that did not finish (they are still in the state). */
  async #writeOutputsCsv(): Promise<void> {
    await this.#outputs.write([...this.#state.instances].map(([id, entry]): [string, string] => [id, this.#csvRows(id, entry)]));
  }

  /** An instance's outputs.csv rows: one per downloaded file, or one without a file. */
  #csvRows(id: string, entry: InstanceState): string {
    const record = this.#records.get(id);
    const requestId = requestIdOf(entry.submission);
    const status = entry.reusedFrom !== undefined ? 'reused' : (entry.final?.status ?? (entry.failed ? 'failed' : entry.submission ? 'in_flight' : entry.intent ? 'unknown' : 'pending'));
    const step = record?.step ?? id.replace(/\[.*$/, '');
    const axes = record?.values ?? '';
    const seed = entry.rerollSeed ?? '';
    if (!entry.downloads?.size) return csvRow([id, step, axes, requestId, status, '', '', seed]);
    let rows = '';
    for (const d of entry.downloads.values()) rows += csvRow([id, step, axes, requestId, status, d.path, d.sha256, seed]);
    return rows;
  }
}

/** Temp files of downloads a crash cut short (see download.ts); a resume downloads them again. */
async function removePartialDownloads(outputs: string): Promise<void> {
  const steps = await readdir(outputs, { withFileTypes: true }).catch(() => []);
  for (const step of steps) {
    if (!step.isDirectory()) continue;
    const names = await readdir(join(outputs, step.name)).catch(() => [] as string[]);
    for (const name of names) if (/^\.genpipe-[0-9a-f]{16}\.part$/.test(name)) await unlink(join(outputs, step.name, name)).catch(() => {});
  }
}

function requestIdOf(submission: Submission | undefined): string {
  if (!submission) return '';
  if (submission.kind === 'request') return submission.requestId;
  if (submission.kind === 'job_set') return submission.jobSetId;
  return submission.messageId;
}

/** The run's TokenBucket, with the watchdog told whether its pump has a timer pending. */
function watchedBucket(ratePerSecond: number): RateLimiter {
  let sleeps = 0;
  const bucket = new TokenBucket({
    ratePerSecond,
    sleep: (ms, signal) => {
      sleeps++;
      return sleep(ms, signal).finally(() => sleeps--);
    },
  });
  return {
    take: (signal) => bucket.take(signal),
    slowDown: (retryAfterMs) => bucket.slowDown(retryAfterMs),
    get sleeping() {
      return sleeps > 0;
    },
    get waiting() {
      return bucket.waiting;
    },
  };
}

/** Where an instance's output goes in the run directory: `outputs/<step>/<instance>[-index].<ext>`. */
function outputPath(stepId: string, id: string, file: { url: string; accept?: readonly string[] | undefined }, count: number, index: number): string {
  const name = safeFileName(id, extensionFor(file.url, file.accept ?? []), count > 1 ? { index } : {});
  return `outputs/${safeFileName(stepId, 'd').replace(/\.d$/, '')}/${name}`;
}

/** An instance re-rolled by a genpipe older than journaled seeds: the next variation_index (animal tiers) or seed. */
function rerolledBefore(instance: PlannedInstance, times: number): PlannedInstance {
  const body = { ...(instance.body as Record<string, unknown>) };
  const human = ['normal', 'freak', 'total'].includes(String(body.tier ?? 'normal'));
  if (!human && typeof body.variation_index === 'number') body.variation_index += times;
  else if (typeof body.seed === 'number') body.seed = ((body.seed - 1 + times) % SEED_MAX) + 1;
  else body.seed = times;
  return instance.withBody(body);
}

/** The instance with another seed (a re-roll), hence another body and key. */
function withSeed(instance: PlannedInstance, seed: number): PlannedInstance {
  return instance.withBody({ ...(instance.body as Record<string, unknown>), seed });
}

/** Seeds are 1 to 1,000,000 (§4.2; the legacy models take the same range here). */
const SEED_MAX = 1_000_000;
/** Axes up to this many values are held as a set; longer ones must be arithmetic (ranges). */
const SEED_SET_MAX = 200_000;

/**
 * Which seeds a step's instances send. A seed written as one sweep axis (`seed: "{{ s }}"`) is
 * tested against that axis (a range without enumerating it) and the include entries; a literal is
 * itself; no seed field means no instance sends one; any other template is enumerated.
 */
function seedMembership(step: StepPlan, enumerate: () => Set<number>): (seed: number) => boolean {
  const written = (step.step.input as Record<string, unknown> | undefined)?.seed;
  if (written === undefined) return () => false;
  if (typeof written === 'number') return (seed) => seed === written;
  const name = typeof written === 'string' ? /^\s*\{\{\s*([A-Za-z_]\w*)\s*\}\}\s*$/.exec(written)?.[1] : undefined;
  const axis = name === undefined ? undefined : step.matrix.axes.find((a) => a.name === name);
  if (!axis || name === undefined) {
    const seeds = step.forEach === undefined ? enumerate() : new Set<number>();
    return (seed) => seeds.has(seed);
  }
  const included = new Set((step.matrix.include ?? []).map((entry) => entry[name]).filter((v): v is number => typeof v === 'number'));
  const first = axis.value(0);
  const second = axis.length > 1 ? axis.value(1) : undefined;
  if (axis.length > SEED_SET_MAX && typeof first === 'number' && typeof second === 'number' && axis.value(axis.length - 1) === first + (second - first) * (axis.length - 1)) {
    const stride = second - first;
    return (seed) => {
      const k = (seed - first) / stride;
      return included.has(seed) || (Number.isInteger(k) && k >= 0 && k < axis.length && axis.value(k) === seed);
    };
  }
  for (let i = 0; i < axis.length; i++) {
    const value = axis.value(i);
    if (typeof value === 'number') included.add(value);
  }
  return (seed) => included.has(seed);
}

const EXTENSIONS: Record<string, string> = { 'image/png': 'png', 'image/jpeg': 'jpg', 'image/webp': 'webp', 'video/mp4': 'mp4', 'video/webm': 'webm', 'video/quicktime': 'mov', 'audio/wav': 'wav', 'audio/x-wav': 'wav', 'audio/wave': 'wav', 'audio/mpeg': 'mp3', 'audio/mp4': 'm4a' };

/** The file's extension: the URL's when it is one the accepted types allow, else the first type's. */
function extensionFor(url: string, accept: readonly string[]): string {
  const fromUrl = /\.([a-z0-9]{2,5})$/i.exec(new URL(url).pathname)?.[1]?.toLowerCase();
  const allowed = new Set(accept.map((t) => EXTENSIONS[t]).filter((e): e is string => e !== undefined));
  if (fromUrl && (allowed.has(fromUrl) || (fromUrl === 'jpeg' && allowed.has('jpg')))) return fromUrl === 'jpeg' ? 'jpg' : fromUrl;
  return EXTENSIONS[accept[0] ?? ''] ?? 'bin';
}

