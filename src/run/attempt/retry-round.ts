/**
 * What a start does first with an instance an earlier start left behind: a `--retry` round's new
 * attempt (journaled as a `retry`; the attempt left behind keeps its money), or, under
 * `--retry rejected`, a remake of the result the review rejected (remake.ts). Once the walk is over,
 * a rejected id that no instance of the plan has is said in one line each, and the run ends failed.
 */
import { stepOfInstanceId } from '../../plan/instance.js';
import type { ModelAdapter } from '../../models/adapter.js';
import type { PlannedInstance, StepPlan } from '../../plan/plan.js';
import { resumeAction } from '../journal/run-state.js';
import type { RunEffects } from '../run-context.js';
import { mayRemake, retryOf } from './next-step.js';
import type { PhaseDeps } from './phase-deps.js';
import { holdsIntent } from './reclaim-phase.js';
import { rejectsCurrent, remakeRejected } from './remake.js';
import type { RerollSeeds } from './reroll-seeds.js';
import { settle } from './settle.js';

const NOT_IN_PLAN = 'rejected in review, but this run has no such instance, so nothing was made for it';

export class RetryRounds {
  readonly #d: PhaseDeps;
  readonly #seeds: RerollSeeds;
  #rejected: Promise<ReadonlyMap<string, string | undefined>> | undefined;
  /** Rejected ids an instance of the plan has (the rest are said at the end: no such instance). */
  readonly #met = new Set<string>();

  constructor(d: PhaseDeps, seeds: RerollSeeds) {
    this.#d = d;
    this.#seeds = seeds;
  }

  /**
   * A `--retry` round's new attempt or a rejected result's remake, when this start makes one. A
   * rejected result that cannot be made again is kept, said, and then finished as it stands.
   */
  async start(step: StepPlan, adapter: ModelAdapter, planned: PlannedInstance): Promise<void> {
    const fx = this.#d.fx;
    const entry = fx.state.instances.get(planned.id);
    const round = fx.recorded.retryRound;
    const action = resumeAction(entry, adapter.idempotentSubmit, fx.state.suspectAll);
    const retrying = retryOf(action, entry, fx.retry, round);
    const rejected = fx.retry.has('rejected') ? await this.#rejections() : undefined;
    if (rejected?.has(planned.id)) this.#met.add(planned.id);
    // An unknown whose job an earlier coordinator left in Redis is not unknown: the driver learns it.
    if (retrying !== undefined && !(retrying === 'unknown' && (await holdsIntent(this.#d, step, adapter, planned.id)))) {
      await fx.log({ type: 'retry', instance: planned.id, attempt: (entry?.retries ?? 0) + 1, previous: retrying, round }, true);
      return;
    }
    if (!rejected || !mayRemake(entry, fx.retry) || !rejectsCurrent(rejected, planned.id, entry, round)) return;
    // Remade, or kept as it was (then finished as it stands). A kept one is said by the start that
    // asked for the remakes, not again by each plain resume that inherits the round.
    const fate = await remakeRejected(fx, this.#seeds, step, planned, entry, adapter.conversational === true);
    if (fate.kind === 'remade' || askedRemakes(fx)) await settle({ fx, step, instance: planned.id }, fate);
  }

  /** The walk is over: each rejected id no instance of this start's plan has is said, and counted as not remade. */
  async walked(): Promise<void> {
    const fx = this.#d.fx;
    if (!askedRemakes(fx) || fx.stopping) return;
    for (const id of (await this.#rejections()).keys()) {
      if (this.#met.has(id)) continue;
      fx.notRemade++;
      fx.emit({ type: 'instance_skipped', step: stepOfInstanceId(id), instance: id, reason: NOT_IN_PLAN });
    }
  }

  #rejections(): Promise<ReadonlyMap<string, string | undefined>> {
    this.#rejected ??= this.#d.fx.settings.review.rejected();
    return this.#rejected;
  }
}

/** This very start was given `--retry rejected` (not only inheriting it from the run's last start). */
function askedRemakes(fx: RunEffects): boolean {
  return fx.settings.remakeRejected;
}
