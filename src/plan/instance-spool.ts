/**
 * The instances of a plan as the lines of `genpipe plan --json`'s "instances" array, spooled to a
 * file as the validation pass hands them over (synchronously, a megabyte at a time: byte-sink.ts),
 * at most `limit` per step. Each line but a spool's first starts with the comma that separates it
 * from the one before; a helper thread's spool (parallel-plan.ts) continues another, so its first
 * line has one too.
 */
import { ByteSink } from '../util/byte-sink.js';
import type { PlannedInstance } from './plan.js';

export class InstanceSpool {
  #count = 0;
  readonly #perStep = new Map<string, number>();
  readonly #sink: ByteSink;

  constructor(
    path: string,
    private readonly options: { limit?: number | undefined; continues?: boolean } = {},
  ) {
    this.#sink = new ByteSink(path);
  }

  get path(): string {
    return this.#sink.path;
  }

  add(instance: PlannedInstance): void {
    const { limit } = this.options;
    if (limit !== undefined) {
      const n = this.#perStep.get(instance.step) ?? 0;
      if (n >= limit) return;
      this.#perStep.set(instance.step, n + 1);
    }
    this.#sink.add((this.#count++ === 0 && !this.options.continues ? '\n' : ',\n') + instanceJson(instance));
  }

  /** Flushes and closes the file (a second close does nothing). */
  close(): void {
    this.#sink.close();
  }
}

/** One instance as `plan --json` shows it. */
export function instanceJson(i: PlannedInstance): string {
  // A key is `gp1-` and hex digits: its JSON is the key in quotes.
  const key = i.key;
  // An instance of a step priced per instance (a table, a formula) gives its own price, to the micro-dollar.
  const price = i.priceUsd === undefined ? '' : `,"price_usd":${String(i.priceUsd)}`;
  return `{"id":${JSON.stringify(i.id)},"step":${JSON.stringify(i.step)},"values":${JSON.stringify(i.values)},"upstream":${i.upstream === undefined ? 'null' : JSON.stringify(i.upstream)},"key":${key === undefined ? 'null' : `"${key}"`}${price},"body":${i.canonical}}`;
}
