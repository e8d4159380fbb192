/**
 * When to poll a request next, learning from how long this model's requests took earlier in the
 * run (runner issue #5), instead of every 2 s like the official clients (architecture.md, peers).
 *
 * The learning rule:
 * - Per model, keep the last `window` observed durations (a bounded ring; recent ones matter most
 *   if the service speeds up or slows down during the run).
 * - Until `minSamples` durations are known: jittered exponential backoff from `baseMs` (1 s, 2 s,
 *   4 s… capped at `capMs`).
 * - Once they are known: aim the polls at the p60, p80, p90 and p99 of the durations, in turn,
 *   each pulled *earlier* by a random fraction up to `jitter`. Early, not symmetric: the only
 *   duration a poll can observe is "done by the time I looked", so polls that always land late
 *   would keep the estimate from ever learning that the service got faster. With early jitter,
 *   the estimate settles where about half the first polls find the request done.
 * - A target more than `capMs` away is approached in `capMs` steps (so a wrong estimate costs at
 *   most one cap of latency); a target passed already is skipped; after the last target,
 *   exponential backoff again from `baseMs`.
 * - Every delay lies in [floorMs, capMs]: never more often than the floor, never silent longer
 *   than the cap.
 */

export interface PollScheduleOptions {
  /** Shortest delay between two polls of one request, in ms. Default 500. */
  floorMs: number;
  /** First backoff delay, in ms. Default 1,000. */
  baseMs: number;
  /** Longest delay, in ms. Default 15,000. */
  capMs: number;
  /** Largest fraction a delay is shortened by at random, in [0, 1). Default 0.15. */
  jitter: number;
  /**
   * Quantiles of the observed durations that the polls aim at, ascending. Default p60, p80, p90,
   * p99: until 2026-11-26 p50, p75, p90, p99, which polled about 2.05 times a job where the issue's
   * budget (0.8x the official client's requests) leaves 2.0; these poll about 1.9 times for a
   * makespan about 1% longer (bench/polling.bench.mjs, and a simulation of its workload).
   */
  quantiles: readonly number[];
  /** Durations needed before the learned schedule is used. Default 3. */
  minSamples: number;
  /** How many recent durations are kept per model. Default 64: small enough to follow a service that speeds up or slows down within a run. */
  window: number;
}

export const DEFAULT_POLL_SCHEDULE: PollScheduleOptions = {
  floorMs: 500,
  baseMs: 1_000,
  capMs: 15_000,
  jitter: 0.15,
  quantiles: [0.6, 0.8, 0.9, 0.99],
  minSamples: 3,
  window: 64,
};

/** Fills in defaults and makes the options consistent (floor ≤ base ≤ cap, jitter in [0, 1)). */
export function resolvePollSchedule(options: Partial<PollScheduleOptions> = {}): PollScheduleOptions {
  const merged = { ...DEFAULT_POLL_SCHEDULE, ...options };
  const floorMs = Math.max(1, finiteOr(merged.floorMs, DEFAULT_POLL_SCHEDULE.floorMs));
  const capMs = Math.max(floorMs, finiteOr(merged.capMs, DEFAULT_POLL_SCHEDULE.capMs));
  const baseMs = Math.min(capMs, Math.max(floorMs, finiteOr(merged.baseMs, DEFAULT_POLL_SCHEDULE.baseMs)));
  const jitter = Math.min(0.99, Math.max(0, finiteOr(merged.jitter, DEFAULT_POLL_SCHEDULE.jitter)));
  const quantiles = [...new Set(merged.quantiles.filter((q) => q > 0 && q <= 1))].sort((a, b) => a - b);
  return {
    floorMs,
    baseMs,
    capMs,
    jitter,
    quantiles: quantiles.length > 0 ? quantiles : DEFAULT_POLL_SCHEDULE.quantiles,
    minSamples: Math.max(1, Math.floor(finiteOr(merged.minSamples, DEFAULT_POLL_SCHEDULE.minSamples))),
    window: Math.max(1, Math.min(100_000, Math.floor(finiteOr(merged.window, DEFAULT_POLL_SCHEDULE.window)))),
  };
}

function finiteOr(value: number, fallback: number): number {
  return Number.isFinite(value) ? value : fallback;
}

/** The last `window` durations of one model; quantiles by sorting a copy, cached until the next sample. */
export class DurationSummary {
  readonly #ring: number[] = [];
  readonly #window: number;
  #next = 0;
  #sorted: number[] | undefined;

  constructor(window: number = DEFAULT_POLL_SCHEDULE.window) {
    this.#window = Math.max(1, Math.floor(window));
  }

  get count(): number {
    return this.#ring.length;
  }

