/**
 * Seeds for re-rolls: an nsfw result made again, or a rejected one remade. A re-roll never buys a
 * duplicate of another instance of the plan, so its seed is one no instance of the step sends and
 * no earlier re-roll of the run took (journaled ones included).
 */
import { sha256Hex } from '../../api/transport.js';
import { SEED_MAX, seedMovedOn } from '../../models/model.js';
import { definitionOf } from '../../models/registry.js';
import type { OptionsCatalog } from '../../api/wire.js';
import { InstanceError, type Plan, type PlannedInstance, type StepPlan } from '../../plan/plan.js';
import type { InstanceState } from '../journal/run-state.js';

/** Axes up to this many values are held as a set; longer ones must be arithmetic (ranges). */
const SEED_SET_MAX = 200_000;

export class RerollSeeds {
  /** Seeds given to re-rolls (journaled ones included), so two re-rolls never send the same one. */
  readonly #taken = new Set<number>();
  /** Per step, which seeds its own instances send (see seedMembership). */
  readonly #stepSeeds = new Map<string, (seed: number) => boolean>();

  constructor(
    private readonly plan: Plan,
    private readonly catalog: OptionsCatalog | undefined,
    journaled: Iterable<InstanceState>,
  ) {
    for (const entry of journaled) if (entry.rerollSeed !== undefined) this.#taken.add(entry.rerollSeed);
  }

  /**
   * A seed no instance of the step uses and no earlier re-roll of this run took: drawn from the
   * instance id and attempt (so it is stable to read), then probed upwards. Undefined when the
   * model takes no seed.
   */
  next(step: StepPlan, instance: PlannedInstance, attempt: number): number | undefined {
    if (definitionOf(step.model)?.seeded !== true || instance.body === null || typeof instance.body !== 'object') return undefined;
    const used = this.#seedsOf(step);
    const start = Number.parseInt(sha256Hex(`${instance.id}\u0000${attempt}`).slice(0, 8), 16) % SEED_MAX;
    for (let probe = 0; probe < SEED_MAX; probe++) {
      const seed = ((start + probe) % SEED_MAX) + 1;
      if (!used(seed) && !this.#taken.has(seed)) {
        this.#taken.add(seed);
        return seed;
      }
    }
    return undefined;
  }

  /** Which seeds the step's own instances send, as a membership test (computed once per step). */
  #seedsOf(step: StepPlan): (seed: number) => boolean {
    let test = this.#stepSeeds.get(step.id);
    if (!test) {
      test = seedMembership(step, () => {
        const seeds = new Set<number>();
        for (const entry of this.plan.entries(step.id, this.catalog)) {
          if (entry instanceof InstanceError) continue;
          const seed = (entry.body as { seed?: unknown } | null)?.seed;
          if (typeof seed === 'number') seeds.add(seed);
        }
        return seeds;
      });
      this.#stepSeeds.set(step.id, test);
    }
    return test;
  }
}

/** The instance as this attempt sends it: with its journaled re-roll seed, or as an older genpipe re-rolled it. */
export function instanceNow(step: StepPlan, planned: PlannedInstance, entry: InstanceState | undefined): PlannedInstance {
  if (entry?.rerollSeed !== undefined) return withSeed(planned, entry.rerollSeed);
  return entry && entry.rerolls > 0 ? rerolledBefore(step, planned, entry.rerolls) : planned;
}

/** The instance with another seed (a re-roll), hence another body and key. */
export function withSeed(instance: PlannedInstance, seed: number): PlannedInstance {
  return instance.withBody({ ...(instance.body as Record<string, unknown>), seed });
}

/** An instance re-rolled by a genpipe older than journaled seeds, as that genpipe sent it (the model's rerolledBefore). */
function rerolledBefore(step: StepPlan, instance: PlannedInstance, times: number): PlannedInstance {
  const body = instance.body as Record<string, unknown>;
  const definition = definitionOf(step.model);
  return instance.withBody(definition?.rerolledBefore ? definition.rerolledBefore(body, times) : seedMovedOn(body, times));
}

/**
 * Which seeds a step's instances send. A seed written as one sweep axis (`seed: "{{ s }}"`) is
 * tested against that axis (a range without enumerating it) and the include entries; a literal is
 * itself; no seed field means no instance sends one; any other template is enumerated.
 */
function seedMembership(step: StepPlan, enumerate: () => Set<number>): (seed: number) => boolean {
  const written = (step.step.input as Record<string, unknown> | undefined)?.seed;
  if (written === undefined) return () => false;
  if (typeof written === 'number') return (seed) => seed === written;
  const name = typeof written === 'string' ? /^\s*\{\{\s*([A-Za-z_]\w*)\s*\}\}\s*$/.exec(written)?.[1] : undefined;
  const axis = name === undefined ? undefined : step.matrix.axes.find((a) => a.name === name);
  if (!axis || name === undefined) {
    const seeds = step.forEach === undefined ? enumerate() : new Set<number>();
    return (seed) => seeds.has(seed);
  }
  const included = new Set((step.matrix.include ?? []).map((entry) => entry[name]).filter((v): v is number => typeof v === 'number'));
  const first = axis.value(0);
  const second = axis.length > 1 ? axis.value(1) : undefined;
  if (
    axis.length > SEED_SET_MAX &&
    typeof first === 'number' &&
    typeof second === 'number' &&
    axis.value(axis.length - 1) === first + (second - first) * (axis.length - 1)
  ) {
    const stride = second - first;
    return (seed) => {
      const k = (seed - first) / stride;
      return included.has(seed) || (Number.isInteger(k) && k >= 0 && k < axis.length && axis.value(k) === seed);
    };
  }
  for (let i = 0; i < axis.length; i++) {
    const value = axis.value(i);
    if (typeof value === 'number') included.add(value);
  }
  return (seed) => included.has(seed);
}
