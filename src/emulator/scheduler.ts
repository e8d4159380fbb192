/**
 * Every timer of the emulator goes through one Scheduler, so `close()` can stop them all and tests
 * exit cleanly. It also applies the time scale: a model duration of 10 s at `timeScale` 0.001 waits
 * 10 ms; at 0 it waits for the next turn of the event loop.
 */
export class Scheduler {
  readonly timeScale: number;
  #timers = new Set<NodeJS.Timeout>();
  #closed = false;

  constructor(timeScale: number) {
    this.timeScale = timeScale;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Scales a service duration (milliseconds) to wall-clock milliseconds. */
  scale(ms: number): number {
    return Math.max(0, ms * this.timeScale);
  }

  /** Runs `fn` after `ms` wall-clock milliseconds (unscaled). Returns a cancel function. */
  after(ms: number, fn: () => void): () => void {
    if (this.#closed) return () => {};
    const timer = setTimeout(
      () => {
        this.#timers.delete(timer);
        if (!this.#closed) fn();
      },
      Math.max(0, Math.min(ms, 2_147_483_647)),
    );
    this.#timers.add(timer);
    return () => {
      clearTimeout(timer);
      this.#timers.delete(timer);
    };
  }

  /** A promise that resolves after `ms` wall-clock milliseconds, or at close (never rejects). */
  sleep(ms: number): Promise<void> {
    if (ms <= 0 || this.#closed) return Promise.resolve();
    return new Promise((resolve) => {
      const hook = (): void => {
        cancel();
        resolve();
      };
      const cancel = this.after(ms, () => {
        this.#onClose.delete(hook);
        resolve();
      });
      this.#onClose.add(hook);
    });
  }

  #onClose = new Set<() => void>();

  /** Registers a hook run at close (sockets, pending deliveries). */
  onClose(fn: () => void): () => void {
    this.#onClose.add(fn);
    return () => this.#onClose.delete(fn);
  }

  close(): void {
    this.#closed = true;
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
    for (const fn of this.#onClose) fn();
    this.#onClose.clear();
  }
}
