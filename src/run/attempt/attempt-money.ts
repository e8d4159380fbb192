/**
 * Money counted per attempt. An instance may be sent more than once over a run's
 * life: an nsfw re-roll, a `--retry`, a remake of a rejected result. Each send is an attempt, and
 * each attempt is paid for on its own at the service (spec §8: charged when submitted, refunded
 * when it ends failed, nsfw or canceled). When an attempt is left behind (a `reroll` or `retry`
 * record), its fate is folded into the instance's `earlier` tally here, so that the report, the
 * budget and progress read the same figure as the service's ledger:
 *
 * - charged: it ended completed (a result was delivered): its price, or the cost the service reported;
 * - refunded: it ended failed, nsfw or canceled at the service: nothing;
 * - unknown: it was sent (or may have been) and its end was never seen: up to its price, shown apart;
 * - none: it provably never reached the service (refused before anything was created, or never sent).
 */
import type { JournalRecordOf } from '../journal/journal-records.js';

/** What an attempt's money is read from: an instance's replayed state (run-state.ts InstanceState). */
export interface AttemptState {
  intent?: JournalRecordOf<'intent'> | undefined;
  submission?: unknown;
  final?: Pick<JournalRecordOf<'status'>, 'status' | 'actualCostUsd'> | undefined;
  failed?: unknown;
  reusedFrom?: string | undefined;
  earlier?: EarlierAttempts | undefined;
  /** A damaged journal line, accepted, named the instance (run-state.ts markCorrupt): it may have been a spent intent. */
  suspect?: boolean | undefined;
}

/**
 * What the attempts an instance left behind cost. An attempt whose intent journaled its price is
 * summed at that price; one from a journal written before prices were journaled is counted, and
 * priced at the step's price when the money is read (moneyOf).
 */
export interface EarlierAttempts {
  /** Attempts that ended completed, with no cost reported and no price journaled: each costs the step's price. */
  charged: number;
  /** Costs the service reported for earlier completed attempts (agent turns), in US$. */
  actualUsd: number;
  /** Attempts whose end is not known, with no price journaled: each may have cost up to the step's price. */
  unknown: number;
  /** Completed attempts at the price their intent journaled, in US$. */
  pricedChargedUsd?: number | undefined;
  /** Attempts whose end is not known, at the price their intent journaled, in US$. */
  pricedUnknownUsd?: number | undefined;
  /** Attempts charged or unknown whose intent journaled no price (unpriced when sent). */
  unpriced?: number | undefined;
}

export type AttemptFate =
  | { fate: 'charged'; actualUsd?: number | undefined }
  | { fate: 'refunded' }
  | { fate: 'unknown' }
  | { fate: 'in_flight' }
  | { fate: 'none' };

/** The fate of an instance's current attempt, as its journal records tell it. */
export function fateOf(entry: AttemptState): AttemptFate {
  if (entry.reusedFrom !== undefined) return { fate: 'none' };
  const final = entry.final;
  if (final) return final.status === 'completed' ? { fate: 'charged', actualUsd: final.actualCostUsd } : { fate: 'refunded' };
  // Sent and followed, but its end was never seen here: a failure of genpipe's (a status it could
  // not read) leaves it unknown; one still being followed is charged, as the service charges a submit.
  if (entry.submission) return entry.failed ? { fate: 'unknown' } : { fate: 'in_flight' };
  // An intent with no answer: the submit may or may not have arrived, unless the run recorded a
  // refusal of it (failed before anything was created: a 4xx the service answered).
  if (entry.intent) return entry.failed ? { fate: 'none' } : { fate: 'unknown' };
  // Its only trace may be a damaged line (`--accept-corrupt`): perhaps an intent whose submit was
  // paid, never resent, so unknown up to the step's price, as the runner treats it.
  return entry.suspect === true && !entry.failed ? { fate: 'unknown' } : { fate: 'none' };
}

/**
 * The price an attempt was sent at: what its intent journaled (null: unpriced), else, for a journal
 * written before prices were journaled or an attempt with no intent, `fallback` (the step's price).
 */
export function attemptPrice(entry: Pick<AttemptState, 'intent'> | undefined, fallback: number | null | undefined): number | null {
  const journaled = entry?.intent?.priceUsd;
  return journaled === undefined ? (fallback ?? null) : journaled;
}

