import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MODEL_NAMES } from '../../../src/models/registry.js';
import {
  BUDGET_USE,
  DEFAULT_POLL_SCHEDULE,
  documentedDistribution,
  documentedSamples,
  DurationSummary,
  evaluatePlan,
  INITIAL_POLL_STATE,
  intervalDistribution,
  nextPollDelay,
  planPolls,
  pointDistribution,
  pollBudget,
  PollScheduler,
  REPLAN_EVERY,
  resolvePollSchedule,
  type PollPlan,
  type PollScheduleOptions,
} from '../../../src/run/polling/poll-schedule.js';

/** A seeded generator in [0, 1), so simulations are reproducible. */
function seeded(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 2 ** 32;
  };
}

/** Polls one request whose true duration is `durationMs`, in virtual time; returns the poll times (elapsed). */
function simulate(scheduler: PollScheduler, model: string, durationMs: number, startMs = 0): number[] {
  const timer = scheduler.start(model, startMs);
  const polls: number[] = [];
  let now = startMs;
  for (let i = 0; i < 10_000; i++) {
    now += timer.next(now);
    polls.push(now - startMs);
    if (now - startMs >= durationMs) {
      timer.complete(now);
      return polls;
    }
  }
  throw new Error('never completed');
}

const optionsArb: fc.Arbitrary<PollScheduleOptions> = fc
  .record({
    floorMs: fc.integer({ min: 1, max: 5_000 }),
    baseMs: fc.integer({ min: 1, max: 10_000 }),
    capMs: fc.integer({ min: 1, max: 120_000 }),
    jitter: fc.double({ min: 0, max: 0.9, noNaN: true }),
  })
  .map((o) => resolvePollSchedule(o));

describe('nextPollDelay (pure)', () => {
  it('always lies in [floor, cap], whatever the state, targets and random (property)', () => {
    fc.assert(
      fc.property(
        optionsArb,
        fc.double({ min: -1_000, max: 1e7, noNaN: true }),
        fc.record({ stage: fc.nat({ max: 10 }), backoffAttempt: fc.nat({ max: 2_000 }) }),
        fc.array(fc.double({ min: 0, max: 1e7, noNaN: true }), { maxLength: 6 }).map((t) => t.sort((a, b) => a - b)),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (options, elapsed, state, targets, random) => {
          const { delayMs } = nextPollDelay(elapsed, state, targets, options, random);
          expect(Number.isFinite(delayMs)).toBe(true);
          expect(delayMs).toBeGreaterThanOrEqual(options.floorMs);
          expect(delayMs).toBeLessThanOrEqual(options.capMs);
        },
      ),
      { numRuns: 3_000 },
    );
  });

  it('with nothing learned, backs off from about 1 s, doubling up to the 15 s cap, jitter only shortening', () => {
    const o = DEFAULT_POLL_SCHEDULE;
    const delays = (random: number): number[] => {
      let state = INITIAL_POLL_STATE;
      const out: number[] = [];
      for (let i = 0; i < 7; i++) {
        const next = nextPollDelay(0, state, [], o, random);
        out.push(next.delayMs);
        state = next.state;
      }
      return out;
    };
    expect(delays(0)).toEqual([1_000, 2_000, 4_000, 8_000, 15_000, 15_000, 15_000]);
    expect(delays(0.999_999)).toEqual([850, 1_700, 3_400, 6_800, 12_750, 12_750, 12_750]);
  });

  it('aims at each target in turn, skips passed ones, then backs off again', () => {
    const o = resolvePollSchedule({ jitter: 0 });
    const targets = [4_000, 6_000, 9_000];
    let r = nextPollDelay(0, INITIAL_POLL_STATE, targets, o, 0);
    expect(r.delayMs).toBe(4_000);
    r = nextPollDelay(4_000, r.state, targets, o, 0);
    expect(r.delayMs).toBe(2_000);
    // A late poll (10 s) has passed the last target: backoff from base.
    r = nextPollDelay(10_000, r.state, targets, o, 0);
    expect(r.delayMs).toBe(1_000);
    r = nextPollDelay(11_000, r.state, targets, o, 0);
    expect(r.delayMs).toBe(2_000);
  });

  it('approaches a far target in cap-sized steps, and never polls faster than the floor for a tiny one', () => {
    const o = resolvePollSchedule({ jitter: 0, capMs: 15_000, floorMs: 500 });
    const far = [40_000];
    let r = nextPollDelay(0, INITIAL_POLL_STATE, far, o, 0);
    expect(r).toEqual({ delayMs: 15_000, state: { stage: 0, backoffAttempt: 0 } });
    r = nextPollDelay(15_000, r.state, far, o, 0);
    expect(r.delayMs).toBe(15_000);
    r = nextPollDelay(30_000, r.state, far, o, 0);
    expect(r).toEqual({ delayMs: 10_000, state: { stage: 1, backoffAttempt: 0 } });
    expect(nextPollDelay(0, INITIAL_POLL_STATE, [50], o, 0).delayMs).toBe(500);
  });
});

