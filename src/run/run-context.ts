/**
 * The effects a run's parts share, and the only way they touch the world outside their own logic:
 * the run store (journal records, applied to the replayed state as they are written), events, the
 * stop signal, the submit-rate limiter, the budget, the retry budget, failure policies and the
 * watchdog's accounts of what is under way. The scheduler and the instance driver see the run only
 * through `RunEffects`, so a backend other than this process (the fleet) implements the same
 * interface instead of rewriting them.
 */
import { GenpipeError } from '../api/errors.js';
import type { Plan, StepPlan } from '../plan/plan.js';
import type { RunEvent, StopReason } from './events.js';
import type { JournalRecord, RecordedOptions } from './journal/journal-records.js';
import type { RateLimiter, RetryStatus } from './run-options.js';
import type { ResolvedRunOptions } from './resolved-options.js';
import type { ReuseIndex } from './attempt/reuse.js';
import { Spend } from './attempt/spend.js';
import { lostToThisRun } from './lock/lock.js';
import { RunFold, type PlannedStep } from './journal/run-fold.js';
import type { RunStore } from './journal/run-store.js';
import type { RunState } from './journal/run-state.js';
import { RouteLimiter } from './limits/route-limiter.js';
import { stepOfInstanceId } from '../plan/instance.js';
import type { RunSummaryWriter } from './files/run-summary.js';

export interface RunEffects {
  /** The options of this start and what it is wired to, every default applied once (resolved-options.ts). */
  readonly settings: ResolvedRunOptions;
  readonly plan: Plan;
  /** The replayed state, kept in step with every record written. */
  readonly state: RunState;
  /**
   * The run's journal folded as the report folds it (run-fold.ts): what it held at this start, and
   * every record this start wrote since. The summary's counts and money are read here.
   */
  readonly fold: RunFold;
  /** What every wait and request of the run listens to: Ctrl-C, or the watchdog's halt. */
  readonly signal: AbortSignal;
  readonly limiter: RateLimiter;
  /** The per-route limiter every request of the run goes through: a 429 slows its own route (route-limiter.ts). */
  readonly routes: RouteLimiter;
  /** True once the run stops submitting (a policy, the credentials, an abort). */
  readonly stopping: boolean;
  /** The run's money: what is committed over its whole life, and its budget (spend.ts). */
  readonly spend: Spend;
  /** What this start records of its options, and a resume inherits (settings.recorded). */
  readonly recorded: RecordedOptions;
  /** `--retry` selection in force (given, or inherited with its round). */
  readonly retry: ReadonlySet<RetryStatus>;
  /** Earlier runs' results to reuse, when the run reuses. */
  readonly reuse: ReuseIndex | undefined;
  /** Failures so far, for `max_failures`. */
  failures: number;
  /** Rejected instances `--retry rejected` could not make again (an agent turn, no such instance): the run ends failed (exit 1). */
  notRemade: number;
  /** Journals a record (synced when `durable`) and applies it to the state. */
  log(record: JournalRecord, durable?: boolean): Promise<void>;
  emit(event: RunEvent): void;
  stopRun(reason: StopReason, message: string): void;
  /** An operation that settles by itself (a request, a sleep, a write), counted for the watchdog. */
  op<T>(work: () => Promise<T>): Promise<T>;
  /** A wait on another part of the run (a limiter, a slot, a conversation), named for the watchdog. */
  wait<T>(what: string, work: () => Promise<T>): Promise<T>;
  /** The fencing check before a spending request: false once another process holds the run (nothing more may be sent or written). */
  fenced(): Promise<boolean>;
  /** True once the run was displaced: it writes nothing more to its directory. */
  readonly displaced: boolean;
  /** Takes one retry from the run's budget; false (and the run stops) once it is spent. */
  consumeRetry(): boolean;
  /** A success earns one retry back, up to the budget. */
  creditRetry(): void;
  /** Retries left in the run's budget. */
  readonly retriesLeft: number;
  /** A submit's 2xx answer was not the service's (a protocol error): three in a row stop the run (exit 5). */
  protocolAnswer(): void;
  /** A submit the service answered in its own shape: the run of protocol errors starts again from zero. */
  serviceAnswered(): void;
  /** A 401: the run stops, resumable, and ends with this sentence; true when it handled the error. */
  credentialsRefused(error: GenpipeError): boolean;
  /** A final status other than completed, for the failure policies. */
  noteFailure(step: StepPlan, id: string): void;
  /** An instance failed here (not at the service): counted, journaled, told. */
  fail(step: StepPlan, id: string, code: string, message: string): void;
  /**
   * A completed instance's files could not all be fetched (`permanent`: refused, journaled as a
   * failure, counted for the failure policies; else left for a resume): told, and counted apart
   * from the status counts, which say what the service did, as the report does.
   */
  filesMissing(step: StepPlan, id: string, code: string, message: string, permanent: boolean): void;
  /** A completed instance's files could not all be uploaded to its sink: they stay on disk, pending (told, counted). */
  uploadPending(step: StepPlan, id: string, message: string): void;
  /**
   * A completed instance's files met other objects at their keys in its sink (`on_conflict: fail`):
   * nothing overwritten, the files stay on disk (told, counted apart; the run exits 1).
   */
  uploadConflict(step: StepPlan, id: string, keys: readonly string[]): void;
  /** Why an upload failed for good in this run, once one did. */
  readonly uploadProblem: string | undefined;
  /** True when this start resumes a run (its journal had records before). */
  readonly resumed: boolean;
}

