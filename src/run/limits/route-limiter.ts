/**
 * The per-route limiter: a 429 slows the route that was throttled (one method and path, ids
 * aside), not the whole run, and never to a halt. The transport asks it before every attempt
 * (`admit`) and tells it every answer (`answered`); a route never throttled passes at once.
 *
 * The rules are pure functions of a route's state and the clock, so each is tested on its own:
 * - `throttledRoute` (a 429): the route's rate gives back a modest share (`giveBack`, a tenth) of
 *   the lower of its current rate and what the service let through of it over the last second (the
 *   more of the requests it accepted and of those sent and not refused). 429s within `cooldownMs` of the last decrease give back no second share:
 *   they answer requests sent at the old rate (they correct what was let through, up or down). Under a true rate limit what was let through is the
 *   limit, so one decrease backs the route off as far as it takes; a burst that goes on decreases
 *   it again, cooldown after cooldown, down to `minRate` (never a halt).
 * - `routeRate` (recovery, additive increase): each `stepMs` without a 429 the rate climbs back,
 *   fast (`fastShare` of the ceiling a step) up to the ceiling, what the service let through when it
 *   throttled; it stays there `holdMs`, then goes above by steps that grow (`slowShare`, then twice,
 *   three times that...), so a true limit is probed gently and a ceiling measured while the run sent
 *   little is left behind within seconds.
 * - `forgotten`: a route whose rate is back to `forgetRatio` times its ceiling is no longer limited.
 * - The throttled request itself is retried no earlier than its Retry-After (`admit`'s `waitMs`).
 *
 * `throttledWallMs` says how long the run waited on throttling in all: the wall-clock time during
 * which at least one refused request waited out its Retry-After. A slowed route's pacing is not
 * counted: a request waiting its turn there is sent at the route's rate, it is not held back.
 */
import { abortError, sleep } from '../../api/sleep.js';
import type { RoutePacer } from '../../api/transport.js';

export const ROUTE_RULES = {
  /** The share of the rate a 429 gives back. */
  giveBack: 0.1,
  /** 429s within this of the last decrease count once (about the time an answer to the new rate takes). */
  cooldownMs: 1_000,
  /** How often the rate climbs back. */
  stepMs: 250,
  /** Below the ceiling: this share of the ceiling a step. */
  fastShare: 0.05,
  /** At the ceiling: this long before probing above it (a true limit sits there). */
  holdMs: 2_000,
  /** Above the ceiling: the n-th step adds n times this share of the ceiling. */
  slowShare: 0.005,
  /** Requests per second a throttled route never goes below. */
  minRate: 0.5,
  /** A route back to this many times its ceiling is no longer limited. */
  forgetRatio: 4,
  /** The window over which sends and acceptances are counted. */
  windowMs: 1_000,
} as const;
export type RouteRules = typeof ROUTE_RULES;

/** A throttled route: its rate since its last decrease, and the ceiling it climbs back to. */
export interface RouteState {
  /** Requests per second set by the last decrease. */
  rate: number;
  /** When the last decrease happened (clock ms). */
  since: number;
  /** What the service let through of the route per second when it last throttled (at least `rate`). */
  ceiling: number;
  /** The rate in force when the last decrease came. */
  from: number;
}

/** What the route did over the last window, for a decrease. */
export interface RouteWindow {
  /** Requests sent in the last second. */
  sent: number;
  /** Requests the service accepted (answered 2xx) in the last second. */
  accepted: number;
  /** Requests answered 429 in the last second. */
  throttled: number;
}

/** The rate of a throttled route at `now`: its decreased rate, climbed back step by step. */
export function routeRate(state: RouteState, now: number, rules: RouteRules = ROUTE_RULES): number {
  const steps = Math.max(0, Math.floor((now - state.since) / rules.stepMs));
  const fast = rules.fastShare * state.ceiling;
  const toCeiling = Math.max(0, Math.ceil((state.ceiling - state.rate) / fast));
  if (steps <= toCeiling) return Math.min(state.ceiling, state.rate + steps * fast);
  const above = steps - toCeiling - Math.floor(rules.holdMs / rules.stepMs);
  if (above <= 0) return state.ceiling;
  return state.ceiling * (1 + (rules.slowShare * above * (above + 1)) / 2);
}

