/**
 * The scheduler: walks the plan's DAG. One feeder per step; a step starts when every step it
 * `needs` is done, and a `for_each` step makes its instances as each upstream instance completes,
 * with no barrier between steps. Each instance holds its step's, its model's and the run's
 * concurrency slots while the instance driver runs it. Stop policies end the feeding: once the run
 * stops, the rest of a step is not rendered, except the attempts an earlier process sent
 * and never saw end, which are still followed (unless the run was interrupted).
 */
import { GenpipeError } from '../api/errors.js';
import { stepOfInstanceId } from '../plan/instance.js';
import { InstanceError, type PlannedInstance, type StepPlan } from '../plan/plan.js';
import type { InstanceDriver, Upstream } from './attempt/instance-driver.js';
import type { RunEffects } from './run-context.js';
import { AsyncQueue, Slots } from './limits/slots.js';

export class Scheduler {
  readonly #fx: RunEffects;
  readonly #driver: InstanceDriver;
  readonly #global: Slots;
  /** Step and model limits, by `step:<id>` or `model:<name>`. */
  readonly #pools = new Map<string, Slots>();

  constructor(fx: RunEffects, driver: InstanceDriver) {
    this.#fx = fx;
    this.#driver = driver;
    this.#global = new Slots(fx.settings.concurrency);
  }

  /** The step's instances whose current attempt was sent by an earlier process and has not ended. */
  #inFlight(stepId: string): Set<string> {
    const ids = new Set<string>();
    for (const [id, entry] of this.#fx.state.instances) {
      if (stepOfInstanceId(id) === stepId && entry.submission !== undefined && entry.final === undefined && entry.failed === undefined)
        ids.add(id);
    }
    return ids;
  }

  async walk(): Promise<void> {
    const done = new Map<string, Promise<void>>();
    const completions = new Map<string, AsyncQueue<Upstream>>();
    for (const step of this.#fx.plan.steps) {
      if (this.#fx.plan.steps.some((s) => s.forEach === step.id)) completions.set(step.id, new AsyncQueue());
    }
    for (const step of this.#fx.plan.steps) done.set(step.id, this.#walkStep(step, done, completions));
    const results = await Promise.allSettled(done.values());
    const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failure) throw failure.reason;
  }

  /** One step: once every step it needs is done, its instances are fed to the driver, each within its limits. */
  async #walkStep(
    step: StepPlan,
    done: ReadonlyMap<string, Promise<void>>,
    completions: ReadonlyMap<string, AsyncQueue<Upstream>>,
  ): Promise<void> {
    for (const need of step.needs) await done.get(need);
    this.#fx.emit({ type: 'step_started', step: step.id });
    const walk = new StepWalk(this.#fx, step, this.#inFlight(step.id));
    const launch = (instance: PlannedInstance): Promise<void> => this.#launch(walk, instance, completions.get(step.id));
    try {
      if (step.forEach === undefined) await this.#feedPlanned(walk, launch);
      else await this.#feedDownstream(step, completions.get(step.forEach) as AsyncQueue<Upstream>, launch);
      await walk.settled();
    } finally {
      completions.get(step.id)?.close();
    }
  }

  /** Takes the instance's slots and hands it to the driver; an instance the run no longer sends is left as the journal has it. */
  async #launch(walk: StepWalk, instance: PlannedInstance, completions: AsyncQueue<Upstream> | undefined): Promise<void> {
    if (this.#fx.stopping && !walk.stillFollowed(instance.id)) return;
    const held: Slots[] = [];
    try {
      for (const slots of this.#limitsFor(walk.step)) {
        await this.#fx.wait('a concurrency slot', () => slots.acquire(this.#fx.signal));
        held.push(slots);
      }
    } catch {
      for (const slots of held) slots.release();
      return;
    }
    walk.started(instance.id);
    const processed = this.#driver.process(walk.step, instance, completions).finally(() => {
      for (const slots of held) slots.release();
    });
    walk.track(processed);
  }

  /** A step of its own (no for_each): its planned instances, rendered one at a time as slots free up. */
  async #feedPlanned(walk: StepWalk, launch: (instance: PlannedInstance) => Promise<void>): Promise<void> {
    const { step } = walk;
    for (const entry of this.#fx.plan.entries(step.id, this.#fx.settings.catalog)) {
      // Once the run stops, the rest of the step is not even rendered: Ctrl-C on a plan of
      // millions ends in moments, and what never started is left as the journal has it (the
      // summary folds the journal), not walked. It is walked on only as far as the last attempt in
      // flight to follow.
      if (this.#fx.stopping && (this.#fx.signal.aborted || walk.inFlight.size === 0)) return;
      if (entry instanceof InstanceError) {
        if (!this.#fx.stopping) throw new GenpipeError('invalid_input', `The plan changed while running: ${entry.message}`);
      } else if (!this.#fx.stopping || walk.inFlight.has(entry.id)) await launch(entry);
    }
  }

  /** A for_each step: its instances as each upstream instance completes (`only: approved`: those approved in review). */
  async #feedDownstream(
    step: StepPlan,
    upstream: AsyncQueue<Upstream>,
    launch: (instance: PlannedInstance) => Promise<void>,
  ): Promise<void> {
    // The upstream instances approved in review, read when the step starts.
    const approved = step.forEachOnly === 'approved' ? await this.#fx.settings.review.approved() : undefined;
    for await (const up of upstream) {
      if (approved && !approved.has(up.instance.id)) continue;
      for (const entry of this.#fx.plan.downstreamOf(step.id, up.instance, up.outputs, this.#fx.settings.catalog)) {
        if (entry instanceof InstanceError) this.#fx.fail(step, entry.instance, 'invalid_input', entry.message);
        else await launch(entry);
      }
    }
  }

  /**
   * The limits an instance of `step` holds while in flight, in the order they are taken: its step's
   * (`concurrency` on the step), its model's (`defaults.model_concurrency`, shared by every step of
   * that model), and the run's.
   */
  #limitsFor(step: StepPlan): Slots[] {
    const limits: Slots[] = [];
    const pool = (key: string, size: number): Slots => {
      let slots = this.#pools.get(key);
      if (!slots) {
        slots = new Slots(size);
        this.#pools.set(key, slots);
      }
      return slots;
    };
    if (step.step.concurrency !== undefined) limits.push(pool(`step:${step.id}`, step.step.concurrency));
    const perModel = this.#fx.plan.loaded.manifest.defaults?.model_concurrency?.[step.model];
    if (perModel !== undefined) limits.push(pool(`model:${step.model}`, perModel));
    limits.push(this.#global);
    return limits;
  }
}

