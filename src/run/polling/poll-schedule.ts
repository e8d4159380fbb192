/**
 * When to poll a request next, learning from how long this model's requests took, to
 * notice each end soon with fewer requests, instead of every 2 s like the official clients (architecture.md, peers).
 *
 * The rule:
 * - Per model, keep the last `window` observed durations (a bounded ring; recent ones matter most
 *   if the service speeds up or slows down during the run).
 * - A request budget per job: `requestShare` (0.8) of the requests the official client would make
 *   for the durations the samples predict (a submit, a status poll at once and then every
 *   `officialIntervalMs`, a download), less the submit and the download genpipe makes too. What is
 *   left is B, the status polls a job may make on average (about 2 for sheets of 1.7-4.4 s); the
 *   plans aim at all of it (BUDGET_USE).
 * - Poll times t1 < t2 < … < tk chosen for those durations (planPolls): the ones that minimise the
 *   expected lateness, (first poll at or after the end) − (the end), while the expected number of
 *   polls (a poll at t_i is made only if the request was not done at t_{i−1}) is at most B. A
 *   dynamic program over candidate times (the estimate's points, the floor, and fillers every
 *   cap), with a Lagrange multiplier on the polls found by bisection. The two plans either
 *   side of the budget are mixed, each request drawing one, so the budget is spent in full rather
 *   than up to the last breakpoint below it. Computed once per model when its samples changed, on
 *   the first delay asked for after, and cached; made again every REPLAN_EVERY observations.
 * - The durations are learned as what the polls saw, intervals (last miss, hit], and estimated as
 *   interval-censored data (intervalDistribution), not as midpoints; requests still running count
 *   as ending after their last miss, so the first (shortest) durations learned do not stand for all.
 * - What requests seen done spent beyond the budget (the cold backoff, early jitter, an estimate
 *   that was off) is paid back over the next requests' plans (SPEND_HORIZON), and what they left
 *   unspent is spent, so the run as a whole meets B.
 * - Until `minSamples` durations are known: the model's documented duration range (a uniform
 *   prior over it, ModelDefinition.documentedDurationMs) when the spec documents one, else
 *   jittered exponential backoff from `baseMs` (1 s, 2 s, 4 s… capped at `capMs`). The spec
 *   (2.0.0) documents no durations for any model, so today every model starts from the backoff.
 * - Each delay towards a planned time is pulled *earlier* by a random fraction up to `jitter`
 *   (but never so early that the next planned time is more than a cap away). Early, not symmetric: the only duration a poll can observe is "done by the time I looked", so
 *   polls that always land late would keep the estimate from ever learning that the service got
 *   faster.
 * - A planned time more than `capMs` away is approached in `capMs` steps (so a wrong estimate
 *   costs at most one cap of latency); a planned time passed already is skipped; after the last,
 *   exponential backoff again from `baseMs` (the tail: longer than every sample).
 * - Every delay lies in [floorMs, capMs]: never more often than the floor, never silent longer
 *   than the cap.
 */
import { definitionOf } from '../../models/registry.js';

/** A model's documented duration range, [shortest, longest] in ms, or undefined. */
export type DocumentedDurations = (model: string) => readonly [number, number] | undefined;

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
   * Durations needed before the learned schedule is used. Default 1: a run's first wave waits on
   * the cold backoff (polls at 1 s, 3 s, 7 s…) until then, and the first end seen, with the
   * requests still running counted as ending after their last miss, already places the next polls
   * better than the backoff (in a simulation of the polling benchmark's workload, 40 seeded runs,
   * 1 took a first run from 1.178x to 1.168x of the jobs seen done at once; 3 was the default).
   */
  minSamples: number;
  /** How many recent durations are kept per model. Default 64: small enough to follow a service that speeds up or slows down within a run. */
  window: number;
  /** The share of the official client's requests a job may use. Default 0.8, the polling benchmark's budget. */
  requestShare: number;
  /** How often the official client polls, in ms (it polls at once, then every interval). Default 2,000. */
  officialIntervalMs: number;
  /** Requests of a job besides its status polls, made by both clients (a submit, a download). Default 2. */
  overheadRequests: number;
  /** A model's documented duration range, the first polls' prior. Default: the model definition's. */
  documented: DocumentedDurations;
}

export const DEFAULT_POLL_SCHEDULE: PollScheduleOptions = {
  floorMs: 500,
  baseMs: 1_000,
  capMs: 15_000,
  jitter: 0.15,
  minSamples: 1,
  window: 64,
  requestShare: 0.8,
  officialIntervalMs: 2_000,
  overheadRequests: 2,
  documented: (model) => definitionOf(model)?.documentedDurationMs,
};

