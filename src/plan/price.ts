/**
 * Where a step's price comes from: its own `price_usd`, the manifest's `prices` table, the list
 * price the service's contract states (US$0.05 a character sheet, §8 rule 1), or nowhere. A
 * token-priced model (§8 rule 2) is charged at submit an estimate the service reconciles later to
 * actual token usage: its price is provisional, and a flat number for it is a guess.
 */
import type { ModelSpec } from '../models/model.js';
import { formatUsd } from '../util/format-usd.js';

/** `step`: its price_usd; `manifest`: the prices table; `list`: the contract's list price; `none`: unpriced. */
export type PriceSource = 'step' | 'manifest' | 'list' | 'none';

export interface StepPrice {
  /** US$ per instance, or undefined when unpriced. */
  usd: number | undefined;
  source: PriceSource;
  /** The model is priced by tokens: the charge at submit is reconciled later by the service. */
  tokenPriced: boolean;
}

/** A step's price and where it comes from; pure. */
export function stepPrice(
  stepUsd: number | undefined,
  prices: Readonly<Record<string, number>>,
  model: string,
  spec: ModelSpec,
): StepPrice {
  const tokenPriced = spec.tokenPriced === true;
  if (stepUsd !== undefined) return { usd: stepUsd, source: 'step', tokenPriced };
  const table = prices[model];
  if (table !== undefined) return { usd: table, source: 'manifest', tokenPriced };
  if (spec.listPriceUsd !== undefined) return { usd: spec.listPriceUsd, source: 'list', tokenPriced };
  return { usd: undefined, source: 'none', tokenPriced };
}

const FROM: Record<PriceSource, string> = {
  step: "the step's price_usd",
  manifest: "the manifest's prices table",
  list: "the service's list price",
  none: 'no price: unpriced',
};

/**
 * One line for `plan` and `validate`: `sheets: US$0.05 each, the service's list price`, and for a
 * token-priced model what its figure is (a flat guess, provisional).
 */
export function priceLine(stepId: string, price: StepPrice): string {
  const each = price.usd === undefined ? 'unpriced' : `${formatUsd(price.usd, 'each')} each, from ${FROM[price.source]}`;
  const line = `${stepId}: ${price.usd === undefined ? FROM.none : each}`;
  if (!price.tokenPriced) return line;
  const guess = price.usd === undefined ? '' : ' (a flat guess)';
  return `${line}${guess}; token-priced, so provisional: the service charges an estimate at submit and reconciles it to actual token usage later, which genpipe cannot see`;
}

/**
 * What one attempt of an instance costs, from the instance's rendered input: the price the run
 * reserves against its budget and journals in the attempt's intent. Every money fold reads it
 * there, so a price edited between two starts changes nothing already sent. Undefined: unpriced.
 */
export function attemptPriceUsd(step: { readonly priceUsd: number | undefined }, _input: unknown): number | undefined {
  return step.priceUsd;
}
