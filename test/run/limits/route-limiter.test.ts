import { describe, expect, it } from 'vitest';
import {
  forgotten,
  mergeIntervals,
  RouteLimiter,
  ROUTE_RULES,
  routeOf,
  routeRate,
  throttledRoute,
  throttledWallMs,
  type RouteState,
} from '../../../src/run/limits/route-limiter.js';

const R = ROUTE_RULES;

describe('the per-route rules', () => {
  it('a 429 gives back a modest share of the rate (a tenth), not half', () => {
    const state = throttledRoute(undefined, 1_000, { sent: 20, accepted: 19, throttled: 1 });
    expect(state.rate).toBeCloseTo(17.55);
    expect(state.rate).toBeGreaterThan(10);
    expect(state.ceiling).toBe(19.5);
  });

  it('429s within the cooldown give back no second share: they answer requests sent at the old rate', () => {
    const first = throttledRoute(undefined, 1_000, { sent: 20, accepted: 19, throttled: 1 });
    expect(throttledRoute(first, 1_000 + R.cooldownMs - 1, { sent: 20, accepted: 19, throttled: 1 })).toEqual(first);
    expect(throttledRoute(first, 1_000 + R.cooldownMs, { sent: 20, accepted: 17, throttled: 3 }).rate).toBeLessThan(first.rate);
    // The rest of a burst's answers within the cooldown correct what was let through, down or up,
    // never above the rate before the decrease.
    const burst = throttledRoute(first, 1_000 + 50, { sent: 20, accepted: 10, throttled: 10 });
    expect(burst.ceiling).toBe(10.5);
    expect(burst.rate).toBeCloseTo(9.45);
    expect(burst.since).toBe(first.since);
    expect(throttledRoute(burst, 1_000 + 60, { sent: 20, accepted: 14, throttled: 6 }).ceiling).toBe(14.5);
    expect(throttledRoute(burst, 1_000 + 60, { sent: 40, accepted: 40, throttled: 0 }).ceiling).toBe(20);
  });

  it('under a true limit the route drops at once to what the service accepts', () => {
    // Sent 20 in the last second, 10 refused: the limit is near 10.
    const state = throttledRoute(undefined, 0, { sent: 20, accepted: 10, throttled: 10 });
    expect(state.rate).toBeCloseTo(9.45);
    expect(state.ceiling).toBe(10.5);
    // A limit far below what was sent: one decrease backs off that far.
    expect(throttledRoute(undefined, 0, { sent: 40, accepted: 2, throttled: 38 }).rate).toBeCloseTo(2.25);
    // Either count can fall short, and the larger is taken: early in a burst few answers are in
    // (the sends say more), late in one its sends have left the window (the answers say more).
    expect(throttledRoute(undefined, 0, { sent: 20, accepted: 2, throttled: 1 }).ceiling).toBe(19.5);
    expect(throttledRoute(undefined, 0, { sent: 1, accepted: 10, throttled: 11 }).ceiling).toBe(1);
    const late = throttledRoute(undefined, 0, { sent: 20, accepted: 10, throttled: 10 });
    expect(throttledRoute(late, 900, { sent: 1, accepted: 10, throttled: 11 }).ceiling).toBe(10.5);
  });

  it('a burst of 429s backs the route off as far as it takes, never to a halt', () => {
    let state: RouteState | undefined;
    let now = 0;
    // Every request refused: down to the floor, and no lower.
    for (let i = 0; i < 200; i++, now += R.cooldownMs) state = throttledRoute(state, now, { sent: 10, accepted: 0, throttled: 10 });
    expect(state!.rate).toBe(R.minRate);
    expect(routeRate(state!, now)).toBeGreaterThan(0);
    // A burst that goes on (most of each second's requests refused) decreases it second after second.
    let burst: RouteState | undefined;
    const rates: number[] = [];
    for (let i = 0, t = 0; i < 5; i++, t += R.cooldownMs) {
      const sent = Math.ceil(burst === undefined ? 100 : routeRate(burst, t));
      burst = throttledRoute(burst, t, { sent, accepted: Math.floor(sent / 2), throttled: Math.ceil(sent / 2) });
      rates.push(burst.rate);
    }
    for (let i = 1; i < rates.length; i++) expect(rates[i]).toBeLessThan(rates[i - 1]!);
    expect(rates[4]).toBeLessThan(10);
    // Sparse 429s at a steady rate (one a second of 20 sent) keep it near that rate: a tenth off, climbed back.
    let sparse: RouteState | undefined;
    for (let t = 0; t < 30_000; t += R.cooldownMs) sparse = throttledRoute(sparse, t, { sent: 20, accepted: 19, throttled: 1 });
    expect(sparse!.rate).toBeGreaterThan(15);
    expect(routeRate(sparse!, 29_000 + R.cooldownMs - 1)).toBeGreaterThanOrEqual(19);
  });

  it('recovers quickly: back to the ceiling within a few short steps, then probes above it, gently at first', () => {
    const state = throttledRoute(undefined, 0, { sent: 20, accepted: 19.5, throttled: 0.5 });
    expect(routeRate(state, R.stepMs - 1)).toBeCloseTo(18);
    expect(routeRate(state, 2 * R.stepMs)).toBe(20);
    // It stays at the ceiling a while (a true limit sits there), then probes above it.
    expect(routeRate(state, 2 * R.stepMs + R.holdMs)).toBe(20);
    const oneSecondAbove = routeRate(state, 2 * R.stepMs + R.holdMs + 1_000);
    expect(oneSecondAbove).toBeGreaterThan(20);
    expect(oneSecondAbove).toBeLessThan(22);
    // Steps above grow: a ceiling measured while the run sent little is left behind within seconds.
    expect(routeRate(state, 2 * R.stepMs + R.holdMs + 5_000)).toBeGreaterThan(40);
    expect(forgotten(state, 2 * R.stepMs + R.holdMs + 2_000)).toBe(false);
    expect(forgotten(state, 2 * R.stepMs + R.holdMs + 10_000)).toBe(true);
  });

  it('the rate only rises between decreases', () => {
    const state = throttledRoute(undefined, 0, { sent: 7, accepted: 3, throttled: 4 });
    let last = 0;
    for (let t = 0; t < 20_000; t += 50) {
      const rate = routeRate(state, t);
      expect(rate).toBeGreaterThanOrEqual(last);
      last = rate;
    }
  });

  it('a route is a method and a path with its ids set aside', () => {
    expect(routeOf('GET', '/requests/0b5e8a8e-1f0c-4c3e-9d7a-2f7f1f1f1f1f/status')).toBe('GET /requests/{id}/status');
    expect(routeOf('POST', '/vendor/ai-influencer')).toBe('POST /vendor/ai-influencer');
    expect(routeOf('POST', '/vendor/ai-influencer')).not.toBe(routeOf('GET', '/vendor/ai-influencer'));
    expect(routeOf('POST', '/marketing-studio/image/sunburst')).not.toBe(routeOf('POST', '/vendor/ai-influencer'));
  });
});