/** Fills in defaults and makes the options consistent (floor ≤ base ≤ cap, jitter in [0, 1)). */
export function resolvePollSchedule(options: Partial<PollScheduleOptions> = {}): PollScheduleOptions {
  const merged = { ...DEFAULT_POLL_SCHEDULE, ...options };
  const d = DEFAULT_POLL_SCHEDULE;
  const floorMs = Math.max(1, finiteOr(merged.floorMs, d.floorMs));
  const capMs = Math.max(floorMs, finiteOr(merged.capMs, d.capMs));
  const baseMs = Math.min(capMs, Math.max(floorMs, finiteOr(merged.baseMs, d.baseMs)));
  const jitter = Math.min(0.99, Math.max(0, finiteOr(merged.jitter, d.jitter)));
  return {
    floorMs,
    baseMs,
    capMs,
    jitter,
    minSamples: Math.max(1, Math.floor(finiteOr(merged.minSamples, d.minSamples))),
    window: Math.max(1, Math.min(100_000, Math.floor(finiteOr(merged.window, d.window)))),
    requestShare: Math.max(0, finiteOr(merged.requestShare, d.requestShare)),
    officialIntervalMs: Math.max(1, finiteOr(merged.officialIntervalMs, d.officialIntervalMs)),
    overheadRequests: Math.max(0, finiteOr(merged.overheadRequests, d.overheadRequests)),
    documented: typeof merged.documented === 'function' ? merged.documented : d.documented,
  };
}

function finiteOr(value: number, fallback: number): number {
  return Number.isFinite(value) ? value : fallback;
}

/** A duration as the polls saw it: the end lay in (lo, hi] ms after the submission; lo = hi when it was told exactly. */
export interface SeenDuration {
  lo: number;
  hi: number;
}

/**
 * The last `window` durations of one model, each as what a poll saw: the end lay in (lo, hi] (lo
 * the last poll that missed, hi the one that saw it; lo = hi when the end was told exactly).
 */
export class DurationSummary {
  readonly #ring: SeenDuration[] = [];
  readonly #window: number;
  #next = 0;
  #sorted: number[] | undefined;

  constructor(window: number = DEFAULT_POLL_SCHEDULE.window) {
    this.#window = Math.max(1, Math.floor(window));
  }

  get count(): number {
    return this.#ring.length;
  }

  /** A duration known exactly (a webhook, an earlier run's record). */
  observe(durationMs: number): void {
    this.observeInterval(durationMs, durationMs);
  }

