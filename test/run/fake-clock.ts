/**
 * A virtual clock for tests: `sleep` registers a timer on it, `advance` moves time forward and
 * fires due timers in order, letting promise chains settle between them. No real time passes.
 */
import { abortError } from '../../src/api/sleep.js';

interface Timer {
  at: number;
  seq: number;
  resolve: () => void;
}

/** Lets pending promise callbacks run (a macrotask turn drains every microtask queued before it). */
export const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

export class FakeClock {
  #now: number;
  #timers: Timer[] = [];
  #seq = 0;
  sleeps = 0;

  constructor(start = 0) {
    this.#now = start;
  }

  readonly now = (): number => this.#now;

  readonly sleep = (ms: number, signal?: AbortSignal): Promise<void> => {
    if (signal?.aborted) return Promise.reject(abortError(signal));
    this.sleeps++;
    return new Promise<void>((resolve, reject) => {
      const timer: Timer = {
        at: this.#now + Math.max(0, ms),
        seq: this.#seq++,
        resolve: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      const onAbort = (): void => {
        this.#timers = this.#timers.filter((t) => t !== timer);
        reject(abortError(signal));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#timers.push(timer);
    });
  };

  get pendingTimers(): number {
    return this.#timers.length;
  }

  /** Moves time forward by `ms`, firing every timer due on the way, in order. */
  async advance(ms: number): Promise<void> {
    const target = this.#now + ms;
    await settle();
    for (let guard = 0; guard < 1_000_000; guard++) {
      const due = this.#timers.filter((t) => t.at <= target).sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (!due) break;
      this.#timers = this.#timers.filter((t) => t !== due);
      this.#now = Math.max(this.#now, due.at);
      due.resolve();
      await settle();
    }
    this.#now = target;
    await settle();
  }
}
