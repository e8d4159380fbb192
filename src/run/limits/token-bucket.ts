/**
 * A requests-per-second token bucket: the run's `--rate` cap on submits. A run no longer slows it
 * on a 429 (route-limiter.ts slows the throttled route alone); it can still slow itself:
 *
 * - Tokens refill at the current rate up to `burst`; `take` waits for one, first come first served.
 * - `slowDown(retryAfterMs)` (call it on a 429): no token until Retry-After has passed, with the
 *   saved-up burst dropped so the queue does not stampede when the pause ends, and the rate halved
 *   (multiplicative decrease). Several 429s within `decreaseCooldownMs` count once: they are
 *   answers to requests sent at the old rate, not new evidence.
 * - Recovery is gradual (additive increase): each `recoveryStepMs` after the last decrease, the rate
 *   climbs back by `recoveryFraction` of the configured rate, never above it. This is TCP's AIMD,
 *   which converges to a fair share of what the service accepts.
 *
 * Time and sleeping are injected, so tests drive a fake clock and assert counts, not milliseconds.
 */
import { GenpipeError } from '../../api/errors.js';
import { abortError, sleep as realSleep } from '../../api/sleep.js';

export interface TokenBucketOptions {
  /** Tokens per second when the service is not throttling. */
  ratePerSecond: number;
  /** Largest number of tokens saved up. Default: the rate rounded up, at least 1. */
  burst?: number;
  /** The rate never drops below this. Default: 1/16 of the rate. */
  minRatePerSecond?: number;
  /** How often the rate climbs back after a slow-down, in ms. Default 5,000. */
  recoveryStepMs?: number;
  /** How much of the configured rate each step gives back. Default 0.1. */
  recoveryFraction?: number;
  /** Slow-downs within this many ms of the last decrease do not decrease again. Default 1,000. */
  decreaseCooldownMs?: number;
  /** Clock in ms. Default `Date.now`. */
  now?: () => number;
  /** Abortable sleep. Default `sleep` from `src/api/sleep.ts`. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

interface Waiter {
  resolve: () => void;
  reject: (error: unknown) => void;
  signal: AbortSignal | undefined;
  onAbort: () => void;
}

export class TokenBucket {
  readonly baseRate: number;
  readonly burst: number;
  readonly minRate: number;
  readonly #recoveryStepMs: number;
  readonly #recoveryFraction: number;
  readonly #cooldownMs: number;
  readonly #now: () => number;
  readonly #sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  #tokens: number;
  #lastRefill: number;
  /** The rate set by the last decrease, and when recovery from it starts. */
  #reducedRate: number;
  #recoverFrom = -Infinity;
  #lastDecrease = -Infinity;
  #pausedUntil = -Infinity;
  #queue: Waiter[] = [];
  /**
   * True from just before the pump starts until it returns, and cleared only by the pump. It is not
   * the pump's promise: a pump that grants its waiter and ends synchronously would clear the marker
   * before `??=` stored the settled promise, and no later waiter would ever be served: the run would hang.
   */
  #pumping = false;
  #wake: AbortController | undefined;

  constructor(options: TokenBucketOptions) {
    const rate = options.ratePerSecond;
    if (!(rate > 0) || !Number.isFinite(rate))
      throw new GenpipeError('config', 'The request rate must be a positive number of requests per second.');
    this.baseRate = rate;
    this.burst = Math.max(1, options.burst ?? Math.ceil(rate));
    this.minRate = Math.min(rate, Math.max(Number.EPSILON, options.minRatePerSecond ?? rate / 16));
    this.#recoveryStepMs = Math.max(1, options.recoveryStepMs ?? 5_000);
    this.#recoveryFraction = Math.min(1, Math.max(0.001, options.recoveryFraction ?? 0.1));
    this.#cooldownMs = Math.max(0, options.decreaseCooldownMs ?? 1_000);
    this.#now = options.now ?? Date.now;
    this.#sleep = options.sleep ?? realSleep;
    this.#tokens = this.burst;
    this.#lastRefill = this.#now();
    this.#reducedRate = rate;
  }

  /** The rate in force now, in tokens per second. */
  get rate(): number {
    return this.#rateAt(this.#now());
  }

  /** How many callers are waiting for a token. */
  get waiting(): number {
    return this.#queue.length;
  }

