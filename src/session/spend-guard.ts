/**
 * The spend guard of a run (`guardSpend`), and of an entry point that starts runs later, so a schedule cannot spend past what
 * was agreed: `genpipe schedule add` sees the estimate of each run now, through that same guard, and every tick checks again,
 * since a CSV may have grown. A run with a budget is guarded by it; one without, estimated over `--confirm-over`, needs
 * `--yes`, and then may spend up to the estimate approved then, no more.
 */
import type { ConfigFlags } from '../api/config.js';
import { GenpipeError } from '../api/errors.js';
import { confirmSpend } from './confirm-spend.js';
import { planSources } from './plan-sources.js';
import { loadManifestFile } from '../manifest/load.js';
import {
  assertPricedUnderBudget,
  budgetOf,
  DEFAULT_CONFIRM_OVER_USD,
  describeSpend,
  spendToConfirm,
  type BigSpend,
} from '../plan/guards.js';
import { buildPlan, type Plan } from '../plan/plan.js';
import { formatUsd } from '../util/format-usd.js';

/** What the spend guard of a run reads of its options (a session's, or `schedule add`'s). */
export interface SpendGuardOptions {
  budgetUsd?: number | undefined;
  confirmOverUsd?: number | undefined;
  yes?: boolean | undefined;
  /** A big spend with no budget: resolve to go on, throw to refuse. Default: refused (exit 2), as nobody can be asked. */
  confirmSpend?: ((spend: BigSpend) => Promise<void>) | undefined;
}

/** True when a step's price is known only per instance (a price_usd formula, a prices table keyed by input fields). */
export const pricedPerInstance = (plan: Plan): boolean => plan.steps.some((step) => step.price.of !== undefined);

/**
 * The spend guard of a run at its counts, before any instance is checked: `guardSpend`, so a plan
 * of millions priced per step is asked about at once. A plan with a step priced per instance has
 * no true figure yet (a table counts each instance at its dearest row, a formula as unpriced): its
 * budget rules are checked here, and the question waits for the priced plan (`guardSpend` again),
 * so it is asked once, at the figure its estimate prints. Returns the estimate confirmed, if one was.
 */
export async function guardCounts(
  counted: Plan,
  o: SpendGuardOptions,
  agreed: boolean,
  hint: (counted: Plan) => Promise<string | undefined>,
): Promise<number | undefined> {
  if (!pricedPerInstance(counted)) return guardSpend(counted, o, agreed, hint);
  assertPricedUnderBudget(counted, budgetOf(counted, o.budgetUsd));
  return undefined;
}

/**
 * The spend guard of a run, before the lock, the run directory and any request. It runs twice:
 * on the counts (through `guardCounts`), then on the plan whose instances are priced. The budget
 * needs every step priced, and a big spend without one is confirmed. `agreed`: the embedded
 * emulator bills nothing, and a resume was agreed to when its run started. `agreedUsd`: an
 * estimate confirmed already, asked again only if the plan now costs more. Returns the estimate
 * confirmed, if one was.
 */
export async function guardSpend(
  counted: Plan,
  o: SpendGuardOptions,
  agreed: boolean,
  hint: (counted: Plan) => Promise<string | undefined>,
  agreedUsd?: number,
): Promise<number | undefined> {
  const budgetGuard = budgetOf(counted, o.budgetUsd);
  assertPricedUnderBudget(counted, budgetGuard);
  if (agreed || o.yes) return undefined;
  const spend = spendToConfirm(counted, { budget: budgetGuard, confirmOverUsd: o.confirmOverUsd ?? DEFAULT_CONFIRM_OVER_USD });
  if (!spend) return agreedUsd;
  if (agreedUsd !== undefined && spend.estimateUsd <= agreedUsd + 1e-9) return agreedUsd;
  const reuse = await hint(counted);
  await (o.confirmSpend ?? ((big) => confirmSpend(big, {})))(reuse ? { ...spend, reuseHint: reuse } : spend);
  return spend.estimateUsd;
}

export interface RunEstimate {
  /** US$ of the instances whose price is known. */
  estimateUsd: number;
  instances: number;
  /** The budget each run would have (the flag's, else the manifest's). */
  budgetUsd: number | undefined;
  /**
   * Set when the estimate needs confirming: no budget, and over `confirmOverUsd`. The spend the
   * run's guard would ask about (at the priced plan, for a step priced per instance): what a tick
   * must be allowed.
   */
  big: BigSpend | undefined;
}

/**
 * Says what a run of the manifest would spend, through the run's own spend guard (`guardSpend`),
 * nothing sent. A plan priced per step is planned only as far as its counts; one with a step
 * priced per instance is planned through its instances, since only they give its figure.
 */
export async function estimateRun(
  manifestPath: string,
  options: {
    env: NodeJS.ProcessEnv;
    signal?: AbortSignal | undefined;
    connection?: ConfigFlags | undefined;
    budgetUsd?: number | undefined;
    confirmOverUsd?: number | undefined;
  },
): Promise<RunEstimate> {
  const loaded = loadManifestFile(manifestPath);
  const signal = options.signal ?? new AbortController().signal;
  const sources = planSources(options.connection ?? {}, { env: options.env, signal });
  // The spend the guard would ask about is approved here and kept: the caller decides.
  let big: BigSpend | undefined;
  const guard: SpendGuardOptions = {
    budgetUsd: options.budgetUsd,
    confirmOverUsd: options.confirmOverUsd,
    confirmSpend: async (spend) => {
      big = spend;
    },
  };
  const noHint = async (): Promise<undefined> => undefined;
  const estimateOf = (plan: Plan): RunEstimate => ({
    estimateUsd: plan.estimate().knownUsd,
    instances: plan.totalInstances,
    budgetUsd: budgetOf(plan, options.budgetUsd)?.usd,
    big,
  });
  let estimate: RunEstimate | undefined;
  let agreedUsd: number | undefined;
  const counted = new Error('counted');
  try {
    const plan = await buildPlan(loaded, {
      ...sources.options,
      signal,
      beforeInstances: async (plan) => {
        agreedUsd = await guardCounts(plan, guard, false, noHint);
        if (pricedPerInstance(plan)) return;
        // Priced per step, the counts are all the guard needs: the instances are checked when a run starts.
        estimate = estimateOf(plan);
        throw counted;
      },
    });
    await guardSpend(plan, guard, false, noHint, agreedUsd);
    estimate = estimateOf(plan);
  } catch (error) {
    if (error !== counted) throw error;
  } finally {
    await sources.close();
  }
  if (!estimate) throw new GenpipeError('internal', `The plan of ${manifestPath} gave no estimate.`);
  return estimate;
}

/**
 * What a scheduled tick allows: with a budget, its run is guarded by it; without, an estimate over
 * the limit is accepted only up to the one approved when the schedule was added. Throws the one
 * sentence a refused tick logs (exit 2, nothing sent).
 */
export function tickSpendCheck(schedule: string, approvedUsd: number | undefined): (spend: BigSpend) => Promise<void> {
  return async (spend) => {
    if (approvedUsd !== undefined && spend.estimateUsd <= approvedUsd + 1e-9) return;
    const over =
      approvedUsd === undefined
        ? `over the --confirm-over limit of ${formatUsd(spend.confirmOverUsd)}`
        : `over the ${formatUsd(approvedUsd)} approved when the schedule was added`;
    throw new GenpipeError(
      'invalid_input',
      `The scheduled run of ${schedule} was not started: ${describeSpend(spend)}, ${over}, with no budget; nothing was sent. Add the schedule again with --budget USD, or with --yes to approve the new estimate.`,
    );
  };
}