describe('throttledWallMs: how long the run waited on throttling in all', () => {
  it('counts wall-clock time once, however many requests waited at the same time', () => {
    expect(throttledWallMs([])).toBe(0);
    expect(throttledWallMs([[0, 1_000]])).toBe(1_000);
    // Overlapping waits of two requests: 0-1500, not 2000.
    expect(
      throttledWallMs([
        [0, 1_000],
        [500, 1_500],
      ]),
    ).toBe(1_500);
    // Disjoint ones add up; empty and reversed ones count nothing; order does not matter.
    expect(
      throttledWallMs([
        [5_000, 6_000],
        [0, 1_000],
        [2_000, 2_000],
        [3_000, 2_500],
      ]),
    ).toBe(2_000);
    // One inside another.
    expect(
      throttledWallMs([
        [0, 10_000],
        [1_000, 2_000],
      ]),
    ).toBe(10_000);
    expect(
      mergeIntervals([
        [4, 6],
        [0, 2],
        [1, 3],
      ]),
    ).toEqual([
      [0, 3],
      [4, 6],
    ]);
  });
});

describe('RouteLimiter', () => {
  it('lets a route never throttled through at once, and paces only the throttled route', async () => {
    const limiter = new RouteLimiter();
    expect(limiter.admit('POST', '/a', undefined)).toBeUndefined();
    limiter.answered('POST', '/a', 200);
    limiter.answered('POST', '/a', 429);
    expect(limiter.snapshot().find((s) => s.route === 'POST /a')?.rate).toBeGreaterThan(0);
    // Another route goes on unpaced.
    for (let i = 0; i < 50; i++) expect(limiter.admit('POST', '/b', undefined)).toBeUndefined();
    // The throttled one: the first goes, the next waits for its turn.
    expect(limiter.admit('POST', '/a', undefined)).toBeUndefined();
    const next = limiter.admit('POST', '/a', undefined);
    expect(next).toBeInstanceOf(Promise);
    expect(limiter.sleeping).toBe(true);
    await next;
    // Waiting a turn on a slowed route is pacing, not a wait on throttling.
    expect(limiter.waitedMs).toBe(0);
    limiter.close();
    expect(limiter.sleeping).toBe(false);
  });

  it('a throttled retry waits its Retry-After, and the wait is counted', async () => {
    const limiter = new RouteLimiter();
    const started = Date.now();
    await limiter.admit('POST', '/a', undefined, 120);
    expect(Date.now() - started).toBeGreaterThanOrEqual(115);
    expect(limiter.waitedMs).toBeGreaterThanOrEqual(115);
    // Two waits at the same time count once.
    const again = new RouteLimiter();
    await Promise.all([again.hold(100), again.hold(100)]);
    expect(again.waitedMs).toBeLessThan(190);
  });

  it('an aborted wait ends at once', async () => {
    const limiter = new RouteLimiter();
    const abort = new AbortController();
    const waiting = limiter.admit('POST', '/a', abort.signal, 60_000);
    abort.abort();
    await expect(waiting).rejects.toMatchObject({ code: 'aborted' });
  });
});

describe('a run without throttling says nothing of it', () => {
  it('the summary line and the report leave it out at 0', async () => {
    const { summaryLine } = await import('../../../src/report/progress.js');
    const base = {
      runId: 'r',
      runDir: '/tmp/r',
      pipeline: 'p',
      outcome: 'completed' as const,
      counts: { completed: 1, failed: 0, nsfw: 0, canceled: 0, unknown: 0, pending: 0, rerolled: 0, reused: 0, inFlight: 0 },
      estimatedUsd: 0,
      durationMs: 5_000,
    };
    expect(summaryLine({ ...base, throttledMs: 0 })).not.toContain('throttling');
    expect(summaryLine({ ...base, throttledMs: 2_345 })).toContain('5.0 s (2.3 s waited on throttling);');
  });
});