  /** A duration known to lie in (loMs, hiMs]. */
  observeInterval(loMs: number, hiMs: number): void {
    if (!Number.isFinite(loMs) || !Number.isFinite(hiMs) || hiMs < 0) return;
    const entry = { lo: Math.min(Math.max(0, loMs), hiMs), hi: hiMs };
    if (this.#ring.length < this.#window) this.#ring.push(entry);
    else this.#ring[this.#next] = entry;
    this.#next = (this.#next + 1) % this.#window;
    this.#sorted = undefined;
  }

  /** The kept intervals (in no particular order). */
  intervals(): readonly SeenDuration[] {
    return this.#ring;
  }

  /** The kept durations' midpoints, ascending. */
  sorted(): readonly number[] {
    this.#sorted ??= this.#ring.map((e) => (e.lo + e.hi) / 2).sort((a, b) => a - b);
    return this.#sorted;
  }

  /** The q-quantile of the midpoints (nearest rank), or undefined with no samples. */
  quantile(q: number): number | undefined {
    const sorted = this.sorted();
    if (sorted.length === 0) return undefined;
    const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
    return sorted[rank];
  }
}

/** Points of the uniform prior over a documented range. */
export const PRIOR_POINTS = 64;
/** At most this many points (and candidate poll times) enter a plan. */
const MAX_PLAN_POINTS = 192;
/** At most this many filler candidates (every cap across a stretch with no mass). */
const MAX_FILLERS = 64;
/** A cell of the estimated distribution is split into parts of about this width, so polls may aim inside it. */
const PART_MS = 100;
/**
 * Self-consistency (EM) steps of the interval estimate, from a uniform density. Few on purpose: run
 * to convergence, the estimate piles each interval's mass into the narrow cells beside the poll
 * times, and plans made for it expect far less lateness and fewer polls than they get (in a
 * simulation of the polling benchmark's workload, 150 steps spent 0.83x the official client's
 * requests where 3 spent 0.80x, for no shorter makespan).
 */
const EM_STEPS = 3;
/** Bisection steps on the Lagrange multiplier (log scale, LAMBDA_MIN to LAMBDA_MAX ms per poll). */
const LAMBDA_STEPS = 32;
const LAMBDA_MIN = 1e-6;
const LAMBDA_MAX = 1e12;

/**
 * A duration distribution as a plan sees it: probability `weights` at `points` (ascending, summing
 * to 1), and the times a poll may be planned at (`candidates`, ascending).
 */
export interface DurationDistribution {
  points: readonly number[];
  weights: readonly number[];
  candidates: readonly number[];
}

/** Equal weights on the durations themselves, each a candidate poll time (at most MAX_PLAN_POINTS of them, evenly by rank). */
export function pointDistribution(samplesMs: readonly number[]): DurationDistribution | undefined {
  const clean = samplesMs.filter((d) => Number.isFinite(d) && d >= 0).sort((a, b) => a - b);
  if (clean.length === 0) return undefined;
  const points =
    clean.length <= MAX_PLAN_POINTS
      ? clean
      : Array.from({ length: MAX_PLAN_POINTS }, (_, i) => clean[Math.floor(((i + 0.5) * clean.length) / MAX_PLAN_POINTS)]!);
  return { points, weights: points.map(() => 1 / points.length), candidates: [...new Set(points.map((d) => Math.round(d)))] };
}

/** The durations a plan is made for before any is seen: evenly over a documented range. */
export function documentedSamples(range: readonly [number, number]): number[] {
  const lo = Math.max(0, Math.min(range[0], range[1]));
  const hi = Math.max(lo, range[0], range[1]);
  return Array.from({ length: PRIOR_POINTS }, (_, i) => lo + ((hi - lo) * (i + 0.5)) / PRIOR_POINTS);
}

/**
 * A documented range as a plan sees it: uniform, PRIOR_POINTS parts, each a point at its middle
 * and a candidate poll time at its end (so the longest documented duration is one).
 */
export function documentedDistribution(range: readonly [number, number]): DurationDistribution {
  const lo = Math.max(0, Math.min(range[0], range[1]));
  const hi = Math.max(lo, range[0], range[1]);
  const width = (hi - lo) / PRIOR_POINTS;
  return {
    points: documentedSamples([lo, hi]),
    weights: Array.from({ length: PRIOR_POINTS }, () => 1 / PRIOR_POINTS),
    candidates: [...new Set(Array.from({ length: PRIOR_POINTS }, (_, i) => Math.round(lo + width * (i + 1))))],
  };
}

/**
 * The distribution of durations seen as intervals (lo, hi]: EM_STEPS steps of Turnbull's
 * self-consistency iteration for interval-censored data (towards the nonparametric
 * maximum-likelihood estimate) on the cells between the intervals' ends, from a uniform density,
 * uniform within each cell. A poll's midpoint would put a request seen at its first poll at half
 * that poll's time, long before any request ends; this moves that mass towards where the other
 * intervals put theirs. An exact duration d counts as (d − 1, d]. Bounded: at most 2 × window cell
 * ends, EM_STEPS steps of O(intervals + cells).
 */
export function intervalDistribution(intervals: readonly SeenDuration[]): DurationDistribution | undefined {
  const obs = intervals
    .filter((e) => Number.isFinite(e.lo) && Number.isFinite(e.hi) && e.hi >= 0)
    .map((e) => {
      const hi = Math.round(e.hi);
      return { lo: Math.min(Math.max(0, Math.round(e.lo)), hi - 1), hi };
    });
  if (obs.length === 0) return undefined;
  const ends = [...new Set(obs.flatMap((e) => [e.lo, e.hi]))].sort((a, b) => a - b);
  const index = new Map(ends.map((t, i) => [t, i]));
  // Cell k (1..K) is (ends[k − 1], ends[k]]; an interval covers cells a..b.
  const cells = ends.length - 1;
  const span = obs.map((e) => ({ a: index.get(e.lo)! + 1, b: index.get(e.hi)! }));
  // From a uniform density over the span: the first step spreads each interval evenly over it.
  let p = new Float64Array(cells + 1);
  for (let k = 1; k <= cells; k++) p[k] = (ends[k]! - ends[k - 1]!) / (ends[cells]! - ends[0]!);
  const prefix = new Float64Array(cells + 1);
  const acc = new Float64Array(cells + 2);
  for (let step = 0; step < EM_STEPS; step++) {
    for (let k = 1; k <= cells; k++) prefix[k] = prefix[k - 1]! + p[k]!;
    acc.fill(0);
    for (const { a, b } of span) {
      const mass = prefix[b]! - prefix[a - 1]!;
      if (mass <= 0) continue;
      acc[a] = acc[a]! + 1 / mass;
      acc[b + 1] = acc[b + 1]! - 1 / mass;
    }
    const next = new Float64Array(cells + 1);
    let run = 0;
    let total = 0;
    for (let k = 1; k <= cells; k++) {
      run += acc[k]!;
      next[k] = (p[k]! * run) / obs.length;
      total += next[k]!;
    }
    if (!(total > 0)) break;
    for (let k = 1; k <= cells; k++) next[k] = next[k]! / total;
    p = next;
  }
  // Cells with mass, each split into parts of about PART_MS, within MAX_PLAN_POINTS parts in all.
  const massive: number[] = [];
  for (let k = 1; k <= cells; k++) if (p[k]! > 1e-6) massive.push(k);
  const width = massive.reduce((sum, k) => sum + (ends[k]! - ends[k - 1]!), 0);
  const partMs = Math.max(PART_MS, width / Math.max(1, MAX_PLAN_POINTS - massive.length));
  const points: number[] = [];
  const weights: number[] = [];
  const candidates = new Set<number>();
  let kept = 0;
  for (const k of massive) kept += p[k]!;
  for (const k of massive) {
    const lo = ends[k - 1]!;
    const w = ends[k]! - lo;
    const parts = Math.max(1, Math.min(MAX_PLAN_POINTS, Math.floor(w / partMs)));
    for (let j = 0; j < parts; j++) {
      points.push(lo + (w * (j + 0.5)) / parts);
      weights.push(p[k]! / kept / parts);
      candidates.add(Math.round(lo + (w * (j + 1)) / parts));
    }
  }
  return { points, weights, candidates: [...candidates].sort((a, b) => a - b) };
}

/**
 * B, the status polls a job may make on average: `requestShare` of the official client's requests
 * for these durations (a submit, a poll at once and one every `officialIntervalMs` until the end, a
 * download), less the submit and the download.
 */
export function pollBudget(dist: DurationDistribution, options: PollScheduleOptions): number {
  let official = 0;
  dist.points.forEach((d, i) => (official += dist.weights[i]! * (1 + Math.ceil(Math.max(0, d) / options.officialIntervalMs))));
  return Math.max(0, options.requestShare * (options.overheadRequests + official) - options.overheadRequests);
}

/** Polls and lateness of one request of duration `d` in the tail: backoff from `fromMs` (no jitter). */
function tailOf(fromMs: number, d: number, options: PollScheduleOptions): { polls: number; lateMs: number } {
  let t = fromMs;
  let polls = 0;
  // Bounded: the doubling phase takes at most 53 steps; at the cap the rest is counted at once.
  for (let attempt = 0; t < d; attempt++) {
    const delay = Math.min(options.capMs, Math.max(options.floorMs, options.baseMs * 2 ** Math.min(attempt, 52)));
    if (delay >= options.capMs) {
      const steps = Math.ceil((d - t) / options.capMs);
      return { polls: polls + steps, lateMs: t + steps * options.capMs - d };
    }
    t += delay;
    polls++;
  }
  return { polls, lateMs: t - d };
}

/**
 * How poll times fare on durations `samplesMs`, per request on average: the status polls made (a
 * poll at t_i only if the request was not done at t_{i−1}, the tail's backoff after the last) and
 * the lateness, (the poll that sees the end) − (the end). No jitter.
 */
export function evaluatePlan(
  timesMs: readonly number[],
  samplesMs: readonly number[],
  options: PollScheduleOptions,
): { polls: number; latenessMs: number } {
  if (samplesMs.length === 0) return { polls: 0, latenessMs: 0 };
  let polls = 0;
  let late = 0;
  for (const d of samplesMs) {
    const i = timesMs.findIndex((t) => t >= d);
    if (i >= 0) {
      polls += i + 1;
      late += timesMs[i]! - d;
    } else {
      const tail = tailOf(timesMs.at(-1) ?? 0, d, options);
      polls += timesMs.length + tail.polls;
      late += tail.lateMs;
    }
  }
  return { polls: polls / samplesMs.length, latenessMs: late / samplesMs.length };
}

/** A model's poll plan: two schedules either side of the budget, and the share of requests that take the denser. */
export interface PollPlan {
  /** The planned poll times (elapsed ms), ascending, of the sparser schedule. */
  timesMs: readonly number[];
  /** The denser schedule (the same as `timesMs` when the budget does not bind or cannot be met). */
  denserMs: readonly number[];
  /** The share of requests that follow `denserMs`, in [0, 1]: the mix spends the budget exactly. */
  denserShare: number;
  /** B for these durations (pollBudget). */
  budgetPolls: number;
  /** Status polls per request the mix expects on these durations (no jitter). */
  expectedPolls: number;
  /** Lateness per request the mix expects on these durations, in ms (no jitter). */
  expectedLatenessMs: number;
}

interface Grid {
  /** Candidate poll times; c[0] = 0 is the submission. */
  c: number[];
  /** Probability done by c[j] (0 at the submission: the first poll is always made). */
  done: number[];
  /** Sum of weight × duration of the points done by c[j]. */
  doneSum: number[];
  tailPolls: number[];
  tailLate: number[];
}

function gridFor(dist: DurationDistribution, options: PollScheduleOptions): Grid {
  const { floorMs, capMs } = options;
  const times = new Set([floorMs]);
  let prev = 0;
  let fillers = 0;
  // Bounded: each candidate once, and at most MAX_FILLERS fillers.
  for (const t of dist.candidates) {
    if (t <= floorMs) continue;
    // Across a stretch longer than the cap, every cap back from t (so t itself stays reachable).
    const needed = Math.ceil((t - prev) / capMs) - 1;
    if (fillers + needed > MAX_FILLERS) break; // out of fillers: the tail's backoff covers the rest
    for (let j = needed; j >= 1; j--) times.add(t - j * capMs);
    fillers += needed;
    times.add(t);
    prev = t;
  }
  const c = [0, ...[...times].sort((x, y) => x - y)];
  const { points, weights } = dist;
  const done = [0];
  const doneSum = [0];
  let i = 0;
  let w = 0;
  let ws = 0;
  for (let j = 1; j < c.length; j++) {
    for (; i < points.length && points[i]! <= c[j]!; i++) {
      w += weights[i]!;
      ws += weights[i]! * points[i]!;
    }
    done.push(w);
    doneSum.push(ws);
  }
  const tailPolls: number[] = [];
  const tailLate: number[] = [];
  for (let j = 0; j < c.length; j++) {
    let polls = 0;
    let late = 0;
    for (let s = 0; s < points.length; s++) {
      if (j > 0 && points[s]! <= c[j]!) continue;
      const tail = tailOf(c[j]!, points[s]!, options);
      polls += weights[s]! * tail.polls;
      late += weights[s]! * tail.lateMs;
    }
    tailPolls.push(polls);
    tailLate.push(late);
  }
  return { c, done, doneSum, tailPolls, tailLate };
}

/** The schedule minimising lateness + λ · polls over the grid (both expected per request). */
function lagrangePlan(g: Grid, lambda: number, options: PollScheduleOptions): { times: number[]; polls: number; late: number } {
  const m = g.c.length;
  const value = new Float64Array(m);
  const polls = new Float64Array(m);
  const late = new Float64Array(m);
  const next = new Int32Array(m).fill(-1);
  for (let j = m - 1; j >= 0; j--) {
    const remaining = 1 - g.done[j]!;
    let best = lambda * g.tailPolls[j]! + g.tailLate[j]!;
    let bestPolls = g.tailPolls[j]!;
    let bestLate = g.tailLate[j]!;
    let bestNext = -1;
    // Bounded: the candidates after j within one cap.
    for (let k = j + 1; remaining > 1e-9 && k < m; k++) {
      const gap = g.c[k]! - g.c[j]!;
      if (gap > options.capMs) break;
      if (gap < options.floorMs) continue;
      const stepLate = (g.done[k]! - g.done[j]!) * g.c[k]! - (g.doneSum[k]! - g.doneSum[j]!);
      const cost = lambda * remaining + stepLate + value[k]!;
      // Strictly better only: ties go to the fewer polls found first (stopping, or the nearer time).
      if (cost < best - 1e-12 * Math.max(1, Math.abs(best))) {
        best = cost;
        bestPolls = remaining + polls[k]!;
        bestLate = stepLate + late[k]!;
        bestNext = k;
      }
    }
    value[j] = best;
    polls[j] = bestPolls;
    late[j] = bestLate;
    next[j] = bestNext;
  }
  const times: number[] = [];
  // Bounded: next[] only moves forward.
  for (let j = next[0]!; j >= 0; j = next[j]!) times.push(g.c[j]!);
  return { times, polls: polls[0]!, late: late[0]! };
}

/**
 * The poll plan for a duration distribution (or durations, equally likely) within `budgetPolls`
 * status polls per request on average (default: pollBudget). Undefined with no durations. Pure,
 * and cheap: a grid of at most a few hundred candidate times, and about 34 dynamic programs over it.
 */
export function planPolls(
  durations: readonly number[] | DurationDistribution,
  options: PollScheduleOptions,
  budgetPolls?: number,
): PollPlan | undefined {
  const dist = Array.isArray(durations) ? pointDistribution(durations) : (durations as DurationDistribution);
  if (!dist || dist.points.length === 0) return undefined;
  const budget = budgetPolls ?? pollBudget(dist, options);
  const g = gridFor(dist, options);
  type Plan = { times: number[]; polls: number; late: number };
  const result = (under: Plan, over: Plan, share: number): PollPlan => ({
    timesMs: under.times,
    denserMs: over.times,
    denserShare: share,
    budgetPolls: budget,
    expectedPolls: (1 - share) * under.polls + share * over.polls,
    expectedLatenessMs: (1 - share) * under.late + share * over.late,
  });
  let over = lagrangePlan(g, LAMBDA_MIN, options);
  // The densest plan the floor allows fits the budget: nothing to trade.
  if (over.polls <= budget) return result(over, over, 0);
  let under = lagrangePlan(g, LAMBDA_MAX, options);
  // Even the sparsest plan does not fit: take it (the fewest polls there are).
  if (under.polls > budget) return result(under, under, 0);
  let lo = Math.log(LAMBDA_MIN);
  let hi = Math.log(LAMBDA_MAX);
  for (let step = 0; step < LAMBDA_STEPS; step++) {
    const mid = (lo + hi) / 2;
    const plan = lagrangePlan(g, Math.exp(mid), options);
    if (plan.polls > budget) {
      over = plan;
      lo = mid;
    } else {
      under = plan;
      hi = mid;
    }
  }
  const span = over.polls - under.polls;
  const share = span > 0 ? Math.min(1, Math.max(0, (budget - under.polls) / span)) : 0;
  return result(under, over, share);
}

/** Where one request is in its schedule. */
export interface PollState {
  /** How many planned times have been used. */
  stage: number;
  /** Backoff steps taken since the last planned time (or since submission, with nothing planned). */
  backoffAttempt: number;
}

export const INITIAL_POLL_STATE: PollState = { stage: 0, backoffAttempt: 0 };

/**
 * The next delay for a request that has been running `elapsedMs` and is not done yet.
 * `targetsMs` are the planned poll times, ascending (empty when nothing is known);
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
    // Early by the jitter, but not so early that the next planned time is more than a cap away
    // (that would cost a poll more on the way to it).
    const after = targetsMs[stage + 1];
    const earliest = after === undefined ? 0 : after - capMs - elapsed;
    const wait = Math.min(target - elapsed, Math.max((target - elapsed) * shorten, earliest));
    // Far away: approach it in cap-sized steps without using it up.
    if (wait > capMs) return { delayMs: capMs, state: { stage, backoffAttempt: 0 } };
    return { delayMs: clamp(wait), state: { stage: stage + 1, backoffAttempt: 0 } };
  }
  const attempt = state.backoffAttempt;
  const ceiling = Math.min(capMs, options.baseMs * 2 ** Math.min(attempt, 52));
  return { delayMs: clamp(ceiling * shorten), state: { stage: Math.max(state.stage, targetsMs.length), backoffAttempt: attempt + 1 } };
}

interface ModelEntry {
  summary: DurationSummary;
  /** The distribution the cached plan was made for, and the plan; undefined until planned. */
  dist: DurationDistribution | undefined;
  plan: PollPlan | undefined;
  /** Whether a plan (or the lack of one) is cached. */
  planned: boolean;
  /** Whether it was made from observed durations (else from the documented range, or none). */
  learned: boolean;
  /** Observations since it was made. */
  stale: number;
  /** Status polls of the requests seen done, and how many requests, both decayed by SPEND_DECAY per request. */
  spentPolls: number;
  spentRequests: number;
}

