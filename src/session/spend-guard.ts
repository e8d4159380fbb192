/**
 * The spend guard of an entry point that starts runs later, so a schedule cannot spend past what was agreed: `genpipe schedule
 * add` sees the estimate of each run now, and every tick checks again, since a CSV may have grown.
 * A run with a budget is guarded by it; one without, estimated over `--confirm-over`, needs `--yes`,
 * and then may spend up to the estimate approved then, no more.
 */
import type { ConfigFlags } from '../api/config.js';
import { GenpipeError } from '../api/errors.js';
import { planSources } from './plan-sources.js';
import { loadManifestFile } from '../manifest/load.js';
import { budgetOf, DEFAULT_CONFIRM_OVER_USD, describeSpend, spendToConfirm, type BigSpend } from '../plan/guards.js';
import { buildPlan } from '../plan/plan.js';
import { formatUsd } from '../util/format-usd.js';

export interface RunEstimate {
  /** US$ of the instances whose price is known. */
  estimateUsd: number;
  instances: number;
  /** The budget each run would have (the flag's, else the manifest's). */
  budgetUsd: number | undefined;
  /** Set when the estimate needs confirming: no budget, and over `confirmOverUsd`. */
  big: BigSpend | undefined;
}

/** Plans the manifest only as far as its counts (no instance checked, nothing sent) and says what a run of it would spend. */
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
  let estimate: RunEstimate | undefined;
  const counted = new Error('counted');
  try {
    await buildPlan(loaded, {
      ...sources.options,
      signal,
      beforeInstances: async (plan) => {
        const budget = budgetOf(plan, options.budgetUsd);
        estimate = {
          estimateUsd: plan.estimate().knownUsd,
          instances: plan.totalInstances,
          budgetUsd: budget?.usd,
          big: spendToConfirm(plan, { budget, confirmOverUsd: options.confirmOverUsd ?? DEFAULT_CONFIRM_OVER_USD }),
        };
        // The counts are all the guard needs: the instances are checked when a run starts.
        throw counted;
      },
    });
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
