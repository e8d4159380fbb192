import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  DEFAULT_POLL_SCHEDULE,
  DurationSummary,
  INITIAL_POLL_STATE,
  nextPollDelay,
  PollScheduler,
  resolvePollSchedule,
  type PollScheduleOptions,
} from '../../src/run/poll-schedule.js';

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
  it('with many observed durations D, the first poll lands within the jitter just before D (property)', () => {
    fc.assert(
      fc.property(fc.integer({ min: 600, max: 300_000 }), fc.integer({ min: 1, max: 2 ** 31 }), (durationMs, seed) => {
        const scheduler = new PollScheduler({}, seeded(seed));
        for (let i = 0; i < 50; i++) scheduler.observe('dop', durationMs);
        const { capMs, jitter } = scheduler.options;
        const timer = scheduler.start('dop', 0);
        let now = 0;
        let steps = 0;
        // Cap-sized steps while D is far, then one poll aimed at D.
        for (; steps < 1_000; steps++) {
          const delay = timer.next(now);
          now += delay;
          if (delay !== capMs || now >= durationMs * (1 - jitter)) break;
        }
        expect(steps).toBeLessThanOrEqual(Math.floor(durationMs / capMs));
        expect(now).toBeGreaterThanOrEqual(Math.floor(durationMs * (1 - jitter)));
        expect(now).toBeLessThanOrEqual(durationMs);
      }),
      { numRuns: 500 },
    );
  });

  it('with noisy durations, the first poll lands near their median', () => {
    const random = seeded(7);
    const scheduler = new PollScheduler({}, random);
    for (let i = 0; i < 200; i++) scheduler.observe('sheet', 8_000 + (random() - 0.5) * 2_000);
    const targets = scheduler.targets('sheet');
    expect(targets[0]).toBeGreaterThan(7_700);
    expect(targets[0]).toBeLessThan(8_300);
    const first = scheduler.start('sheet', 0).next(0);
    expect(first).toBeGreaterThanOrEqual(Math.floor(targets[0]! * 0.85));
    expect(first).toBeLessThanOrEqual(Math.ceil(targets[0]!));
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

  it('after warming up, a request takes a couple of polls instead of one every 2 s', () => {
    const scheduler = new PollScheduler({}, seeded(42));
    const duration = 30_000;
    const counts: number[] = [];
    const latencies: number[] = [];
    for (let i = 0; i < 60; i++) {
      const polls = simulate(scheduler, 'soul', duration);
      counts.push(polls.length);
      latencies.push(polls.at(-1)!);
    }
    const warm = counts.slice(20);
    const average = warm.reduce((a, b) => a + b, 0) / warm.length;
    // Polling every 2 s would take 15 polls; a 30 s request needs at least 2 polls under the 15 s cap.
    expect(average).toBeLessThanOrEqual(4);
    expect(Math.max(...warm)).toBeLessThanOrEqual(6);
    // And the result is seen soon after it is ready (virtual time).
    expect(Math.max(...latencies.slice(20))).toBeLessThanOrEqual(duration * 1.35);
  });

  it('learns that the service got faster, and that it got slower', () => {
    const scheduler = new PollScheduler({}, seeded(3));
    for (let i = 0; i < 40; i++) simulate(scheduler, 'sheet', 12_000);
    // What is learned is the midpoint of the interval a poll saw the end in: near the true duration,
    // on either side of it.
    const near = (value: number, truth: number): void => {
      expect(value).toBeGreaterThan(truth * 0.8);
      expect(value).toBeLessThan(truth * 1.2);
    };
    const before = scheduler.targets('sheet')[0]!;
    near(before, 12_000);
    for (let i = 0; i < 300; i++) simulate(scheduler, 'sheet', 6_000);
    const faster = scheduler.targets('sheet')[0]!;
    expect(faster).toBeLessThan(before * 0.7);
    near(faster, 6_000);
    for (let i = 0; i < 300; i++) simulate(scheduler, 'sheet', 20_000);
    near(scheduler.targets('sheet')[0]!, 20_000);
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
  it('makes options consistent: floor ≤ base ≤ cap, jitter below 1, sane quantiles', () => {
    expect(resolvePollSchedule({ floorMs: 2_000, baseMs: 100, capMs: 50 })).toMatchObject({ floorMs: 2_000, baseMs: 2_000, capMs: 2_000 });
    expect(resolvePollSchedule({ jitter: 5 }).jitter).toBeLessThan(1);
    expect(resolvePollSchedule({ quantiles: [0.9, 0, 2, 0.5, 0.5] }).quantiles).toEqual([0.5, 0.9]);
    expect(resolvePollSchedule({ capMs: Number.NaN }).capMs).toBe(15_000);
  });
});

describe('learning from what polls can see', () => {
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
