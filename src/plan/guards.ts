/**
 * Plan-level money checks. `validate`, `plan` and `run` share them, so that the three accept the
 * same manifests, and `run` applies them before it takes the lock, creates the run directory or
 * sends anything.
 */
import { ManifestError } from '../manifest/errors.js';
import { formatCount, formatSpend, formatUsd } from '../util/format-usd.js';
import { formatLocation, type SourceLocation } from '../util/yaml-source.js';
import type { Plan, StepPlan } from './plan.js';
import { isPriced } from './price.js';

/** A run whose estimate is over this many US$, with no budget, is confirmed first (`--confirm-over`). */
export const DEFAULT_CONFIRM_OVER_USD = 100;

/** The budget of a run and where it was set: `--budget` wins over the manifest's `defaults.budget_usd`. */
export interface Budget {
  usd: number;
  /** `--budget`, or the location of `budget_usd` in the manifest. */
  from: '--budget' | SourceLocation;
}

export function budgetOf(plan: Plan, flagUsd?: number): Budget | undefined {
  if (flagUsd !== undefined) return { usd: flagUsd, from: '--budget' };
  const usd = plan.loaded.manifest.defaults?.budget_usd;
  if (usd === undefined) return undefined;
  return { usd, from: plan.loaded.source.locate(['defaults', 'budget_usd']) };
}

const budgetSource = (budget: Budget): string =>
  budget.from === '--budget' ? `--budget ${budget.usd}` : `budget_usd ${budget.usd} at ${formatLocation(budget.from)}`;

const listOf = (items: readonly string[]): string =>
  items.length <= 1 ? (items[0] ?? '') : `${items.slice(0, -1).join(', ')} and ${items.at(-1) ?? ''}`;

/**
 * A budget is a promise about money, and an instance of unknown price could break it unseen: with
 * a budget, every step needs a price. Returns the refusal (located at the first unpriced step, and
 * naming every one of them), or undefined when the plan may run.
 */
export function unpricedUnderBudget(plan: Plan, budget: Budget | undefined): ManifestError | undefined {
  if (budget === undefined) return undefined;
  const unpriced = plan.steps.filter((s) => !isPriced(s.price));
  const first = unpriced[0];
  if (first === undefined) return undefined;
  const named = listOf(unpriced.map((s: StepPlan) => `${s.id} (${s.model})`));
  const models = [...new Set(unpriced.map((s) => s.model))];
  const message =
    unpriced.length === 1
      ? `a budget is set (${budgetSource(budget)}) but step ${named} has no price, so the budget cannot be kept; ` +
        `add its price in US$ per instance to the manifest's prices table (prices: { ${JSON.stringify(first.model)}: 0.10 }) or set price_usd on the step`
      : `a budget is set (${budgetSource(budget)}) but steps ${named} have no price, so the budget cannot be kept; ` +
        `add ${models.length === 1 ? 'their model' : 'each model'} (${listOf(models)}) to the manifest's prices table in US$ per instance, or set price_usd on each step`;
  return new ManifestError([{ location: plan.loaded.source.locate(['steps', first.id], true), path: `steps.${first.id}`, message }]);
}

/** Throws the refusal of `unpricedUnderBudget` (exit 2). */
export function assertPricedUnderBudget(plan: Plan, budget: Budget | undefined): void {
  const refusal = unpricedUnderBudget(plan, budget);
  if (refusal) throw refusal;
}

/** A warning line when the estimate is over the budget (a run stops submitting there), with both figures. */
export function overBudgetWarning(plan: Plan, budget: Budget | undefined): string | undefined {
  if (budget === undefined) return undefined;
  const { knownUsd } = plan.estimate();
  if (knownUsd <= budget.usd + 1e-9) return undefined;
  return `warning: the estimate of ${formatUsd(knownUsd)} is over the budget of ${formatUsd(budget.usd)} (${budgetSource(budget)}); a run stops submitting before going over it`;
}

/** What a run is about to spend, when it is big enough to confirm. */
export interface BigSpend {
  estimateUsd: number;
  instances: number;
  unknownInstances: number;
  confirmOverUsd: number;
  /** What an earlier run of the pipeline already completed, and the flag that reuses it (session/reuse-hint.ts). */
  reuseHint?: string | undefined;
}

/**
 * A run with no budget whose estimate is over `confirmOverUsd` is confirmed before it starts;
 * with a budget there is nothing to confirm, the budget being the guard.
 */
export function spendToConfirm(plan: Plan, options: { budget: Budget | undefined; confirmOverUsd: number }): BigSpend | undefined {
  if (options.budget !== undefined) return undefined;
  const estimate = plan.estimate();
  if (estimate.knownUsd <= options.confirmOverUsd + 1e-9) return undefined;
  return {
    estimateUsd: estimate.knownUsd,
    instances: plan.totalInstances,
    unknownInstances: estimate.unknownInstances,
    confirmOverUsd: options.confirmOverUsd,
  };
}

const instances = (n: number): string => `${formatCount(n)} instance${n === 1 ? '' : 's'}`;

/**
 * `This run is estimated at US$250,000.00 (5,000,000 instances)`; with instances of unknown price,
 * `US$100.05 + 1 unpriced`, or `unpriced: 5 instances of unknown price` when none is priced: never US$0.00 alone.
 */
export function describeSpend(spend: BigSpend): string {
  if (spend.estimateUsd === 0 && spend.unknownInstances > 0)
    return `This run is unpriced: ${instances(spend.unknownInstances)} of unknown price (${instances(spend.instances)})`;
  const estimate = formatSpend({ netUsd: spend.estimateUsd, unpricedInstances: spend.unknownInstances });
  return `This run is estimated at ${estimate} (${instances(spend.instances)})`;
}