/** The price an attempt's events and settlement tell: its journaled price, else the step's; undefined when unpriced. */
export function toldPrice(
  instances: ReadonlyMap<string, Pick<AttemptState, 'intent'>>,
  id: string,
  step: { readonly priceUsd: number | undefined },
): number | undefined {
  return attemptPrice(instances.get(id), step.priceUsd) ?? undefined;
}

/** Folds the current attempt into the instance's earlier attempts, before a re-roll or retry starts over. */
export function settleAttempt(entry: AttemptState): void {
  const fate = fateOf(entry);
  if (fate.fate === 'none' || fate.fate === 'refunded') return;
  const earlier = (entry.earlier ??= { charged: 0, actualUsd: 0, unknown: 0 });
  const journaled = entry.intent?.priceUsd;
  if (fate.fate === 'charged' && fate.actualUsd !== undefined) earlier.actualUsd += fate.actualUsd;
  else if (journaled === null) earlier.unpriced = (earlier.unpriced ?? 0) + 1;
  // Unknown, or still in flight when it was left behind (its end never seen: charged at submit,
  // and it may yet be refunded): unknown either way.
  else if (fate.fate === 'charged') {
    if (journaled === undefined) earlier.charged++;
    else earlier.pricedChargedUsd = (earlier.pricedChargedUsd ?? 0) + journaled;
  } else if (journaled === undefined) earlier.unknown++;
  else earlier.pricedUnknownUsd = (earlier.pricedUnknownUsd ?? 0) + journaled;
}

/** An instance's money over all its attempts. `priceUsd` null: the step has no known price. */
export interface InstanceMoney {
  /** The step's price for each attempt sent (whatever its end), in US$: what the plan estimated. */
  estimatedUsd: number;
  /** Charged and known: completed attempts, and the current one while in flight, in US$. */
  chargedUsd: number;
  /** Refunded attempts' estimate (the current attempt's, when it ended refunded), in US$. */
  refundedUsd: number;
  /** Attempts whose end is not known, each at its price: the ledger holds between 0 and this more. */
  unknownUsd: number;
  /** Attempts that may have been charged but whose price is unknown (no price, none reported). */
  unpricedAttempts: number;
}

/**
 * An instance's money over all its attempts, each at the price its intent journaled; `priceUsd`
 * (the step's price, null when it has none) stands in for an attempt whose intent journaled none.
 */
export function moneyOf(entry: AttemptState, priceUsd: number | null | undefined): InstanceMoney {
  const fallback = priceUsd ?? null;
  const money: InstanceMoney = { estimatedUsd: 0, chargedUsd: 0, refundedUsd: 0, unknownUsd: 0, unpricedAttempts: 0 };
  if (entry.earlier) addEarlier(money, entry.earlier, fallback);
  const fate = fateOf(entry);
  const price = attemptPrice(entry, fallback);
  if (fate.fate !== 'none') money.estimatedUsd += price ?? 0;
  switch (fate.fate) {
    case 'charged':
    case 'in_flight':
      // The service charges at submit: an attempt in flight costs its price, as a completed one
      // does unless the service reported what it cost.
      if (fate.fate === 'charged' && fate.actualUsd !== undefined) money.chargedUsd += fate.actualUsd;
      else if (price === null) money.unpricedAttempts++;
      else money.chargedUsd += price;
      break;
    case 'refunded':
      money.refundedUsd += entry.final?.actualCostUsd ?? price ?? 0;
      break;
    case 'unknown':
      if (price === null) money.unpricedAttempts++;
      else money.unknownUsd += price;
      break;
    case 'none':
      break;
  }
  return money;
}

/** The attempts an instance left behind, added to its money. */
function addEarlier(money: InstanceMoney, earlier: EarlierAttempts, fallback: number | null): void {
  money.chargedUsd += earlier.actualUsd + (earlier.pricedChargedUsd ?? 0);
  money.unknownUsd += earlier.pricedUnknownUsd ?? 0;
  money.estimatedUsd += (earlier.pricedChargedUsd ?? 0) + (earlier.pricedUnknownUsd ?? 0);
  money.unpricedAttempts += earlier.unpriced ?? 0;
  if (fallback === null) money.unpricedAttempts += earlier.charged + earlier.unknown;
  else {
    money.chargedUsd += earlier.charged * fallback;
    money.unknownUsd += earlier.unknown * fallback;
    money.estimatedUsd += (earlier.charged + earlier.unknown) * fallback;
  }
}