describe('PollScheduler: learning from observed durations', () => {
  it('with many observed durations D, a poll lands within the jitter just before D, after at most one poll per cap (property)', () => {
    fc.assert(
      fc.property(fc.integer({ min: 600, max: 300_000 }), fc.integer({ min: 1, max: 2 ** 31 }), (durationMs, seed) => {
        const scheduler = new PollScheduler({}, seeded(seed));
        for (let i = 0; i < 50; i++) scheduler.observe('dop', durationMs);
        const { capMs, floorMs, jitter } = scheduler.options;
        // The plan ends at D, with a poll every cap at most before it.
        const plan = scheduler.plan('dop')!;
        expect(plan.timesMs.at(-1)).toBe(durationMs);
        expect(plan.timesMs.length - 1).toBeLessThanOrEqual(Math.ceil(durationMs / capMs));
        const timer = scheduler.start('dop', 0);
        let now = 0;
        let polls = 0;
        for (; polls < 1_000 && now < durationMs * (1 - jitter) - floorMs; polls++) {
          const delay = timer.next(now);
          expect(delay).toBeLessThanOrEqual(capMs);
          now += delay;
        }
        // One poll per planned time at most: early jitter costs no poll more on the way.
        expect(polls).toBeLessThanOrEqual(plan.timesMs.length);
        expect(now).toBeLessThanOrEqual(durationMs);
      }),
      { numRuns: 300 },
    );
  });

  it('needs minSamples durations before it trusts them, and keeps models apart', () => {
    const scheduler = new PollScheduler({ minSamples: 3, jitter: 0 });
    scheduler.observe('a', 9_000);
    scheduler.observe('a', 9_000);
    expect(scheduler.targets('a')).toEqual([]);
    expect(scheduler.start('a', 0).next(0)).toBe(1_000);
    scheduler.observe('a', 9_000);
    expect(scheduler.targets('a')).toEqual([9_000]);
    expect(scheduler.start('a', 0).next(0)).toBe(9_000);
    expect(scheduler.start('b', 0).next(0)).toBe(1_000);
  });

  it('by default one seen end is enough: the requests after it poll by a plan, not by the cold backoff', () => {
    const scheduler = new PollScheduler({ jitter: 0 });
    expect(scheduler.options.minSamples).toBe(1);
    // Nothing known: the backoff's first poll at 1 s.
    expect(scheduler.start('sheet', 0).next(0)).toBe(1_000);
    // One request seen ending in (3 s, 4 s]: the next request's first poll aims near it.
    scheduler.observeInterval('sheet', 3_000, 4_000);
    const first = scheduler.start('sheet', 0).next(0);
    expect(first).toBeGreaterThan(3_000);
    expect(first).toBeLessThanOrEqual(4_000);
  });

  it('a seeded duration is kept as the interval it was seen in, not as a point', () => {
    const asPoints = new PollScheduler({ jitter: 0 });
    asPoints.seed(
      'sheet',
      Array.from({ length: 16 }, () => ({ lo: 3_000, hi: 3_000 })),
    );
    // Every request ends at 3 s: one poll then sees each.
    expect(asPoints.targets('sheet')).toEqual([3_000]);
    const asIntervals = new PollScheduler({ jitter: 0 });
    asIntervals.seed(
      'sheet',
      Array.from({ length: 16 }, () => ({ lo: 2_000, hi: 4_000 })),
    );
    // Ends anywhere in (2 s, 4 s]: the plan polls inside that span, more than once, and by 4 s.
    const targets = asIntervals.targets('sheet');
    expect(targets.length).toBeGreaterThan(1);
    expect(targets[0]).toBeGreaterThan(2_000);
    expect(targets.at(-1)).toBe(4_000);
  });

  it('after warming up, a request of 30 s makes fewer requests than 0.8x the official client, seen soon after it ends', () => {
    const scheduler = new PollScheduler({}, seeded(42));
    const duration = 30_000;
    const counts: number[] = [];
    const latencies: number[] = [];
    for (let i = 0; i < 200; i++) {
      const polls = simulate(scheduler, 'soul', duration);
      counts.push(polls.length);
      latencies.push(polls.at(-1)! - duration);
    }
    const warm = counts.slice(100);
    const average = warm.reduce((a, b) => a + b, 0) / warm.length;
    // The official client: a submit, 16 polls (at once, then every 2 s), a download.
    const official = 2 + 1 + Math.ceil(duration / 2_000);
    expect((2 + average) / official).toBeLessThanOrEqual(0.8);
    // Polling every 2 s would be up to 2 s late; this, under one.
    const lateness = latencies.slice(100).reduce((a, b) => a + b, 0) / 100;
    expect(lateness).toBeLessThan(1_000);
  });

  it('learns that the service got faster, and that it got slower', () => {
    const scheduler = new PollScheduler({}, seeded(3));
    for (let i = 0; i < 40; i++) simulate(scheduler, 'sheet', 12_000);
    // The plan's last poll is where it expects every request done: near the true duration.
    const near = (value: number, truth: number): void => {
      expect(value).toBeGreaterThan(truth * 0.8);
      expect(value).toBeLessThan(truth * 1.2);
    };
    const last = (): number => scheduler.targets('sheet').at(-1)!;
    near(last(), 12_000);
    for (let i = 0; i < 300; i++) simulate(scheduler, 'sheet', 6_000);
    near(last(), 6_000);
    for (let i = 0; i < 300; i++) simulate(scheduler, 'sheet', 20_000);
    near(last(), 20_000);
  });

  it('keeps every delay within [floor, cap], whatever it learned (property)', () => {
    fc.assert(
      fc.property(
        optionsArb,
        fc.array(fc.integer({ min: 0, max: 200_000 }), { minLength: 1, maxLength: 80 }),
        fc.integer({ min: 1, max: 2 ** 31 }),
        (options, durations, seed) => {
          const scheduler = new PollScheduler(options, seeded(seed));
          for (const d of durations) {
            const timer = scheduler.start('m', 0);
            let now = 0;
            for (let i = 0; i < 1_000 && now < d; i++) {
              const delay = timer.next(now);
              expect(delay).toBeGreaterThanOrEqual(options.floorMs);
              expect(delay).toBeLessThanOrEqual(options.capMs);
              now += delay;
            }
            timer.complete(now);
          }
        },
      ),
      { numRuns: 150 },
    );
  });

  it('computes a plan once and keeps it until REPLAN_EVERY more durations are seen', () => {
    const scheduler = new PollScheduler({}, seeded(5));
    for (let i = 0; i < 10; i++) scheduler.observe('m', 2_000 + 200 * i);
    const first = scheduler.plan('m');
    expect(scheduler.plan('m')).toBe(first);
    for (let i = 1; i < REPLAN_EVERY; i++) scheduler.observe('m', 9_000);
    expect(scheduler.plan('m')).toBe(first);
    scheduler.observe('m', 9_000);
    expect(scheduler.plan('m')).not.toBe(first);
  });
});

