// An attempt's money is read at the price its intent journaled; an attempt from a journal written
// before prices were journaled is read at the step's price instead (the fallback). Pure: the money
// fold (attempt-money.ts) over hand-built attempt states.
import { describe, expect, it } from 'vitest';
import { attemptPrice, moneyOf, settleAttempt, type AttemptState } from '../../../src/run/attempt/attempt-money.js';

const HASH = 'c'.repeat(64);
const intent = (priceUsd?: number | null): AttemptState['intent'] => ({
  type: 'intent',
  instance: 'ads[row=1]',
  model: 'marketing-image',
  idempotencyKey: null,
  bodyHash: HASH,
  ...(priceUsd === undefined ? {} : { priceUsd }),
});
const completed = { status: 'completed' as const };

describe("an attempt's price", () => {
  it('is the one its intent journaled, else the step price, else unpriced', () => {
    expect(attemptPrice({ intent: intent(0.0865) }, 0.04)).toBe(0.0865);
    expect(attemptPrice({ intent: intent(null) }, 0.04)).toBeNull();
    expect(attemptPrice({ intent: intent() }, 0.04)).toBe(0.04);
    expect(attemptPrice(undefined, undefined)).toBeNull();
  });

  it('prices each attempt an instance left behind at its own journaled price', () => {
    // Attempt 1 at 0.0865 completed and was remade; attempt 2 at 0.0438 is unknown; attempt 3 in flight at 0.05.
    const entry: AttemptState = { intent: intent(0.0865), submission: {}, final: completed };
    settleAttempt(entry);
    Object.assign(entry, { intent: intent(0.0438), submission: {}, final: undefined, failed: {} });
    settleAttempt(entry);
    Object.assign(entry, { intent: intent(0.05), submission: {}, failed: undefined });
    const money = moneyOf(entry, 0.99);
    expect(money.chargedUsd).toBeCloseTo(0.0865 + 0.05, 9);
    expect(money.unknownUsd).toBeCloseTo(0.0438, 9);
    expect(money.estimatedUsd).toBeCloseTo(0.0865 + 0.0438 + 0.05, 9);
    expect(money.unpricedAttempts).toBe(0);
  });

  it('counts an attempt journaled unpriced as unpriced, whatever the step price is now', () => {
    const entry: AttemptState = { intent: intent(null), submission: {}, final: completed };
    settleAttempt(entry);
    Object.assign(entry, { intent: intent(null), submission: {}, final: completed });
    const money = moneyOf(entry, 0.05);
    expect(money.unpricedAttempts).toBe(2);
    expect(money.chargedUsd).toBe(0);
  });

  it('reads an older journal (no price in its intents) at the step price', () => {
    const entry: AttemptState = { intent: intent(), submission: {}, final: completed };
    settleAttempt(entry);
    Object.assign(entry, { intent: intent(), submission: {}, failed: {}, final: undefined });
    const money = moneyOf(entry, 0.05);
    expect(money.chargedUsd).toBeCloseTo(0.05, 9);
    expect(money.unknownUsd).toBeCloseTo(0.05, 9);
    expect(moneyOf(entry, null).unpricedAttempts).toBe(2);
  });
});