/** Submit answers in a row that are not the service's after which the run stops (a wrong base URL, most likely). */
export const PROTOCOL_ANSWERS_TO_STOP = 3;

/** The local backend's effects: a journal on disk, in-process limits and counters. */
export class RunContext implements RunEffects {
  readonly fold: RunFold;
  readonly limiter: RateLimiter;
  readonly routes = new RouteLimiter();
  readonly signal: AbortSignal;
  /** Aborted when the watchdog finds the run stuck: every wait of the run ends, as on Ctrl-C. */
  readonly halt = new AbortController();
  readonly spend: Spend;
  readonly recorded: RecordedOptions;
  readonly retry: ReadonlySet<RetryStatus>;
  failures = 0;
  notRemade = 0;
  /** Records about an instance this start wrote: none means it changed nothing. */
  instanceRecords = 0;
  /** Completed instances whose files could not all be fetched, and the first reason. */
  missingFiles = 0;
  missingReason: string | undefined;
  /** Completed instances whose files are not all in their sink, and the first reason. */
  uploadsPending = 0;
  uploadProblem: string | undefined;
  /** Objects in a sink with other bytes than an output of this run, at its key: none overwritten. */
  uploadConflicts = 0;
  /** Why and how the run stopped early, when it did. */
  stopReason: StopReason | undefined;
  stopMessage: string | undefined;
  /** Set when the service refused the credentials: the run stops and runPlan throws it (exit 5). */
  refused: GenpipeError | undefined;
  /** Operations under way that settle by themselves (requests, sleeps, file writes). */
  busy = 0;
  /** Bumped whenever a busy operation starts or ends: the watchdog's measure of progress. */
  progress = 0;
  /** Waits on another part of the run, by what they wait for. */
  readonly waits = new Map<string, number>();
  #retriesLeft: number;
  /** Submit answers in a row that were not the service's. */
  #protocolAnswers = 0;
  /** No more spending: the lock was lost. */
  #fencedOut = false;
  /** No more writing either: another process writes this run now. */
  #displaced = false;
  /** The fencing check of the latest append: each append's check waits for the one before. */
  #fenceChain: Promise<unknown> = Promise.resolve();
  /** summary.json's writer (a view), told each record once the journal holds it. */
  #summary: RunSummaryWriter | undefined;