/** Observations that make a model's plan be made again (the first plan is made at once). */
export const REPLAN_EVERY = 4;
/**
 * The share of B a plan aims at. It was 0.98, to keep a rough estimate from going over, and the
 * polling benchmark then spent 0.776x of the official client's requests against a budget of 0.8x:
 * the budget is there to be spent, on noticing ends sooner. In a simulation of that workload (40 seeded runs) aiming at
 * all of it spent 2.01 status polls a job, under the 2.05 the official client's requests allow.
 */
export const BUDGET_USE = 1;
/** Caps without a delay asked for after which a running request counts as abandoned. */
const STALE_CAPS = 4;
/** Requests over which polls spent beyond the budget (or short of it) are paid back. */
const SPEND_HORIZON = 64;
/** The weight of a request's spending falls by this factor with each later request. */
const SPEND_DECAY = 1 - 1 / 256;

/** A per-run scheduler: learns durations per model and hands out per-request poll timers. */
export class PollScheduler {
  readonly options: PollScheduleOptions;
  readonly #random: () => number;
  readonly #models = new Map<string, ModelEntry>();
  /** Per model, the requests followed and not yet seen done (at most 2 × window: the oldest, maybe abandoned, are let go). */
  readonly #running = new Map<string, Set<PollTimer>>();

