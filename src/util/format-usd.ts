/**
 * Money and counts for people, through one formatter (`formatMoney`) with a kind argument, and the
 * one vocabulary every surface (summary, report, `genpipe runs`, gallery, notifications) uses:
 *
 * - charged: every attempt submitted, at its price (spec §8: the service charges at submit);
 * - refunded: given back for an attempt that ended failed, nsfw or canceled (spec §8);
 * - net: charged less refunded, with the unknown apart (where the service reported an attempt's
 *   cost, that cost);
 * - committed: the budget's measure: charged, plus requests in flight, plus unknown;
 * - unknown: attempts sent (or maybe sent) whose end was never seen, at their price, shown apart
 *   from the net: the account paid between the net and the net plus this;
 * - unpriced: attempts with no known price: never counted as US$0, named beside the sum.
 *
 * JSON keeps its field names: `estimatedUsd` (`estimated_usd`, `spend_usd.estimated`) is what is
 * charged, `netUsd` the net, `unknownUsd` the unknown, `unpricedInstances` the unpriced count.
 *
 * Grouped by hand, on purpose: toLocaleString and Intl load ICU data at start-up (about 8 MB of
 * RSS) for three commas. The gallery's page carries a browser copy of formatMoney
 * (gallery/page-script.ts), tested against this one.
 */

/** Inserts a comma every three digits from the right of a run of digits: `1234567` → `1,234,567`. */
function groupDigits(digits: string): string {
  let out = '';
  for (let i = 0; i < digits.length; i++) {
    if (i > 0 && (digits.length - i) % 3 === 0) out += ',';
    out += digits[i];
  }
  return out;
}

/** Groups the integer part of a number written by toFixed (`-1234.5` → `-1,234.5`); anything else is returned as is. */
function groupFixed(text: string): string {
  const match = /^(-?)(\d+)(\.\d+)?$/.exec(text);
  if (!match) return text; // 1e21 and beyond: toFixed writes an exponent.
  return `${match[1] ?? ''}${groupDigits(match[2] ?? '')}${match[3] ?? ''}`;
}

/** A whole count with thousands separators: `5,000,000`. */
export function formatCount(value: number): string {
  return groupFixed(Math.round(value).toFixed(0));
}

/**
 * - `total`: a run's, step's or model's sum, a budget, what was spent: 2 decimals (`US$1,840.63`);
 * - `each`: an instance's amount or a unit price: 2 to 4 decimals (`US$0.0865`, `US$0.05`).
 */
export type MoneyKind = 'total' | 'each';
export type MoneyUnit = 'usd' | 'credits';

/** `US$1,234.50`, `US$0.0865` each, `432.50 credits`: every figure of money genpipe prints goes through here. */
export function formatMoney(value: number, kind: MoneyKind, unit: MoneyUnit = 'usd'): string {
  const digits = kind === 'total' ? 2 : 4;
  const scale = 10 ** digits;
  let rounded = Math.round(value * scale) / scale;
  if (rounded === 0) rounded = 0; // -0 prints as 0.00, not -0.00.
  let text = rounded.toFixed(digits);
  // Each: at least the cents, and the finer digits a price has (US$0.005, not US$0.0050).
  if (kind === 'each') text = text.replace(/(\.\d\d\d*?)0+$/, '$1');
  const grouped = groupFixed(text);
  return unit === 'usd' ? `US$${grouped}` : `${grouped} credits`;
}

/** US$ of the given kind: a total (2 decimals) unless said otherwise. */
export function formatUsd(value: number, kind: MoneyKind = 'total'): string {
  return formatMoney(value, kind, 'usd');
}

/** An amount in US$ as JSON carries it: rounded to a millionth (no `1.839963000001`). */
export function jsonUsd(value: number): number {
  const rounded = Math.round(value * 1e6) / 1e6;
  return rounded === 0 ? 0 : rounded;
}

/** US$ in credits at the account's rate, to the hundredth of a credit. */
export function toCredits(usd: number, creditsPerUsd: number): number {
  return Math.round(usd * creditsPerUsd * 100) / 100;
}

/** The figures of money a person reads about a run or a group of its instances. */
export interface SpendFigures {
  netUsd: number;
  unknownUsd?: number | undefined;
  unpricedInstances?: number | undefined;
  /** Some of it rests on a token-priced charge at submit, which the service reconciles later. */
  provisional?: boolean | undefined;
}

/**
 * What a run (or a step, a model) cost, for people, the same everywhere (report, summary,
 * `genpipe runs`, gallery, notifications): the net, with unpriced instances named beside it, never
 * counted as US$0.00 (`unpriced (2 instances)`, `US$0.10 + 2 unpriced`), and an unknown amount
 * apart (`+ up to US$0.09 unknown`).
 */
export function formatSpend(money: SpendFigures, unit: MoneyUnit = 'usd', creditsPerUsd = 100): string {
  const unpriced = money.unpricedInstances ?? 0;
  const unknown = money.unknownUsd ?? 0;
  const amount = (usd: number): string => formatMoney(unit === 'usd' ? usd : toCredits(usd, creditsPerUsd), 'total', unit);
  const parts = [
    unpriced > 0 && money.netUsd === 0 ? `unpriced (${formatCount(unpriced)} instance${unpriced === 1 ? '' : 's'})` : amount(money.netUsd),
  ];
  if (unpriced > 0 && money.netUsd !== 0) parts.push(`${formatCount(unpriced)} unpriced`);
  if (unknown > 0) parts.push(`up to ${amount(unknown)} unknown`);
  return `${parts.join(' + ')}${money.provisional ? ' (provisional)' : ''}`;
}
