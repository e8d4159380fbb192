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
import { adapterFor } from '../models/adapters.js';
import { isRemoteUrl, mapImageFields } from '../models/registry.js';
import { InstanceError, type Plan, type PlannedInstance, type StepPlan } from '../plan/plan.js';
import { csvRow } from '../util/csv.js';
import { OutputsCsv } from './outputs-csv.js';
import { DownloadError, downloadToFile } from './download.js';
import type { RunCounts, RunEvent, RunListener, RunOutcome, RunSummary, StopReason } from './events.js';
import type { JournalRecord, TerminalStatus } from './journal-records.js';
import { Journal } from './journal.js';
import { crashPoint } from './crash-points.js';
import { safeFileName } from './output-names.js';
import { PollScheduler, type PollScheduleOptions } from './poll-schedule.js';
import { applyRecord, emptyRunState, resumeAction, type InstanceState, type RunState } from './run-state.js';
import { AsyncQueue, Slots } from './slots.js';
import { TokenBucket } from './token-bucket.js';
import type { WebhookReceiver } from './webhook-receiver.js';
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
}

const MAX_REROLLS = 3;
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
  readonly #counts: RunCounts = { completed: 0, failed: 0, nsfw: 0, canceled: 0, unknown: 0, pending: 0 };
  readonly #stop = new StopSignal();
  readonly #global: Slots;
  /** Step and model limits, by `step:<id>` or `model:<name>`. */
  readonly #pools = new Map<string, Slots>();
  readonly #bucket: TokenBucket;
  readonly #polls: PollScheduler;
  readonly #conversations = new Map<string, Promise<void>>();
  readonly #records = new Map<string, InstanceRecord>();
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
    this.#bucket = new TokenBucket({ ratePerSecond: options.ratePerSecond ?? 20 });
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
  }

  /** Journals a record and applies it to the in-memory state, so both always agree. */
  #log(record: JournalRecord, durable = false): Promise<void> {
    applyRecord(this.#state, record);
    return this.#journal.append(record, { durable });
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
    return this.#stop.reason !== undefined || this.#refused !== undefined || this.#o.signal.aborted;
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
      this.#journal = await Journal.open(join(this.#o.runDir, 'journal.jsonl'), { onRecord: (record) => applyRecord(state, record) });
    } catch (error) {
      await this.#outputs.abandon();
      throw error;
    }
    this.#state = state;
    const resumed = !this.#journal.created;
    if (resumed) await removePartialDownloads(join(this.#o.runDir, 'outputs'));
    await this.#log({ type: 'run_started', runId: this.#o.runId, pipeline: this.#plan.name, planHash: this.#o.planHash }, true);
    this.#emit({ type: 'run_started', runId: this.#o.runId, runDir: this.#o.runDir, pipeline: this.#plan.name, instances: this.#plan.totalInstances, resumed });
    const onAbort = (): void => this.#stopRun('aborted', 'Interrupted: stopped submitting; the journal is flushed and `genpipe resume` continues the run.');
    this.#o.signal.addEventListener('abort', onAbort, { once: true });
    try {
      await this.#walk();
    } finally {
      this.#o.signal.removeEventListener('abort', onAbort);
      const outcome = this.#outcome();
      try {
        await this.#log({ type: 'run_finished', outcome });
        await this.#journal.close();
      } finally {
        await this.#writeOutputsCsv();
      }
    }
    if (this.#refused) throw this.#refused;
    const summary: RunSummary = {
      runId: this.#o.runId,
      runDir: this.#o.runDir,
      pipeline: this.#plan.name,
      outcome: this.#outcome(),
      message: this.#stop.message,
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
                await slots.acquire(this.#o.signal);
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
              for (const entry of this.#plan.entries(step.id, this.#o.catalog)) {
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
    let instance = planned;
    const entry = this.#state.instances.get(planned.id);
    if (entry && entry.rerolls > 0) instance = rerolled(planned, entry.rerolls);
    try {
      const final = await this.#drive(step, adapter, instance, entry);
      if (final?.status === 'completed' && completions) completions.push({ instance: planned, outputs: final.outputs });
      if (final) this.#compact(planned.id);
    } catch (error) {
      if (error instanceof GenpipeError && error.code === 'aborted') return;
      throw error;
    }
  }

  /** Runs an instance to a final status (or gives up on it); returns the final result, if any. */
  async #drive(step: StepPlan, adapter: ModelAdapter, instance: PlannedInstance, entry: InstanceState | undefined): Promise<{ status: TerminalStatus; outputs: Record<string, unknown> } | undefined> {
    let action = resumeAction(entry, adapter.idempotentSubmit);
    if (action.kind === 'done' && entry?.final) {
      const final = entry.final;
      if (final.status === 'completed' && !(await this.#downloadAll(step, instance.id, final.outputs as OutputRef[], entry))) return undefined;
      this.#count(final.status);
      this.#estimatedUsd += step.priceUsd ?? 0;
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
        this.#emit({ type: 'instance_unknown', step: step.id, instance: instance.id, message: 'an earlier submit may or may not have reached the service; resubmit with --resubmit-unknown' });
        return undefined;
      }
      action = { kind: 'fresh' };
    }
    const script = this.#script(step);
    const conversation = step.model === 'agent' ? this.#conversationOf(step, instance) : undefined;
    const release = conversation === undefined ? undefined : await this.#lockConversation(conversation);
    try {
      let submission: Submission | undefined = action.kind === 'reattach' ? action.submission : undefined;
      let submittedAt = entry?.submittedAt ?? Date.now();
      if (!submission) {
        if (conversation !== undefined) script.sessionId = this.#state.sessions.get(conversation);
        const key = action.kind === 'resubmit_same_key' ? action.key : adapter.idempotentSubmit ? instance.key : undefined;
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
        if (attempt <= MAX_REROLLS && canReroll(instance)) {
          await this.#log({ type: 'reroll', instance: instance.id, attempt }, true);
          release?.();
          return this.#drive(step, adapter, rerolled(instance, 1), undefined);
        }
      }
      if (result.status === 'completed' && !(await this.#downloadAll(step, instance.id, result.files, this.#state.instances.get(instance.id)))) return undefined;
      this.#count(result.status);
      if (result.status !== 'completed') this.#noteFailure(step, instance.id);
      return { status: result.status, outputs: result.outputs };
    } finally {
      release?.();
    }
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
    await previous;
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
      this.#stopRun('budget', `Stopped before going over the budget of US$${budget.toFixed(2)} (US$${this.#estimatedUsd.toFixed(2)} committed).`);
      this.#counts.pending++;
      return undefined;
    }
    this.#estimatedUsd += price;
    const body = await this.#prepareBody(step, instance.body);
    const bodyHash = sha256Hex(JSON.stringify(body));
    const ctx = this.#ctx();
    const retries = step.step.retries ?? this.#plan.loaded.manifest.defaults?.retries ?? 3;
    let busyPolls = 0;
    for (let attempt = 0; ; attempt++) {
      await this.#bucket.take(this.#o.signal);
      crashPoint('before_intent_sync');
      await this.#log({ type: 'intent', instance: instance.id, model: step.model, idempotencyKey: key ?? null, bodyHash }, true);
      crashPoint('after_intent_sync');
      try {
        const submission = await adapter.submit(body, { idempotencyKey: key, script }, ctx);
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
        if (error.code === 'session_busy') {
          // Not charged (§7): wait for the running turn, then try again.
          await sleep(agentPollInterval(busyPolls++, BUSY_WAIT), this.#o.signal);
          attempt--;
          continue;
        }
        if (error.code === 'rate_limited') {
          // A 429 is a refusal before processing: slow the whole run down and try again.
          this.#bucket.slowDown(error.retryAfterMs);
          attempt--;
          continue;
        }
        // A keyed submit that kept failing in transit is safe to repeat with the same key.
        if (TRANSIENT.has(error.code) && key !== undefined && attempt < retries && this.#consumeRetry()) {
          await sleep(backoffDelay(attempt, { baseMs: 1_000, capMs: 30_000 }, this.#random), this.#o.signal);
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
      const url = await this.#o.client.media.uploadLocalImage(path, { signal: this.#o.signal });
      await this.#log({ type: 'uploaded', path, url }, true);
    }
    return locals.length === 0 ? body : mapImageFields(body, step.spec.imageFields, (v) => this.#state.uploads.get(v) ?? v);
  }

  #ctx(): AdapterContext {
    return { client: this.#o.client, signal: this.#o.signal, webhookUrl: this.#o.webhook?.url };
  }

  /**
   * Waits before the next look at a submission. With a webhook receiver, a request is looked at as
   * soon as its delivery arrives (to confirm it with a GET: a payload is never trusted), and
   * otherwise only by slow fallback polls.
   */
  async #waitForNews(submission: Submission, delayMs: number): Promise<void> {
    const receiver = this.#o.webhook;
    if (!receiver || submission.kind !== 'request') return sleep(delayMs, this.#o.signal);
    if (receiver.arrived(submission.requestId)) return;
    const done = new AbortController();
    const signal = AbortSignal.any([this.#o.signal, done.signal]);
    try {
      await Promise.race([sleep(Math.max(delayMs, WEBHOOK_FALLBACK_POLL_MS), signal).catch(() => {}), receiver.wait(submission.requestId, signal)]);
    } finally {
      done.abort();
    }
    if (this.#o.signal.aborted) throw abortError(this.#o.signal);
  }

  // -------------------------------------------------------------------------------------------
  // Tracking.

  async #track(step: StepPlan, adapter: ModelAdapter, instance: PlannedInstance, first: Submission, submittedAt: number, script: { replies?: readonly string[] | undefined; sessionId?: string | undefined }): Promise<Extract<TrackResult, { done: true }> | undefined> {
    let submission = first;
    const timer = this.#polls.start(step.model, submittedAt);
    const ctx = this.#ctx();
    for (let agentPolls = 0, failures = 0; ; ) {
      const delay = submission.kind === 'agent_turn' ? agentPollInterval(agentPolls++, this.#o.agentPoll ?? AGENT_POLL) : timer.next(Date.now());
      try {
        await this.#waitForNews(submission, delay);
      } catch (error) {
        if (this.#o.cancelOnAbort && adapter.stop) await adapter.stop(submission, { ...ctx, signal: AbortSignal.timeout(5_000) }).catch(() => {});
        else if (submission.kind === 'agent_turn' && adapter.stop) await adapter.stop(submission, { ...ctx, signal: AbortSignal.timeout(5_000) }).catch(() => {});
        throw error;
      }
      let result: TrackResult;
      try {
        result = await adapter.track(submission, script, ctx);
        this.#creditRetry();
      } catch (error) {
        if (!(error instanceof GenpipeError)) throw error;
        if (error.code === 'aborted') throw error;
        if (this.#credentialsRefused(error)) return undefined;
        if (TRANSIENT.has(error.code) && failures++ < 20 && this.#consumeRetry()) continue;
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
      this.#emit({ type: 'instance_finished', step: step.id, instance: instance.id, status: result.status, estimatedUsd: step.priceUsd, actualCostUsd: result.actualCostUsd, error: result.error });
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
      const name = safeFileName(id, extensionFor(file.url, accept), list.length > 1 ? { index } : {});
      const relativePath = `outputs/${safeFileName(step.id, 'd').replace(/\.d$/, '')}/${name}`;
      let result: Awaited<ReturnType<typeof downloadToFile>>;
      for (let failures = 0; ; ) {
        try {
          result = await downloadToFile({
            url: file.url,
            runDir: this.#o.runDir,
            relativePath,
            maxBytes: this.#o.maxDownloadBytes ?? 256 * 1024 * 1024,
            allowedContentTypes: accept.length > 0 ? accept : ['*/*'],
            dispatcher: this.#o.client.transport.dispatcher,
            signal: this.#o.signal,
          });
          this.#creditRetry();
          break;
        } catch (error) {
          if (!(error instanceof GenpipeError) || error.code === 'aborted') throw error;
          // A refusal (content type, size, unsafe path, a different existing file) would only repeat.
          const transient = TRANSIENT.has(error.code) && !(error instanceof DownloadError);
          if (transient && failures < 20 && this.#consumeRetry()) {
            await sleep(backoffDelay(failures++, { baseMs: 200, capMs: 10_000 }, this.#random), this.#o.signal);
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
    const status = entry.final?.status ?? (entry.failed ? 'failed' : entry.submission ? 'in_flight' : entry.intent ? 'unknown' : 'pending');
    const step = record?.step ?? id.replace(/\[.*$/, '');
    const axes = record?.values ?? '';
    if (!entry.downloads?.size) return csvRow([id, step, axes, requestId, status, '', '']);
    let rows = '';
    for (const d of entry.downloads.values()) rows += csvRow([id, step, axes, requestId, status, d.path, d.sha256]);
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

/** A re-rolled instance: the next variation_index (animal tiers) or seed, hence a new key. */
function rerolled(instance: PlannedInstance, times: number): PlannedInstance {
  const body = { ...(instance.body as Record<string, unknown>) };
  const human = ['normal', 'freak', 'total'].includes(String(body.tier ?? 'normal'));
  if (!human && typeof body.variation_index === 'number') body.variation_index += times;
  else if (typeof body.seed === 'number') body.seed = ((body.seed - 1 + times) % 1_000_000) + 1;
  else body.seed = times;
  return instance.withBody(body);
}

function canReroll(instance: PlannedInstance): boolean {
  const body = instance.body as Record<string, unknown> | null;
  return body !== null && typeof body === 'object';
}

const EXTENSIONS: Record<string, string> = { 'image/png': 'png', 'image/jpeg': 'jpg', 'image/webp': 'webp', 'video/mp4': 'mp4', 'video/webm': 'webm', 'video/quicktime': 'mov', 'audio/wav': 'wav', 'audio/x-wav': 'wav', 'audio/wave': 'wav', 'audio/mpeg': 'mp3', 'audio/mp4': 'm4a' };

/** The file's extension: the URL's when it is one the accepted types allow, else the first type's. */
function extensionFor(url: string, accept: readonly string[]): string {
  const fromUrl = /\.([a-z0-9]{2,5})$/i.exec(new URL(url).pathname)?.[1]?.toLowerCase();
  const allowed = new Set(accept.map((t) => EXTENSIONS[t]).filter((e): e is string => e !== undefined));
  if (fromUrl && (allowed.has(fromUrl) || (fromUrl === 'jpeg' && allowed.has('jpg')))) return fromUrl === 'jpeg' ? 'jpg' : fromUrl;
  return EXTENSIONS[accept[0] ?? ''] ?? 'bin';
}

