/**
 * A step's first submit of a start goes alone: the step's other instances wait for its answer.
 * So a refusal that holds for the whole step (the account has no access to its model) or a server
 * that is not the service (a wrong base URL) is met by one request, not by one per concurrency
 * slot. Once a submit of the step is answered in the service's own shape, the step's submits go
 * at full concurrency; until then each waits for the one before it.
 */
import type { RunEffects } from '../run-context.js';

export class FirstAnswerGate {
  /** Per step: the submit under way that the others wait for, or `open` once one was answered. */
  readonly #steps = new Map<string, Promise<void> | 'open'>();

  /** Waits for the step's turn; the returned function ends it (`answered`: the service answered in its own shape). */
  async enter(fx: RunEffects, step: string): Promise<(answered: boolean) => void> {
    for (let held = this.#steps.get(step); held !== undefined; held = this.#steps.get(step)) {
      if (held === 'open') return () => {};
      await fx.wait(`the first answer of step ${step}`, () => held as Promise<void>);
    }
    let release = (): void => {};
    this.#steps.set(
      step,
      new Promise<void>((resolve) => {
        release = resolve;
      }),
    );
    return (answered) => {
      if (answered) this.#steps.set(step, 'open');
      else this.#steps.delete(step);
      release();
    };
  }
}