  observe(durationMs: number): void {
    if (!Number.isFinite(durationMs) || durationMs < 0) return;
    if (this.#ring.length < this.#window) this.#ring.push(durationMs);
    else this.#ring[this.#next] = durationMs;
    this.#next = (this.#next + 1) % this.#window;
    this.#sorted = undefined;
  }

  /** The q-quantile (nearest rank), or undefined with no samples. */
  quantile(q: number): number | undefined {
    this.#sorted ??= [...this.#ring].sort((a, b) => a - b);
    if (this.#sorted.length === 0) return undefined;
    const rank = Math.min(this.#sorted.length - 1, Math.max(0, Math.ceil(q * this.#sorted.length) - 1));
    return this.#sorted[rank];
  }
}

/** Where one request is in its schedule. */
export interface PollState {
  /** How many learned targets have been used. */
  stage: number;
  /** Backoff steps taken since the last target (or since submission, with nothing learned). */
  backoffAttempt: number;
}

export const INITIAL_POLL_STATE: PollState = { stage: 0, backoffAttempt: 0 };

/**
 * The next delay for a request that has been running `elapsedMs` and is not done yet.
 * `targetsMs` are the learned durations to aim at, ascending (empty when nothing is known);
 * `random` is in [0, 1). Pure: returns the delay and the state to pass next time.
 */
export function nextPollDelay(
  elapsedMs: number,
  state: PollState,
  targetsMs: readonly number[],
  options: PollScheduleOptions,
  random: number,
): { delayMs: number; state: PollState } {
  const { floorMs, capMs, jitter } = options;
  const clamp = (ms: number): number => Math.min(capMs, Math.max(floorMs, Math.round(ms)));
  const shorten = 1 - jitter * Math.min(Math.max(random, 0), 1);
  const elapsed = Math.max(0, elapsedMs);
  // Bounded by the number of targets.
  for (let stage = state.stage; stage < targetsMs.length; stage++) {
    const target = targetsMs[stage]!;
    if (target <= elapsed) continue; // passed already
    const wait = (target - elapsed) * shorten;
    // Far away: approach it in cap-sized steps without using it up.
    if (wait > capMs) return { delayMs: capMs, state: { stage, backoffAttempt: 0 } };
    return { delayMs: clamp(wait), state: { stage: stage + 1, backoffAttempt: 0 } };
  }
  const attempt = state.backoffAttempt;
  const ceiling = Math.min(capMs, options.baseMs * 2 ** Math.min(attempt, 52));
  return { delayMs: clamp(ceiling * shorten), state: { stage: Math.max(state.stage, targetsMs.length), backoffAttempt: attempt + 1 } };
}

/** A per-run scheduler: learns durations per model and hands out per-request poll timers. */
export class PollScheduler {
  readonly options: PollScheduleOptions;
  readonly #random: () => number;
  readonly #models = new Map<string, { summary: DurationSummary; targets: number[] | undefined }>();

  constructor(options: Partial<PollScheduleOptions> = {}, random: () => number = Math.random) {
    this.options = resolvePollSchedule(options);
    this.#random = random;
  }

  /** Records how long a request of `model` took (submission to observed completion), in ms. */
  observe(model: string, durationMs: number): void {
    const entry = this.#entry(model);
    entry.summary.observe(durationMs);
    entry.targets = undefined;
  }

  /**
   * Starts `model` from durations known before the run (its earlier runs, poll-prior.ts): the polls
   * aim at them from the first request; the run's own observations push them out of the window.
   */
  seed(model: string, durationsMs: readonly number[]): void {
    for (const d of durationsMs) this.observe(model, d);
  }

  /** The durations the polls aim at for `model`, ascending; empty until `minSamples` are known. */
  targets(model: string): readonly number[] {
    const entry = this.#entry(model);
    if (entry.summary.count < this.options.minSamples) return [];
    entry.targets ??= [...new Set(this.options.quantiles.map((q) => entry.summary.quantile(q)!))].sort((a, b) => a - b);
    return entry.targets;
  }

  /** Starts the schedule of one request submitted at `submittedAtMs`. */
  start(model: string, submittedAtMs: number): PollTimer {
    return new PollTimer(this, model, submittedAtMs);
  }

  /** @internal used by PollTimer */
  delay(model: string, elapsedMs: number, state: PollState): { delayMs: number; state: PollState } {
    return nextPollDelay(elapsedMs, state, this.targets(model), this.options, this.#random());
  }

  #entry(model: string): { summary: DurationSummary; targets: number[] | undefined } {
    let entry = this.#models.get(model);
    if (!entry) {
      entry = { summary: new DurationSummary(this.options.window), targets: undefined };
      this.#models.set(model, entry);
    }
    return entry;
  }
}

/** The schedule of one request. */
export class PollTimer {
  readonly model: string;
  readonly submittedAtMs: number;
  readonly #scheduler: PollScheduler;
  #state: PollState = INITIAL_POLL_STATE;
  #polls = 0;
  /** When the last poll that found the request unfinished happened (the submit, before any). */
  #lastMissMs: number;

  constructor(scheduler: PollScheduler, model: string, submittedAtMs: number) {
    this.#lastMissMs = submittedAtMs;
    this.#scheduler = scheduler;
    this.model = model;
    this.submittedAtMs = submittedAtMs;
  }

  /** Polls made so far (calls to `next`). */
  get polls(): number {
    return this.#polls;
  }

  /** The delay before the next poll, given the time now; call it once per poll. */
  next(nowMs: number): number {
    // Asked again: the previous poll found the request unfinished.
    if (this.#polls > 0) this.#lastMissMs = nowMs;
    const { delayMs, state } = this.#scheduler.delay(this.model, nowMs - this.submittedAtMs, this.#state);
    this.#state = state;
    this.#polls++;
    return delayMs;
  }

  /**
   * The request was seen final at `nowMs`: teach the scheduler its duration. A poll only shows that
   * the request ended between the last poll that missed and this one, so the midpoint is recorded.
   * Recording `nowMs` would teach the scheduler its own poll delays: at a service that answers at
   * once, it would keep aiming at yesterday's wait and never learn that requests got faster.
   * `exact`: the end was told as it happened (a webhook), so `nowMs` is the end. Returns the
   * duration recorded (the status record keeps it for later runs' priors).
   */
  complete(nowMs: number, exact = false): number {
    const durationMs = Math.round((exact ? nowMs : (this.#lastMissMs + nowMs) / 2) - this.submittedAtMs);
    this.#scheduler.observe(this.model, durationMs);
    return durationMs;
  }
}