  /** Takes a token now if one is free and nobody is queued before us. */
  tryTake(): boolean {
    const now = this.#now();
    this.#refill(now);
    if (this.#queue.length > 0 || now < this.#pausedUntil || this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }

  /** Waits for a token, in arrival order. Rejects with an `aborted` error when `signal` fires. */
  take(signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.reject(abortError(signal));
    if (this.tryTake()) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        resolve,
        reject,
        signal,
        onAbort: () => {
          const at = this.#queue.indexOf(waiter);
          if (at !== -1) this.#queue.splice(at, 1);
          reject(abortError(signal));
          // Recompute: the pump may have been sleeping for this waiter's turn.
          this.#wake?.abort();
        },
      };
      signal?.addEventListener('abort', waiter.onAbort, { once: true });
      this.#queue.push(waiter);
      this.#startPump();
    });
  }

  /**
   * Multiplies the current rate by `factor` (in (0, 1]), holding it there until `untilMs` (clock
   * time), then recovering gradually. Never goes below `minRate`.
   */
  throttle(factor: number, untilMs: number): void {
    if (!(factor > 0 && factor <= 1)) throw new GenpipeError('config', 'A throttle factor must be in (0, 1].');
    const now = this.#now();
    this.#refill(now);
    this.#reducedRate = Math.max(this.minRate, this.#rateAt(now) * factor);
    this.#recoverFrom = Math.max(now, untilMs);
    this.#lastDecrease = now;
    this.#wake?.abort();
  }

  /** Gives no token before `untilMs` (clock time), and drops the saved-up burst. */
  pause(untilMs: number): void {
    const now = this.#now();
    this.#refill(now);
    if (untilMs <= now) return;
    this.#pausedUntil = Math.max(this.#pausedUntil, untilMs);
    this.#tokens = Math.min(this.#tokens, 0);
    this.#wake?.abort();
  }

  /** The service throttled (429): pause for Retry-After, if given, and halve the rate once per cooldown. */
  slowDown(retryAfterMs?: number): void {
    const now = this.#now();
    if (retryAfterMs !== undefined && retryAfterMs > 0) this.pause(now + retryAfterMs);
    if (now - this.#lastDecrease >= this.#cooldownMs) this.throttle(0.5, Math.max(now, this.#pausedUntil));
  }

  #rateAt(now: number): number {
    if (now < this.#recoverFrom) return this.#reducedRate;
    const steps = Math.floor((now - this.#recoverFrom) / this.#recoveryStepMs);
    return Math.min(this.baseRate, this.#reducedRate + steps * this.#recoveryFraction * this.baseRate);
  }

  #refill(now: number): void {
    const from = Math.max(this.#lastRefill, this.#pausedUntil);
    // The rate at the start of the interval: the rate only rises between decreases, so this never over-credits.
    if (now > from) this.#tokens = Math.min(this.burst, this.#tokens + ((now - from) * this.#rateAt(from)) / 1000);
    this.#lastRefill = Math.max(this.#lastRefill, now);
  }

  /** Starts the pump unless it runs; it runs until the queue is empty, so one pump serves everyone. */
  #startPump(): void {
    if (this.#pumping) return;
    this.#pumping = true;
    void this.#pump();
  }

  async #pump(): Promise<void> {
    // The loop and the `finally` share one function on purpose: the flag is cleared in the same
    // synchronous step as the last look at the queue. An `await` in between (a wrapper awaiting
    // this loop, say) would let a `take` queue a waiter while the pump is about to stop.
    try {
      // Bounded: each turn either grants the head of the queue or sleeps until a token is due (at
      // least 1 ms); the queue only grows through callers.
      while (this.#queue.length > 0) {
        const now = this.#now();
        this.#refill(now);
        if (now >= this.#pausedUntil && this.#tokens >= 1) {
          this.#tokens -= 1;
          const waiter = this.#queue.shift()!;
          waiter.signal?.removeEventListener('abort', waiter.onAbort);
          waiter.resolve();
          continue;
        }
        const pausedFor = Math.max(0, this.#pausedUntil - now);
        const refillFor = ((1 - Math.max(0, this.#tokens)) * 1000) / this.#rateAt(Math.max(now, this.#pausedUntil));
        const wake = new AbortController();
        this.#wake = wake;
        try {
          await this.#sleep(Math.max(1, Math.ceil(pausedFor + refillFor)), wake.signal);
        } catch {
          // Woken early: the rate changed or a waiter left. Recompute.
        }
        if (this.#wake === wake) this.#wake = undefined;
      }
    } finally {
      this.#pumping = false;
    }
  }
}

/** A TokenBucket as the run holds it: the watchdog is told whether its pump has a timer pending. */
export interface WatchedBucket {
  take(signal?: AbortSignal): Promise<void>;
  /** True while the bucket has a timer pending that will serve its waiters. */
  readonly sleeping: boolean;
  /** Callers waiting for a token. */
  readonly waiting: number;
}

/** The run's TokenBucket at `ratePerSecond`, with the watchdog told whether its pump has a timer pending. */
export function watchedBucket(ratePerSecond: number): WatchedBucket {
  let sleeps = 0;
  const bucket = new TokenBucket({
    ratePerSecond,
    sleep: (ms, signal) => {
      sleeps++;
      return realSleep(ms, signal).finally(() => sleeps--);
    },
  });
  return {
    take: (signal) => bucket.take(signal),
    get sleeping() {
      return sleeps > 0;
    },
    get waiting() {
      return bucket.waiting;
    },
  };
}