  constructor(options: Partial<PollScheduleOptions> = {}, random: () => number = Math.random) {
    this.options = resolvePollSchedule(options);
    this.#random = random;
  }

  /** Records how long a request of `model` took, exactly (a webhook, an earlier run), in ms. */
  observe(model: string, durationMs: number): void {
    this.observeInterval(model, durationMs, durationMs);
  }

  /** Records that a request of `model` ended in (loMs, hiMs] after its submission. */
  observeInterval(model: string, loMs: number, hiMs: number): void {
    const entry = this.#entry(model);
    entry.summary.observeInterval(loMs, hiMs);
    entry.stale++;
  }

  /**
   * Starts `model` from durations known before the run (its earlier runs, poll-prior.ts), each as
   * the interval its polls saw it end in: the polls aim at them from the first request; the run's
   * own observations push them out of the window.
   */
  seed(model: string, seen: readonly SeenDuration[]): void {
    for (const { lo, hi } of seen) this.observeInterval(model, lo, hi);
    this.#entry(model).planned = false;
  }

  /**
   * The poll plan for `model`: from its observed durations once `minSamples` are known (their
   * interval estimate), else from its documented duration range, else none (the backoff). Made
   * again after REPLAN_EVERY observations, else cached.
   */
  plan(model: string): PollPlan | undefined {
    const entry = this.#entry(model);
    const o = this.options;
    const learned = entry.summary.count >= o.minSamples;
    if (!entry.planned || learned !== entry.learned || entry.stale >= REPLAN_EVERY) {
      const range = learned ? undefined : o.documented(model);
      entry.dist = learned
        ? intervalDistribution(this.#withRunning(model, entry.summary.intervals()))
        : range && range.every(Number.isFinite)
          ? documentedDistribution(range)
          : undefined;
      // The budget, less what requests seen done spent beyond it (the backoff's cold start, early
      // jitter, an estimate that was wrong), paid back over the next SPEND_HORIZON requests.
      const budget = entry.dist && BUDGET_USE * pollBudget(entry.dist, o);
      const owed = budget === undefined ? 0 : entry.spentPolls - entry.spentRequests * budget;
      entry.plan =
        entry.dist && budget !== undefined
          ? planPolls(entry.dist, o, Math.min(1.5 * budget, Math.max(0.5 * budget, budget - owed / SPEND_HORIZON)))
          : undefined;
      entry.planned = true;
      entry.learned = learned;
      entry.stale = 0;
    }
    return entry.plan;
  }

  /**
   * The poll times for `model`, ascending; empty when nothing is known. `pick` in [0, 1) chooses
   * between the plan's two schedules (the denser when below its share); by default the sparser.
   */
  targets(model: string, pick = 1): readonly number[] {
    const plan = this.plan(model);
    if (!plan) return [];
    return pick < plan.denserShare ? plan.denserMs : plan.timesMs;
  }

  /** Starts the schedule of one request submitted at `submittedAtMs`. */
  start(model: string, submittedAtMs: number): PollTimer {
    const timer = new PollTimer(this, model, submittedAtMs);
    let running = this.#running.get(model);
    if (!running) this.#running.set(model, (running = new Set()));
    running.add(timer);
    if (running.size > 2 * this.options.window) running.delete(running.values().next().value!);
    return timer;
  }

  /**
   * The duration to record for a request of `model` seen ending in (loMs, hiMs]: its mean there
   * under the distribution the plan was made for, when that puts mass there; else the midpoint.
   */
  estimate(model: string, loMs: number, hiMs: number): number {
    const dist = this.#entry(model).dist;
    let mass = 0;
    let sum = 0;
    if (dist)
      for (let i = 0; i < dist.points.length; i++) {
        const d = dist.points[i]!;
        if (d <= loMs) continue;
        if (d > hiMs) break;
        mass += dist.weights[i]!;
        sum += dist.weights[i]! * d;
      }
    return Math.round(mass > 1e-9 ? sum / mass : (loMs + hiMs) / 2);
  }

  /** @internal used by PollTimer: a request of `model` was seen done after `polls` status polls. */
  spent(model: string, polls: number): void {
    const entry = this.#entry(model);
    entry.spentPolls = entry.spentPolls * SPEND_DECAY + polls;
    entry.spentRequests = entry.spentRequests * SPEND_DECAY + 1;
  }

  /** @internal used by PollTimer: a request was seen done. */
  finished(timer: PollTimer): void {
    this.#running.get(timer.model)?.delete(timer);
  }

  /** @internal used by PollTimer: a request's draw of its schedule. */
  draw(): number {
    return this.#random();
  }

  /** @internal used by PollTimer */
  delay(model: string, elapsedMs: number, state: PollState, pick: number): { delayMs: number; state: PollState } {
    return nextPollDelay(elapsedMs, state, this.targets(model, pick), this.options, this.#random());
  }

  /**
   * The observed intervals and, as censored observations, the requests still running that a poll
   * has found unfinished: each ended after its last miss, assumed within twice the longest end
   * seen (or twice its last miss). A run's first durations learned are its shortest, which end
   * first; without the running ones, the first plans expect every request to be as short (in a
   * simulation of the polling benchmark, counting them took a cold run from 1.202x to 1.178x of
   * the jobs seen done at once, and left a run after an earlier one as it was).
   */
  #withRunning(model: string, intervals: readonly SeenDuration[]): SeenDuration[] {
    let top = 0;
    for (const e of intervals) top = Math.max(top, e.hi);
    const out = [...intervals];
    const running = this.#running.get(model);
    if (!running) return out;
    // A request that asked for no delay in the STALE_CAPS caps before the latest one asked is taken
    // for abandoned (its follow ended without a final status) and let go.
    let newest = Number.NEGATIVE_INFINITY;
    for (const timer of running) newest = Math.max(newest, timer.askedAtMs);
    for (const timer of running) {
      if (timer.askedAtMs < newest - STALE_CAPS * this.options.capMs) {
        running.delete(timer);
        continue;
      }
      const lo = timer.missedMs;
      if (lo > 0) out.push({ lo, hi: 2 * Math.max(top, lo) });
    }
    return out;
  }

  #entry(model: string): ModelEntry {
    let entry = this.#models.get(model);
    if (!entry) {
      entry = {
        summary: new DurationSummary(this.options.window),
        dist: undefined,
        plan: undefined,
        planned: false,
        learned: false,
        stale: 0,
        spentPolls: 0,
        spentRequests: 0,
      };
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
  /** Which of the plan's two schedules this request follows (PollScheduler.targets). */
  readonly #pick: number;
  #state: PollState = INITIAL_POLL_STATE;
  #polls = 0;
  /** When the last poll that found the request unfinished happened (the submit, before any). */
  #lastMissMs: number;
  #askedAtMs: number;

  constructor(scheduler: PollScheduler, model: string, submittedAtMs: number) {
    this.#lastMissMs = submittedAtMs;
    this.#askedAtMs = submittedAtMs;
    this.#scheduler = scheduler;
    this.#pick = scheduler.draw();
    this.model = model;
    this.submittedAtMs = submittedAtMs;
  }

  /** When a delay was last asked for (its submission, before any). */
  get askedAtMs(): number {
    return this.#askedAtMs;
  }

  /** How long after its submission the last poll that found the request unfinished came (0: none yet). */
  get missedMs(): number {
    return this.#lastMissMs - this.submittedAtMs;
  }

  /** Polls made so far (calls to `next`). */
  get polls(): number {
    return this.#polls;
  }

  /** The delay before the next poll, given the time now; call it once per poll. */
  next(nowMs: number): number {
    // Asked again: the previous poll found the request unfinished.
    if (this.#polls > 0) this.#lastMissMs = nowMs;
    this.#askedAtMs = nowMs;
    const { delayMs, state } = this.#scheduler.delay(this.model, nowMs - this.submittedAtMs, this.#state, this.#pick);
    this.#state = state;
    this.#polls++;
    return delayMs;
  }

  /**
   * The request was seen final at `nowMs`: teach the scheduler its duration. A poll only shows that
   * the request ended between the last poll that missed and this one, so the scheduler learns that
   * interval (intervalDistribution), and the duration returned is the request's mean within it
   * under the current estimate (the midpoint when the estimate puts nothing there). Recording
   * `nowMs` would teach the scheduler its own poll delays: at a service that answers at once, it
   * would keep aiming at yesterday's wait and never learn that requests got faster.
   * `exact`: the end was told as it happened (a webhook), so `nowMs` is the end. Returns the
   * duration recorded (the status record keeps it for later runs' priors).
   */
  complete(nowMs: number, exact = false): number {
    const lo = this.#lastMissMs - this.submittedAtMs;
    const hi = nowMs - this.submittedAtMs;
    const durationMs = exact ? Math.round(hi) : this.#scheduler.estimate(this.model, lo, hi);
    this.#scheduler.spent(this.model, this.#polls);
    this.#scheduler.finished(this);
    if (exact) this.#scheduler.observe(this.model, durationMs);
    else this.#scheduler.observeInterval(this.model, lo, hi);
    return durationMs;
  }
}
