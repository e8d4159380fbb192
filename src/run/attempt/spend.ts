/**
 * The run's money while it runs: what is committed so far and the budget it must
 * stay under, as one object. A submit reserves its price before it is sent; the reservation is
 * refunded (by settle.ts, the only caller) when the service provably charged nothing (a refusal, a submit never sent) or refunded
 * it (failed, nsfw, canceled), and is otherwise kept: a charge, or an attempt whose end is unknown.
 *
 * A run starts from what its journal says was committed before (attempt-money.ts: charged, in
 * flight and unknown attempts, over every earlier process of the run), so a budget covers the run's
 * whole life: every resume and every `--retry`.
 */
import { moneyOf } from './attempt-money.js';
import type { RunState } from '../journal/run-state.js';
import { stepOfInstanceId } from '../../plan/instance.js';

export interface Reservation {
  readonly priceUsd: number;
  /**
   * Gives the price back (nothing was charged, or it was refunded). Idempotent. Only `settle()`
   * (settle.ts) calls it: a lint rule refuses any other caller.
   */
  refund(): void;
}

export class Spend {
  #committedUsd: number;

  constructor(
    /** US$; undefined: no budget. */
    readonly budgetUsd: number | undefined,
    committedUsd = 0,
  ) {
    this.#committedUsd = committedUsd;
  }

  /** US$ committed: charged, in flight or unknown, over the run's whole life. */
  get committedUsd(): number {
    return Math.round(this.#committedUsd * 1e6) / 1e6;
  }

  /** Reserves `priceUsd` for a submit; undefined when it would go over the budget (nothing reserved). */
  reserve(priceUsd: number): Reservation | undefined {
    if (this.budgetUsd !== undefined && this.#committedUsd + priceUsd > this.budgetUsd + 1e-9) return undefined;
    this.#committedUsd += priceUsd;
    return this.#held(priceUsd);
  }

  /**
   * The reservation of an attempt an earlier process of the run sent, already in what the journal
   * committed (an attempt followed again, or resent with its own key): nothing is added, and it is
   * refunded the same way when the service refunds it.
   */
  adopt(priceUsd: number): Reservation {
    return this.#held(priceUsd);
  }

  #held(priceUsd: number): Reservation {
    let held = true;
    return {
      priceUsd,
      refund: () => {
        if (!held) return;
        held = false;
        this.#committedUsd -= priceUsd;
      },
    };
  }
}

/** What the journal says was committed: every attempt of every instance, at its step's price. */
export function committedByJournal(state: RunState, priceOfStep: (step: string) => number | undefined): number {
  let total = 0;
  for (const [id, entry] of state.instances) {
    const money = moneyOf(entry, priceOfStep(stepOfInstanceId(id)));
    total += money.chargedUsd + money.unknownUsd;
  }
  return total;
}