/** A 429 on a route (undefined: not limited yet): its state after the decrease, or the same state within the cooldown. */
export function throttledRoute(
  state: RouteState | undefined,
  now: number,
  window: RouteWindow,
  rules: RouteRules = ROUTE_RULES,
): RouteState {
  const cooling = state !== undefined && now - state.since < rules.cooldownMs;
  // Within the cooldown the decrease is the same one, measured again: no second share is given
  // back, and the rest of a burst's answers (acceptances and refusals) correct what was let through.
  const from = cooling ? state.from : state === undefined ? Math.max(rules.minRate, window.sent) : routeRate(state, now, rules);
  // What the service let through (half a request of benefit of the doubt: the window is the
  // client's, not the service's): the limit, when it is one. Nothing sent in the window (an answer
  // slower than the window): no new evidence of how much, only that the current rate is too much.
  // Counted both ways, for either can fall short: answers lag the sends at the start of a burst, and
  // the sends of a burst leave the window before the refusals they got.
  const through = window.sent > 0 ? Math.max(window.accepted, window.sent - window.throttled) + 0.5 : from;
  const ceiling = Math.min(from, through);
  const rate = Math.max(rules.minRate, (1 - rules.giveBack) * ceiling);
  return { rate, since: cooling ? state.since : now, ceiling: Math.max(rate, ceiling), from };
}

/** True once a throttled route has climbed back far enough to be no longer limited. */
export const forgotten = (state: RouteState, now: number, rules: RouteRules = ROUTE_RULES): boolean =>
  routeRate(state, now, rules) >= rules.forgetRatio * state.ceiling;

/** The route of a request: its method and path, with each segment that holds an id (a digit) as `{id}`. */
export function routeOf(method: string, path: string): string {
  const segments = path.split('/').map((s) => (/\d/.test(s) ? '{id}' : s));
  return `${method} ${segments.join('/')}`;
}

/** The wall-clock time covered by at least one of `intervals` ([start, end) in ms): the union's length. */
export function throttledWallMs(intervals: readonly (readonly [number, number])[]): number {
  return mergeIntervals(intervals).reduce((sum, [a, b]) => sum + (b - a), 0);
}

/** The union of intervals as disjoint ones, in order; empty ones dropped. */
export function mergeIntervals(intervals: readonly (readonly [number, number])[]): [number, number][] {
  const sorted = intervals.filter(([a, b]) => b > a).sort((x, y) => x[0] - y[0]);
  const merged: [number, number][] = [];
  for (const [a, b] of sorted) {
    const last = merged[merged.length - 1];
    if (last !== undefined && a <= last[1]) last[1] = Math.max(last[1], b);
    else merged.push([a, b]);
  }
  return merged;
}

/** Counts events over the last window in ten slots: constant time and memory whatever the rate. */
class WindowCount {
  readonly #slots = new Array<number>(10).fill(0);
  readonly #slotMs: number;
  #slotAt = 0;

  constructor(windowMs: number) {
    this.#slotMs = windowMs / 10;
  }

  #roll(now: number): void {
    const slot = Math.floor(now / this.#slotMs);
    const gap = Math.min(10, slot - this.#slotAt);
    for (let i = 1; i <= gap; i++) this.#slots[(this.#slotAt + i) % 10] = 0;
    if (gap > 0) this.#slotAt = slot;
  }

  add(now: number): void {
    this.#roll(now);
    this.#slots[this.#slotAt % 10]! += 1;
  }

  count(now: number): number {
    this.#roll(now);
    return this.#slots.reduce((a, b) => a + b, 0);
  }
}

interface Waiter {
  resolve: () => void;
  reject: (error: unknown) => void;
  signal: AbortSignal | undefined;
  onAbort: () => void;
  queuedAt: number;
}

interface Route {
  state: RouteState | undefined;
  sent: WindowCount;
  accepted: WindowCount;
  throttled: WindowCount;
  queue: Waiter[];
  /** When the next request of a throttled route may go (clock ms). */
  nextAt: number;
  timer: NodeJS.Timeout | undefined;
}

export interface RouteLimiterOptions {
  rules?: RouteRules;
  now?: () => number;
}

/** What a route limiter says of itself, for tests and the progress line. */
export interface RouteSnapshot {
  route: string;
  rate: number | undefined;
  waiting: number;
}

export class RouteLimiter implements RoutePacer {
  readonly #rules: RouteRules;
  readonly #now: () => number;
  readonly #routes = new Map<string, Route>();
  /** Each wait on throttling: [start, end) clock ms. */
  readonly #waits: [number, number][] = [];
  /** Timers pending (Retry-After waits and paced routes), for the run's watchdog. */
  #timers = 0;

  constructor(options: RouteLimiterOptions = {}) {
    this.#rules = options.rules ?? ROUTE_RULES;
    this.#now = options.now ?? Date.now;
  }

  /** True while a wait of this limiter has a timer pending. */
  get sleeping(): boolean {
    return this.#timers > 0;
  }

