/**
 * Where a step's price comes from: its own `price_usd` (a number, or a formula over the request),
 * the manifest's `prices` (a number, or a table keyed by the request's fields), the list price the
 * service's contract states (US$0.05 a character sheet, §8 rule 1), or nowhere. A token-priced
 * model (§8 rule 2) is charged at submit an estimate the service reconciles later to actual token
 * usage: its price is provisional, and a flat number for it is a guess.
 */
import type { ModelSpec } from '../models/model.js';
import { formatUsd } from '../util/format-usd.js';
import type { PathSegment } from '../manifest/template.js';
import { formulaRule, tableFields, tableRule, type PriceOf, type PriceRow, type PriceRule } from './price-rules.js';

/**
 * `step`: its price_usd, a number; `template`: its price_usd, a formula; `manifest`: a number in
 * the prices table; `table`: rows of the prices table; `list`: the contract's list price; `none`: unpriced.
 */
export type PriceSource = 'step' | 'template' | 'manifest' | 'table' | 'list' | 'none';

/** One model's entry in the manifest's `prices`: US$ per instance, or rows keyed by the request's fields. */
export type PriceEntry = number | readonly PriceRow[];

export interface StepPrice {
  /** US$ per instance when the same for every instance; undefined when unpriced or priced per instance. */
  usd: number | undefined;
  source: PriceSource;
  /** The model is priced by tokens: the charge at submit is reconciled later by the service. */
  tokenPriced: boolean;
  /** Priced per instance (`table`, `template`): the price of a request, from its built body. */
  of?: PriceRule | undefined;
  /** Where the per-instance rule is written in the manifest, to locate a request it cannot price. */
  at?: readonly PathSegment[] | undefined;
  /** The request fields the per-instance rule reads, for `plan` and `validate`. */
  fields?: readonly string[] | undefined;
  /** A table's dearest row: what an instance costs at most, for the estimate before the instances are priced. */
  boundUsd?: number | undefined;
  /** Summed over the plan's instances by its validation pass (per-instance prices only). */
  instances?: InstancePrices | undefined;
}

/** A per-instance price over the instances the plan checked. */
export interface InstancePrices {
  count: number;
  sumUsd: number;
  minUsd: number;
  maxUsd: number;
}

/** The sum, smallest and largest of `b` added to `a`. */
export function addPrices(a: InstancePrices | undefined, b: InstancePrices): InstancePrices {
  if (!a) return { ...b };
  return {
    count: a.count + b.count,
    sumUsd: a.sumUsd + b.sumUsd,
    minUsd: Math.min(a.minUsd, b.minUsd),
    maxUsd: Math.max(a.maxUsd, b.maxUsd),
  };
}

/**
 * A step's price and where it comes from; pure. `stepId` locates a formula. Throws
 * PriceFormulaError (price-rules.ts) when `price_usd` is text that is not a formula.
 */
export function stepPrice(
  stepUsd: number | string | undefined,
  prices: Readonly<Record<string, PriceEntry>>,
  model: string,
  spec: ModelSpec,
  stepId = '',
): StepPrice {
  const tokenPriced = spec.tokenPriced === true;
  if (typeof stepUsd === 'string') {
    const { rule, fields } = formulaRule(stepUsd);
    return { usd: undefined, source: 'template', tokenPriced, of: rule, at: ['steps', stepId, 'price_usd'], fields };
  }
  if (stepUsd !== undefined) return { usd: stepUsd, source: 'step', tokenPriced };
  const entry = prices[model];
  if (typeof entry === 'number') return { usd: entry, source: 'manifest', tokenPriced };
  if (entry !== undefined) {
    const boundUsd = Math.max(...entry.map((row) => row.usd));
    return {
      usd: undefined,
      source: 'table',
      tokenPriced,
      of: tableRule(entry),
      at: ['prices', model],
      fields: tableFields(entry),
      boundUsd,
    };
  }
  if (spec.listPriceUsd !== undefined) return { usd: spec.listPriceUsd, source: 'list', tokenPriced };
  return { usd: undefined, source: 'none', tokenPriced };
}