/**
 * What the walk of one step keeps: only the instances in flight are held (a finished one's
 * promise, and all it closes over, is let go at once, so memory stays flat however many instances
 * a step has), and the first error of the step, rethrown once the step has settled.
 */
class StepWalk {
  readonly #running = new Set<Promise<void>>();
  #firstError: { error: unknown } | undefined;

  constructor(
    private readonly fx: RunEffects,
    readonly step: StepPlan,
    /**
     * Attempts an earlier process sent and never saw end: a stop (the budget, a failure policy)
     * ends the sending, never the following of these, which are paid for already and may yet be
     * refunded. Only an interruption (Ctrl-C) leaves them to the next resume.
     */
    readonly inFlight: Set<string>,
  ) {}

  stillFollowed(id: string): boolean {
    return !this.fx.signal.aborted && this.inFlight.has(id);
  }

  started(id: string): void {
    this.inFlight.delete(id);
  }

  track(processed: Promise<void>): void {
    this.#running.add(processed);
    // Settled here, rethrown after the step: an unhandled rejection would kill the process.
    processed
      .catch((error: unknown) => {
        this.#firstError ??= { error };
      })
      .finally(() => this.#running.delete(processed));
  }

  async settled(): Promise<void> {
    await Promise.allSettled([...this.#running]);
    if (this.#firstError) throw this.#firstError.error;
  }
}