  /** How long the run waited on throttling so far, in wall-clock ms (throttledWallMs). */
  get waitedMs(): number {
    return throttledWallMs(this.#waits);
  }

  /** The routes throttled now, with their rates. */
  snapshot(): RouteSnapshot[] {
    const now = this.#now();
    return [...this.#routes].map(([route, r]) => ({
      route,
      rate: r.state === undefined ? undefined : routeRate(r.state, now, this.#rules),
      waiting: r.queue.length,
    }));
  }

  /** Waits `ms` on throttling (a refused submit's Retry-After), counted in `waitedMs`. */
  async hold(ms: number, signal?: AbortSignal): Promise<void> {
    if (ms <= 0) return;
    const start = this.#now();
    this.#timers++;
    try {
      await sleep(ms, signal);
    } finally {
      this.#timers--;
      this.#note(start, this.#now());
    }
  }

  admit(method: string, path: string, signal: AbortSignal | undefined, waitMs?: number): Promise<void> | undefined {
    if (waitMs !== undefined && waitMs > 0) return this.hold(waitMs, signal).then(() => this.admit(method, path, signal));
    const key = routeOf(method, path);
    const route = this.#routes.get(key);
    const now = this.#now();
    if (route?.state === undefined || (route.queue.length === 0 && now >= route.nextAt)) {
      const r = route ?? this.#route(key);
      if (r.state !== undefined) r.nextAt = now + 1000 / routeRate(r.state, now, this.#rules);
      r.sent.add(now);
      return undefined;
    }
    if (signal?.aborted) return Promise.reject(abortError(signal));
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        resolve,
        reject,
        signal,
        queuedAt: now,
        onAbort: () => {
          const at = route.queue.indexOf(waiter);
          if (at !== -1) route.queue.splice(at, 1);
          reject(abortError(signal));
        },
      };
      signal?.addEventListener('abort', waiter.onAbort, { once: true });
      route.queue.push(waiter);
      this.#pump(route);
    });
  }

  answered(method: string, path: string, status: number): void {
    const key = routeOf(method, path);
    const now = this.#now();
    const route = this.#routes.get(key) ?? this.#route(key);
    if (status >= 200 && status < 300) {
      route.accepted.add(now);
      if (route.state !== undefined && forgotten(route.state, now, this.#rules) && route.queue.length === 0) route.state = undefined;
    } else if (status === 429) {
      route.throttled.add(now);
      const window = { sent: route.sent.count(now), accepted: route.accepted.count(now), throttled: route.throttled.count(now) };
      route.state = throttledRoute(route.state, now, window, this.#rules);
      route.nextAt = Math.max(route.nextAt, now);
    }
  }

  /** Keeps a wait; a long run's waits are merged now and then, so they take bounded memory. */
  #note(start: number, end: number): void {
    if (end <= start) return;
    this.#waits.push([start, end]);
    if (this.#waits.length < 4_096) return;
    const merged = mergeIntervals(this.#waits);
    this.#waits.splice(0, this.#waits.length, ...merged);
  }

  #route(key: string): Route {
    const route: Route = {
      state: undefined,
      sent: new WindowCount(this.#rules.windowMs),
      accepted: new WindowCount(this.#rules.windowMs),
      throttled: new WindowCount(this.#rules.windowMs),
      queue: [],
      nextAt: 0,
      timer: undefined,
    };
    this.#routes.set(key, route);
    return route;
  }

  /** Serves the route's queue in order at its rate; one timer per route at most. */
  #pump(route: Route): void {
    if (route.timer !== undefined) return;
    for (;;) {
      const waiter = route.queue[0];
      if (waiter === undefined) return;
      const now = this.#now();
      if (route.state !== undefined && now < route.nextAt) {
        this.#timers++;
        route.timer = setTimeout(
          () => {
            this.#timers--;
            route.timer = undefined;
            this.#pump(route);
          },
          Math.max(1, Math.ceil(route.nextAt - now)),
        );
        return;
      }
      route.queue.shift();
      if (route.state !== undefined) route.nextAt = Math.max(route.nextAt, now) + 1000 / routeRate(route.state, now, this.#rules);
      route.sent.add(now);
      waiter.signal?.removeEventListener('abort', waiter.onAbort);
      waiter.resolve();
    }
  }

  /** Stops every timer; waiters still queued are let go (the run is ending). */
  close(): void {
    for (const route of this.#routes.values()) {
      if (route.timer !== undefined) {
        clearTimeout(route.timer);
        route.timer = undefined;
        this.#timers--;
      }
      route.state = undefined;
      this.#pump(route);
    }
  }
}