  constructor(
    readonly store: RunStore,
    /** The options of this start and what it is wired to, every default applied once (resolved-options.ts). */
    readonly settings: ResolvedRunOptions,
    readonly reuse: ReuseIndex | undefined,
    committedUsd: number,
  ) {
    this.limiter = settings.limiter;
    this.signal = AbortSignal.any([settings.signal, this.halt.signal]);
    this.#retriesLeft = settings.retryBudget;
    this.spend = new Spend(settings.budgetUsd, committedUsd);
    this.recorded = settings.recorded;
    this.retry = settings.retry;
    // The journal as this start found it: the records this start writes are folded in as they are written.
    this.fold = RunFold.of(store.state, plannedSteps(settings.plan));
    const fence = settings.fence;
    if (fence) {
      if (fence.signal.aborted) this.#lostLock(fence.signal.reason);
      else fence.signal.addEventListener('abort', () => this.#lostLock(fence.signal.reason), { once: true });
    }
  }

  get displaced(): boolean {
    return this.#displaced;
  }

  /** Tells `writer` every record from now on, once written (runner.ts sets it before the run's first record). */
  set summary(writer: RunSummaryWriter | undefined) {
    this.#summary = writer;
    if (this.#displaced) writer?.stop();
  }

  /**
   * The lock is another run's now: this run spends nothing more. When that is this very run (a
   * resume that took it over) or nobody can tell, it also writes nothing more to its directory; a
   * new run of the pipeline that broke the lock leaves this run's directory to this run.
   */
  #lostLock(reason: unknown): void {
    this.#fencedOut = true;
    if (lostToThisRun(reason, this.settings.runId)) {
      this.#displaced = true;
      this.#summary?.stop();
    }
  }

  async fenced(): Promise<boolean> {
    if (this.#fencedOut) return false;
    const fence = this.settings.fence;
    if (fence && !(await fence.check())) this.#lostLock(fence.signal.reason);
    return !this.#fencedOut;
  }

  get plan(): Plan {
    return this.settings.plan;
  }

  get state(): RunState {
    return this.store.state;
  }

  log(record: JournalRecord, durable = false): Promise<void> {
    // One writer per run: a displaced holder appends nothing more (the new holder owns the journal).
    if (this.#displaced) return Promise.resolve();
    if (!this.settings.fence) return this.#append(record, durable);
    // Fenced before every append, not only before a spend: a holder paused past the stale period
    // and taken over (its heartbeat has not seen it yet) writes nothing once it wakes. The checks
    // are chained, so records keep the order they were logged in; within the lock's lease a check
    // answers from memory.
    const fenced = this.#fenceChain.then(() => this.fenced());
    this.#fenceChain = fenced.catch(() => undefined);
    return this.op(async () => {
      await fenced;
      if (!this.#displaced) await this.#append(record, durable);
    });
  }

  #append(given: JournalRecord, durable: boolean): Promise<void> {
    // A start's and an end's time are stamped here rather than by the journal, so that the
    // summary says the very times the journal holds.
    const record =
      (given.type === 'run_started' || given.type === 'run_finished') && given.at === undefined ? { ...given, at: Date.now() } : given;
    const instance = (record as { instance?: unknown }).instance;
    if (typeof instance !== 'string') return this.store.append(record, durable).then(() => this.#summary?.journaled(record));
    this.instanceRecords++;
    // Once written, the record is folded and told: the summary and the views fold what the journal holds, never more.
    return this.store.append(record, durable).then(() => {
      this.fold.apply(record);
      this.#summary?.journaled(record);
      this.emit({ type: 'instance_journaled', step: stepOfInstanceId(instance), instance, record });
    });
  }

  emit(event: RunEvent): void {
    this.settings.onEvent(event);
  }

  stopRun(reason: StopReason, message: string): void {
    if (this.stopReason) return;
    this.stopReason = reason;
    this.stopMessage = message;
    this.emit({ type: 'run_stopping', reason, message });
  }

  get stopping(): boolean {
    return this.stopReason !== undefined || this.refused !== undefined || this.signal.aborted;
  }

  op<T>(work: () => Promise<T>): Promise<T> {
    this.busy++;
    this.progress++;
    return work().finally(() => {
      this.busy--;
      this.progress++;
    });
  }

  wait<T>(what: string, work: () => Promise<T>): Promise<T> {
    this.waits.set(what, (this.waits.get(what) ?? 0) + 1);
    return work().finally(() => {
      const left = (this.waits.get(what) ?? 1) - 1;
      if (left === 0) this.waits.delete(what);
      else this.waits.set(what, left);
    });
  }

  get retriesLeft(): number {
    return this.#retriesLeft;
  }

  creditRetry(): void {
    if (this.#retriesLeft < this.settings.retryBudget) this.#retriesLeft++;
  }

  consumeRetry(): boolean {
    if (this.#retriesLeft <= 0) {
      this.stopRun(
        'retry_budget',
        'The service kept failing, so the run stopped instead of retrying without end; resume it once the service is back.',
      );
      return false;
    }
    this.#retriesLeft--;
    return true;
  }

  protocolAnswer(): void {
    if (++this.#protocolAnswers < PROTOCOL_ANSWERS_TO_STOP) return;
    this.stopRun(
      'protocol',
      `${PROTOCOL_ANSWERS_TO_STOP} submits in a row got answers that are not the Generation Service's, so the run stopped sending: check the base URL (GENPIPE_BASE_URL, or base_url in the config), then \`genpipe resume\`.`,
    );
  }

  serviceAnswered(): void {
    this.#protocolAnswers = 0;
  }

  credentialsRefused(error: GenpipeError): boolean {
    if (error.code !== 'unauthorized') return false;
    this.refused ??= new GenpipeError(
      'unauthorized',
      `${error.message.replace(/[.]$/, '')}; the run stopped, and \`genpipe resume\` continues it once the credentials are fixed.`,
    );
    return true;
  }

  noteFailure(step: StepPlan, id: string): void {
    this.failures++;
    const defaults = this.plan.loaded.manifest.defaults;
    if (this.settings.failFastSteps.has(step.id))
      this.stopRun('fail_fast', `Stopped at the first failure (${id}); resume after fixing it.`);
    const max = defaults?.max_failures;
    if (max !== undefined && this.failures >= max)
      this.stopRun('max_failures', `Stopped after ${this.failures} failures (max_failures ${max}).`);
  }

  get resumed(): boolean {
    return !this.store.created;
  }

  filesMissing(step: StepPlan, id: string, code: string, message: string, permanent: boolean): void {
    this.missingFiles++;
    this.missingReason ??= message;
    this.emit({ type: 'instance_failed', step: step.id, instance: id, code, message, completed: true });
    if (!permanent) return;
    void this.log({ type: 'failed', instance: id, code, message }).catch(() => {});
    this.noteFailure(step, id);
  }

  uploadPending(step: StepPlan, id: string, message: string): void {
    this.uploadsPending++;
    this.uploadProblem ??= message;
    this.emit({
      type: 'instance_failed',
      step: step.id,
      instance: id,
      code: 'upload_pending',
      message: `${message} (the files stay on disk; \`genpipe resume\` uploads them)`,
      completed: true,
    });
  }

  uploadConflict(step: StepPlan, id: string, keys: readonly string[]): void {
    this.uploadConflicts += keys.length;
    this.emit({
      type: 'instance_failed',
      step: step.id,
      instance: id,
      code: 'upload_conflict',
      message: `another object is at ${keys.join(', ')}, with other bytes: not overwritten (the file stays on disk)`,
      completed: true,
    });
  }

  fail(step: StepPlan, id: string, code: string, message: string): void {
    this.emit({ type: 'instance_failed', step: step.id, instance: id, code, message });
    void this.log({ type: 'failed', instance: id, code, message }).catch(() => {});
    this.noteFailure(step, id);
  }
}

/** The plan's steps as a fold counts them: how many instances each has, its price and its model. */
export function plannedSteps(plan: Plan): PlannedStep[] {
  return plan.steps.map((s) => ({ id: s.id, count: s.count, priceUsd: s.priceUsd, model: s.model }));
}