/** Poll times at the q = j/k quantiles of `samples` (nearest rank), j = 1..k. */
function evenQuantiles(samples: readonly number[], k: number): number[] {
  const sorted = [...samples].sort((a, b) => a - b);
  return Array.from({ length: k }, (_, j) => sorted[Math.min(sorted.length - 1, Math.ceil(((j + 1) / k) * sorted.length) - 1)]!);
}

/** What a plan's mix does on `samples`, by evaluatePlan (not by the plan's own accounting). */
function mixed(plan: PollPlan, samples: readonly number[], options: PollScheduleOptions): { polls: number; latenessMs: number } {
  const a = evaluatePlan(plan.timesMs, samples, options);
  const b = evaluatePlan(plan.denserMs, samples, options);
  const s = plan.denserShare;
  return { polls: (1 - s) * a.polls + s * b.polls, latenessMs: (1 - s) * a.latenessMs + s * b.latenessMs };
}

describe('planPolls: the poll times for a duration distribution within a request budget', () => {
  const o = resolvePollSchedule({});
  const uniform = documentedSamples([1_700, 4_400]);

  it('derives the budget from the official client: 0.8x its requests, less a submit and a download', () => {
    // Official polls at once, then every 2 s: 2, 3 and 4 polls; 5 requests a job on average.
    expect(pollBudget(pointDistribution([1_000, 3_000, 5_000])!, o)).toBeCloseTo(0.8 * 5 - 2, 9);
    // Sheets of 1.7-4.4 s: about two polls a job.
    const b = pollBudget(pointDistribution(uniform)!, o);
    expect(b).toBeGreaterThan(1.9);
    expect(b).toBeLessThan(2.1);
  });

  it('spends the whole budget and no more, on the distribution it planned for', () => {
    for (const budget of [1.2, 1.5, 2, 2.5, 3, 4]) {
      const plan = planPolls(uniform, o, budget)!;
      const got = mixed(plan, uniform, o);
      expect(got.polls).toBeCloseTo(plan.expectedPolls, 9);
      expect(got.latenessMs).toBeCloseTo(plan.expectedLatenessMs, 6);
      expect(got.polls).toBeLessThanOrEqual(budget + 1e-9);
      expect(got.polls).toBeGreaterThanOrEqual(0.95 * budget);
    }
  });

  it('is less late than evenly spaced quantiles at the same expected number of polls', () => {
    // A floor below the quantiles' spacing, so both choose from the same times (six quantiles of
    // 1.7-4.4 s are 450 ms apart, closer than the default 500 ms floor lets the plan poll).
    const o = resolvePollSchedule({ floorMs: 100 });
    for (const k of [2, 3, 4, 6]) {
      const even = evaluatePlan(evenQuantiles(uniform, k), uniform, o);
      const plan = planPolls(uniform, o, even.polls)!;
      const got = mixed(plan, uniform, o);
      expect(got.polls).toBeLessThanOrEqual(even.polls + 1e-9);
      expect(got.latenessMs).toBeLessThan(even.latenessMs);
    }
    // And on a skewed distribution (most requests short, a long tail).
    const random = seeded(11);
    const skewed = Array.from({ length: 64 }, () => 2_000 + 6_000 * random() ** 3);
    for (const k of [2, 3, 5]) {
      const even = evaluatePlan(evenQuantiles(skewed, k), skewed, o);
      const got = mixed(planPolls(skewed, o, even.polls)!, skewed, o);
      expect(got.polls).toBeLessThanOrEqual(even.polls + 1e-9);
      expect(got.latenessMs).toBeLessThan(even.latenessMs);
    }
  });

  it('spaces its polls wider at first and denser later on a uniform distribution', () => {
    const { timesMs } = planPolls(uniform, o)!;
    expect(timesMs.length).toBeGreaterThanOrEqual(3);
    const gaps = timesMs.slice(1).map((t, i) => t - timesMs[i]!);
    // The first poll waits past the shortest duration; the gaps after it shrink.
    expect(timesMs[0]! - 1_700).toBeGreaterThan(gaps[0]!);
    expect(timesMs.at(-1)).toBeGreaterThanOrEqual(4_300);
  });

  it('keeps its times ascending, at least the floor apart, at most the cap apart, the first within [floor, cap] (property)', () => {
    fc.assert(
      fc.property(
        optionsArb,
        fc.array(fc.integer({ min: 0, max: 400_000 }), { minLength: 1, maxLength: 100 }),
        fc.double({ min: 0, max: 20, noNaN: true }),
        (options, samples, budget) => {
          const plan = planPolls(samples, options, budget)!;
          for (const times of [plan.timesMs, plan.denserMs]) {
            if (times.length === 0) continue;
            expect(times[0]).toBeGreaterThanOrEqual(options.floorMs);
            expect(times[0]).toBeLessThanOrEqual(options.capMs);
            for (let i = 1; i < times.length; i++) {
              expect(times[i]! - times[i - 1]!).toBeGreaterThanOrEqual(options.floorMs);
              expect(times[i]! - times[i - 1]!).toBeLessThanOrEqual(options.capMs);
            }
          }
          expect(plan.denserShare).toBeGreaterThanOrEqual(0);
          expect(plan.denserShare).toBeLessThanOrEqual(1);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('is undefined with no durations', () => {
    expect(planPolls([], o)).toBeUndefined();
    expect(planPolls([Number.NaN, -5], o)).toBeUndefined();
  });
});

describe('the first polls: a documented duration range, else the backoff', () => {
  it('plans a model with a documented range from its first request', () => {
    const documented = (model: string): readonly [number, number] | undefined => (model === 'sheet' ? [1_700, 4_400] : undefined);
    const scheduler = new PollScheduler({ documented, jitter: 0 }, seeded(1));
    const plan = scheduler.plan('sheet')!;
    const range = documentedDistribution([1_700, 4_400]);
    expect(range.candidates.at(-1)).toBe(4_400);
    expect(plan).toEqual(planPolls(range, scheduler.options, BUDGET_USE * pollBudget(range, scheduler.options)));
    // The first poll is the plan's, not the backoff's 1 s.
    expect([plan.timesMs[0], plan.denserMs[0]]).toContain(scheduler.start('sheet', 0).next(0));
    expect(scheduler.start('sheet', 0).next(0)).toBeGreaterThan(1_700);
    // A model without one backs off.
    expect(scheduler.start('other', 0).next(0)).toBe(1_000);
  });

  it('no model has one: the spec documents no durations, so every model starts from the backoff', () => {
    for (const model of MODEL_NAMES) expect(DEFAULT_POLL_SCHEDULE.documented(model)).toBeUndefined();
    expect(new PollScheduler({ jitter: 0 }).start('character-sheet', 0).next(0)).toBe(1_000);
  });
});

describe('DurationSummary', () => {
  it('keeps only the last `window` durations', () => {
    const summary = new DurationSummary(10);
    for (let i = 1; i <= 1_000; i++) summary.observe(i);
    expect(summary.count).toBe(10);
    expect(summary.quantile(0)).toBe(991);
    expect(summary.quantile(1)).toBe(1_000);
  });

  it('computes nearest-rank quantiles and ignores nonsense', () => {
    const summary = new DurationSummary();
    expect(summary.quantile(0.5)).toBeUndefined();
    for (const d of [5, 1, 4, 2, 3, Number.NaN, -1, Number.POSITIVE_INFINITY]) summary.observe(d);
    expect(summary.count).toBe(5);
    expect(summary.quantile(0.5)).toBe(3);
    expect(summary.quantile(0.75)).toBe(4);
    expect(summary.quantile(0.99)).toBe(5);
  });
});

describe('resolvePollSchedule', () => {
  it('makes options consistent: floor ≤ base ≤ cap, jitter below 1', () => {
    expect(resolvePollSchedule({ floorMs: 2_000, baseMs: 100, capMs: 50 })).toMatchObject({ floorMs: 2_000, baseMs: 2_000, capMs: 2_000 });
    expect(resolvePollSchedule({ jitter: 5 }).jitter).toBeLessThan(1);

    expect(resolvePollSchedule({ capMs: Number.NaN }).capMs).toBe(15_000);
  });
});

describe('learning from what polls can see', () => {
  it('spends most of the budget over a run, and no more (simulated, seeded)', () => {
    const random = seeded(17);
    const scheduler = new PollScheduler({}, random);
    const counts: number[] = [];
    for (let i = 0; i < 800; i++) counts.push(simulate(scheduler, 'sheet', 1_700 + 2_700 * random()).length);
    const budget = pollBudget(pointDistribution(documentedSamples([1_700, 4_400]))!, scheduler.options);
    const spent = counts.reduce((a, b) => a + b, 0) / counts.length;
    // Learned from what its polls saw, the estimate is rougher than the truth the budget is taken
    // from here; the quantile schedule before it spent 0.87-0.89 of B in this simulation.
    expect(spent).toBeLessThanOrEqual(budget);
    expect(spent).toBeGreaterThanOrEqual(0.93 * budget);
  });

  it('counts requests still running: a cold run does not plan for its first, shortest, durations alone', () => {
    // 20 requests submitted at once, polled by the cold backoff at 1 s and 3 s; 3 end by 3 s.
    const plannedUpTo = (withRunning: boolean): number => {
      const scheduler = new PollScheduler({ jitter: 0 });
      const timers = Array.from({ length: withRunning ? 20 : 3 }, () => scheduler.start('m', 0));
      for (const t of timers) expect(t.next(0)).toBe(1_000);
      for (const t of timers) expect(t.next(1_000)).toBe(2_000);
      timers.slice(0, 3).forEach((t) => t.complete(3_000));
      // The others are found running at 3 s.
      for (const t of timers.slice(3)) t.next(3_000);
      return scheduler.plan('m')!.timesMs.at(-1)!;
    };
    // Seen alone, the three say every request ends by 3 s; the 17 running say otherwise.
    expect(plannedUpTo(false)).toBeLessThanOrEqual(3_000);
    expect(plannedUpTo(true)).toBeGreaterThan(3_000);
  });

  it('lets go of a request whose follow ended without a final status', () => {
    const scheduler = new PollScheduler({ jitter: 0 });
    for (let i = 0; i < 3; i++) scheduler.observe('m', 2_000);
    // Abandoned after a poll found it unfinished at 30 s: it would say requests run past 30 s.
    const abandoned = scheduler.start('m', 0);
    abandoned.next(0);
    abandoned.next(30_000);
    const later = (): number => scheduler.plan('m')!.timesMs.at(-1)!;
    for (let i = 0; i < REPLAN_EVERY; i++) scheduler.observe('m', 2_000);
    expect(later()).toBeGreaterThan(30_000);
    // Other requests go on polling for longer than four caps: it no longer counts.
    const live = scheduler.start('m', 0);
    live.next(100_000);
    for (let i = 0; i < REPLAN_EVERY; i++) scheduler.observe('m', 2_000);
    expect(later()).toBeLessThanOrEqual(2_000);
  });

  it('puts less mass before every request ends than midpoints would (interval estimate)', () => {
    // Requests of 2-3 s, polled at 2.5 s (a few at 2.2 s, jittered early) and at 3 s.
    const random = seeded(23);
    const intervals: { lo: number; hi: number }[] = [];
    for (let i = 0; i < 64; i++) {
      const d = 2_000 + 1_000 * random();
      const first = i % 4 === 0 ? 2_200 : 2_500;
      intervals.push(d <= first ? { lo: 0, hi: first } : { lo: first, hi: 3_000 });
    }
    const dist = intervalDistribution(intervals)!;
    let early = 0;
    dist.points.forEach((p, i) => (early += p < 1_800 ? dist.weights[i]! : 0));
    const midpoints = intervals.filter((e) => (e.lo + e.hi) / 2 < 1_800).length / intervals.length;
    expect(midpoints).toBeGreaterThan(0.2);
    expect(early).toBeLessThan(midpoints * 0.8);
    expect(dist.weights.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 9);
  });

  it('records the midpoint between the last miss and the hit, so a service that became fast is learned within 300 requests', () => {
    const scheduler = new PollScheduler({ floorMs: 10, baseMs: 100, capMs: 15_000 }, seeded(3));
    // A slow past: 64 requests of 2 s.
    for (let i = 0; i < 64; i++) simulate(scheduler, 'm', 2_000);
    // The service now answers at once; each request is seen done at its first poll.
    const firstPolls: number[] = [];
    for (let i = 0; i < 300; i++) firstPolls.push(simulate(scheduler, 'm', 0)[0] ?? Infinity);
    // Recording the hit time lets the estimate fall only by the jitter (15%) per window of 64, so it
    // would still be near 900 ms here; the midpoint halves what is recorded at each round.
    expect(firstPolls[0]).toBeGreaterThan(1_000);
    expect(Math.min(...firstPolls.slice(-5))).toBeLessThan(100);
  });
});