/** True when the step has a price, flat or per instance. */
export const isPriced = (price: StepPrice): boolean => price.source !== 'none';

const FROM: Record<PriceSource, string> = {
  step: "the step's price_usd",
  template: "the step's price_usd formula",
  manifest: "the manifest's prices table",
  table: "the manifest's prices table",
  list: "the service's list price",
  none: 'no price: unpriced',
};

const listOf = (items: readonly string[]): string =>
  items.length <= 1 ? (items[0] ?? '') : `${items.slice(0, -1).join(', ')} and ${items.at(-1) ?? ''}`;

/** `US$0.0438 to US$0.0848 each`, or one figure when every instance costs the same. */
function perInstance(price: StepPrice): string {
  const seen = price.instances;
  if (!seen || seen.count === 0) return 'priced per instance';
  const low = formatUsd(seen.minUsd, 'each');
  return Math.abs(seen.maxUsd - seen.minUsd) < 1e-9 ? `${low} each` : `${low} to ${formatUsd(seen.maxUsd, 'each')} each`;
}

/**
 * One line for `plan` and `validate`: `sheets: US$0.05 each, from the service's list price`, for a
 * table or formula the range its instances span and the fields it reads, and for a token-priced
 * model what its figure is (a flat guess, provisional).
 */
export function priceLine(stepId: string, price: StepPrice): string {
  let line: string;
  if (price.of) {
    const by = price.fields && price.fields.length > 0 ? `, by ${listOf(price.fields)}` : '';
    line = `${stepId}: ${perInstance(price)}, from ${FROM[price.source]}${by}`;
  } else if (price.usd === undefined) line = `${stepId}: ${FROM.none}`;
  else line = `${stepId}: ${formatUsd(price.usd, 'each')} each, from ${FROM[price.source]}`;
  if (!price.tokenPriced) return line;
  const guess = price.usd === undefined ? '' : ' (a flat guess)';
  return `${line}${guess}; token-priced, so provisional: the service charges an estimate at submit and reconciles it to actual token usage later, which genpipe cannot see`;
}

/** What a step's instances cost together, in US$: flat price times count, or its instances' prices summed; undefined when unknown. */
export function stepCostUsd(step: {
  readonly priceUsd: number | undefined;
  readonly count: number;
  readonly price: StepPrice;
}): number | undefined {
  if (step.price.of) return step.price.instances?.count === step.count ? step.price.instances.sumUsd : undefined;
  return step.priceUsd === undefined ? undefined : step.priceUsd * step.count;
}

/** `US$0.05 each`, `US$0.0438 to US$0.0848 each`, or `price unknown`. */
export function eachPrice(price: StepPrice): string {
  if (price.of) return perInstance(price);
  return price.usd === undefined ? 'price unknown' : `${formatUsd(price.usd, 'each')} each`;
}

/** The price of one request of the step: its flat price, or its rule's figure for the request. */
export function priceOfRequest(price: StepPrice, body: unknown): PriceOf | undefined {
  if (price.of) return price.of(body);
  return price.usd === undefined ? undefined : { usd: price.usd };
}

/**
 * What one attempt of an instance costs, from the instance's rendered input: the price the run
 * reserves against its budget and journals in the attempt's intent. Every money fold reads it
 * there, so a price edited between two starts changes nothing already sent. The plan priced each
 * instance as it checked it (`instance.priceUsd`); an instance made without it (read back from a
 * spool) is priced from its body here. Undefined: unpriced.
 */
export function attemptPriceUsd(
  step: { readonly priceUsd: number | undefined; readonly price?: StepPrice | undefined },
  instance: { readonly body: unknown; readonly priceUsd?: number | undefined },
): number | undefined {
  if (instance.priceUsd !== undefined) return instance.priceUsd;
  if (!step.price?.of) return step.priceUsd;
  const priced = step.price.of(instance.body);
  return 'usd' in priced ? priced.usd : undefined;
}
