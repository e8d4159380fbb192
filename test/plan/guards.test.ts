// The plan-level money checks that validate, plan and run share.
import { describe, expect, it } from 'vitest';
import { ManifestError } from '../../src/manifest/errors.js';
import { loadManifestText } from '../../src/manifest/load.js';
import {
  assertPricedUnderBudget,
  budgetOf,
  describeSpend,
  overBudgetWarning,
  spendToConfirm,
  unpricedUnderBudget,
} from '../../src/plan/guards.js';
import { buildPlan, type Plan } from '../../src/plan/plan.js';

const FILE = '/pipelines/m.yaml';
const plan = (text: string): Promise<Plan> => buildPlan(loadManifestText(text, FILE));

// Line 3 holds the budget (its value at col 25); the steps start on line 5.
const mixed = (budget: string, prices = ''): string => `version: 1
name: mixed
defaults: { budget_usd: ${budget} }
${prices}steps:
  sheets:
    model: character-sheet
    matrix: { seed: [1, 2] }
    input: { tier: cats, seed: "{{ seed }}" }
  ads:
    model: marketing-image
    input: { prompt: shoes }
  clips:
    model: dop
    input: { prompt: a cat walks }
`;

describe('with a budget, every step needs a price', () => {
  it('refuses, located at the first unpriced step, naming every unpriced step and how to fix it', async () => {
    const p = await plan(mixed('5'));
    const refusal = unpricedUnderBudget(p, budgetOf(p));
    expect(refusal).toBeInstanceOf(ManifestError);
    expect(refusal?.code).toBe('invalid_input');
    expect(refusal?.problems).toHaveLength(1);
    expect(refusal?.message).toBe(
      `${FILE}:9:3: steps.ads: a budget is set (budget_usd 5 at ${FILE}:3:25) but steps ads (marketing-image) and clips (dop) have no price, so the budget cannot be kept; ` +
        "add each model (marketing-image and dop) to the manifest's prices table in US$ per instance, or set price_usd on each step",
    );
    expect(() => assertPricedUnderBudget(p, budgetOf(p))).toThrow(refusal?.message);
  });

  it('one unpriced step: names it and shows the prices entry to add', async () => {
    const p = await plan(mixed('5', 'prices: { dop: 0.5 }\n'));
    expect(unpricedUnderBudget(p, budgetOf(p))?.message).toBe(
      `${FILE}:10:3: steps.ads: a budget is set (budget_usd 5 at ${FILE}:3:25) but step ads (marketing-image) has no price, so the budget cannot be kept; ` +
        `add its price in US$ per instance to the manifest's prices table (prices: { "marketing-image": 0.10 }) or set price_usd on the step`,
    );
  });

  it('a --budget counts as a budget, and says where it came from', async () => {
    const p = await plan(mixed('5').replace('defaults: { budget_usd: 5 }\n', ''));
    expect(budgetOf(p)).toBeUndefined();
    expect(unpricedUnderBudget(p, undefined)).toBeUndefined();
    expect(budgetOf(p, 2)).toEqual({ usd: 2, from: '--budget' });
    expect(unpricedUnderBudget(p, budgetOf(p, 2))?.message).toContain(
      'a budget is set (--budget 2) but steps ads (marketing-image) and clips (dop) have no price',
    );
  });

  it('accepts a plan whose every step is priced, by the table or by price_usd', async () => {
    const p = await plan(
      mixed('5', 'prices: { dop: 0.5 }\n').replace('    input: { prompt: shoes }', '    price_usd: 0.04\n    input: { prompt: shoes }'),
    );
    expect(p.steps.map((s) => s.priceUsd)).toEqual([0.05, 0.04, 0.5]);
    expect(unpricedUnderBudget(p, budgetOf(p))).toBeUndefined();
    expect(() => assertPricedUnderBudget(p, budgetOf(p))).not.toThrow();
  });
});

const sheets = (count: number, extra = ''): string =>
  `version: 1\nname: sheets\n${extra}steps:\n  s:\n    model: character-sheet\n    matrix: { seed: { range: { from: 1, to: ${count} } } }\n    input: { tier: cats, seed: "{{ seed }}" }\n`;

describe('an estimate over the budget', () => {
  it('is a warning with both figures and where the budget was set', async () => {
    const p = await plan(sheets(30, 'defaults: { budget_usd: 1 }\n'));
    expect(overBudgetWarning(p, budgetOf(p))).toBe(
      `warning: the estimate of US$1.50 is over the budget of US$1.00 (budget_usd 1 at ${FILE}:3:25); a run stops submitting before going over it`,
    );
    expect(overBudgetWarning(p, budgetOf(p, 2000))).toBeUndefined();
    expect(overBudgetWarning(p, budgetOf(p, 1.5))).toBeUndefined();
    expect(overBudgetWarning(p, undefined)).toBeUndefined();
  });
});

describe('big spends to confirm', () => {
  it('only with no budget, and only over the limit', async () => {
    const p = await plan(sheets(2000));
    expect(p.estimate().knownUsd).toBe(100);
    // At the limit: nothing to confirm; a cent over it: confirm.
    expect(spendToConfirm(p, { budget: undefined, confirmOverUsd: 100 })).toBeUndefined();
    expect(spendToConfirm(p, { budget: undefined, confirmOverUsd: 99.99 })).toEqual({
      estimateUsd: 100,
      instances: 2000,
      unknownInstances: 0,
      confirmOverUsd: 99.99,
    });
    expect(spendToConfirm(p, { budget: { usd: 1, from: '--budget' }, confirmOverUsd: 0 })).toBeUndefined();
  });

  it('describes the spend with thousands separators, and counts instances of unknown price', async () => {
    expect(describeSpend({ estimateUsd: 250_000, instances: 5_000_000, unknownInstances: 0, confirmOverUsd: 100 })).toBe(
      'This run is estimated at US$250,000.00 (5,000,000 instances)',
    );
    const p = await plan(sheets(2001).replace('steps:\n', 'steps:\n  ads:\n    model: marketing-image\n    input: { prompt: shoes }\n'));
    const spend = spendToConfirm(p, { budget: undefined, confirmOverUsd: 100 });
    expect(spend).toBeDefined();
    expect(describeSpend(spend!)).toBe('This run is estimated at US$100.05 + 1 unpriced (2,002 instances)');
  });

  it('never says US$0.00 for a spend whose every instance is unpriced', () => {
    expect(describeSpend({ estimateUsd: 0, instances: 5, unknownInstances: 5, confirmOverUsd: 100 })).toBe(
      'This run is unpriced: 5 instances of unknown price (5 instances)',
    );
  });
});
