// Prices that follow an instance's configuration: a prices entry that is a table of rows keyed by
// the request's fields, a price_usd that is a formula over the request. The plan prices every
// instance as it checks it; a request nothing prices is refused, located where the price is written.
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { formatProblem, ManifestError } from '../../src/manifest/errors.js';
import { loadManifestText } from '../../src/manifest/load.js';
import { buildPlan, type Plan } from '../../src/plan/plan.js';
import { attemptPriceUsd, priceLine } from '../../src/plan/price.js';
import { formulaRule, PriceFormulaError, tableRule } from '../../src/plan/price-rules.js';
import { BIN, cleanTemps, tempDir } from '../run/runner-helpers.js';

afterAll(cleanTemps);

const FILE = '/pipelines/m.yaml';
const plan = (text: string): Promise<Plan> => buildPlan(loadManifestText(text, FILE));
const refused = async (text: string): Promise<ManifestError> => {
  const error = await plan(text).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(ManifestError);
  return error as ManifestError;
};

// Lines 3 to 6 hold the prices table; the step's price_usd, when set, is on line 16.
const images = (
  sweep: string,
  price = '',
  table = '    - { when: { resolution: 2k, quality: medium }, usd: 0.0438 }\n    - { when: { resolution: [4k], quality: medium }, usd: 0.0848 }\n',
): string => `version: 1
name: images
prices:
  marketing-image:
${table}steps:
  ads:
    model: marketing-image
    matrix: { resolution: [${sweep}] }
    input:
      prompt: Studio shot of a shoe
      image_urls: ["https://assets.example.test/shoe.png"]
      resolution: "{{ resolution }}"
      quality: medium
${price}`;

describe('a price table', () => {
  it('prices each request by the first row whose fields all match; a row without when is the default', () => {
    const rule = tableRule([
      { when: { quality: 'high', resolution: ['2k', '4k'] }, usd: 0.09 },
      { when: { quality: 'high' }, usd: 0.05 },
      { usd: 0.01 },
    ]);
    expect(rule({ quality: 'high', resolution: '4k' })).toEqual({ usd: 0.09 });
    expect(rule({ quality: 'high', resolution: '1k' })).toEqual({ usd: 0.05 });
    expect(rule({ quality: 'low', resolution: '2k' })).toEqual({ usd: 0.01 });
    // true in the table matches the request's true, and not its absence.
    const enhanced = tableRule([{ when: { enhance_prompt: true }, usd: 0.08 }]);
    expect(enhanced({ enhance_prompt: true })).toEqual({ usd: 0.08 });
    expect(enhanced({})).toHaveProperty('miss');
  });

  it('prices every instance of the plan, and the estimate sums them', async () => {
    const p = await plan(images('2k, 4k'));
    const prices = [...p.instances('ads')].map((i) => i.priceUsd);
    expect(prices).toEqual([0.0438, 0.0848]);
    expect(p.estimate()).toEqual({ knownUsd: 0.1286, unknownInstances: 0 });
    const step = p.step('ads');
    expect(step.price.source).toBe('table');
    expect(priceLine('ads', step.price)).toMatch(
      /^ads: US\$0\.0438 to US\$0\.0848 each, from the manifest's prices table, by resolution and quality; token-priced, so provisional: /,
    );
    // The driver prices an attempt from the instance: the plan's figure, or its body's when it has none.
    const [first] = p.instances('ads');
    expect(attemptPriceUsd(step, first as NonNullable<typeof first>)).toBe(0.0438);
    expect(attemptPriceUsd(step, { body: { resolution: '4k', quality: 'medium' } })).toBe(0.0848);
  });

  it('a request no row matches is refused, located at the prices entry, naming the instance and its fields', async () => {
    const error = await refused(images('2k, 1k'));
    expect(error.problems).toHaveLength(1);
    expect(formatProblem(error.problems[0] as never)).toBe(
      `${FILE}:5:5: prices.marketing-image: ads[resolution=1k]: no row of the price table matches this request (resolution "1k", quality "medium"); add a row for it, or a row without "when" as the default`,
    );
    expect(error.problems[0]?.code).toBe('price');
  });
});

describe('a price_usd formula', () => {
  it('computes over the request: numbers, + - * /, parentheses, input fields, len and ceil; rounded to the micro-dollar', () => {
    const { rule, fields } = formulaRule(
      '{{ 0.08192 + (ceil(len(input.prompt) / 4) + 560 * len(input.image_urls) + 350 * input.enhance_prompt) * 0.000005 }}',
    );
    expect(fields).toEqual(['prompt', 'image_urls', 'enhance_prompt']);
    // 24 characters: 6 tokens; one image: 560; enhanced: 350. 916 tokens at US$5 per million.
    expect(rule({ prompt: 'Run further, rest easier', image_urls: ['x'], enhance_prompt: true })).toEqual({ usd: 0.0865 });
    // No reference images: len of a field the request leaves out is 0.
    expect(rule({ prompt: 'abcde', enhance_prompt: false })).toEqual({ usd: 0.08193 });
    expect(formulaRule('{{ max(0.01, min(2, 3) - -1) / 2 }}').rule({})).toEqual({ usd: 1.5 });
  });

  it('holds no code: anything but its grammar is refused when parsed', () => {
    for (const text of [
      '{{ process.exit(1) }}',
      '{{ input.prompt.constructor("x") }}',
      '{{ 1 + }}',
      '{{ (1 }}',
      '{{ }}',
      '0.05',
      '{{ 1; 2 }}',
      '{{ ceil(1, 2) }}',
    ]) {
      expect(() => formulaRule(text), text).toThrow(PriceFormulaError);
    }
  });

  it('prices each instance, and plan says where the price comes from', async () => {
    const p = await plan(images('2k, 4k', '    price_usd: "{{ 0.04 + len(input.prompt) * 0.001 }}"\n'));
    expect([...p.instances('ads')].map((i) => i.priceUsd)).toEqual([0.061, 0.061]);
    expect(p.estimate().knownUsd).toBe(0.122);
    expect(priceLine('ads', p.step('ads').price)).toMatch(
      /^ads: US\$0\.061 each, from the step's price_usd formula, by prompt; token-priced/,
    );
  });

  it('a formula that gives no price for a request is refused, located at price_usd', async () => {
    const error = await refused(images('2k', '    price_usd: "{{ len(input.prompt) * 0.001 + input.seed }}"\n'));
    expect(formatProblem(error.problems[0] as never)).toBe(
      `${FILE}:16:16: steps.ads.price_usd: ads[resolution=2k]: input.seed has no value in this request`,
    );
    const bad = await refused(images('2k', '    price_usd: "{{ eval(1) }}"\n'));
    expect(formatProblem(bad.problems[0] as never)).toMatch(
      new RegExp(`^${FILE}:16:16: steps.ads.price_usd: "eval" is not input.FIELD or a function`),
    );
  });
});

describe('the estimate before and after the instances are priced', () => {
  it('counts a table at its dearest row before the validation pass, and each instance at its own price after', async () => {
    let before: number | undefined;
    const p = await buildPlan(loadManifestText(images('2k, 4k'), FILE), {
      beforeInstances: (counted) => {
        before = counted.estimate().knownUsd;
      },
    });
    expect(before).toBe(0.1696);
    expect(p.estimate().knownUsd).toBe(0.1286);
  });

  it("is the same when a second thread prices the plan's last instances", () => {
    const dir = tempDir('genpipe-price-rules-');
    const path = join(dir, 'images.yaml');
    writeFileSync(
      path,
      images(
        '1k, 2k, 4k',
        '',
        '    - { when: { resolution: 1k }, usd: 0.0221 }\n    - { when: { resolution: 2k }, usd: 0.0438 }\n    - { usd: 0.0848 }\n',
      ),
    );
    const planJson = (parallel: boolean): { estimate: unknown; steps: unknown[] } => {
      const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, ...(parallel ? { GENPIPE_PLAN_PARALLEL_MIN: '1' } : {}) };
      const result = spawnSync(process.execPath, [BIN, 'plan', path, '--json'], { env, encoding: 'utf8', timeout: 60_000 });
      expect(result.status, result.stderr).toBe(0);
      return JSON.parse(result.stdout) as { estimate: unknown; steps: unknown[] };
    };
    const one = planJson(false);
    const two = planJson(true);
    expect(one.estimate).toEqual({ known_usd: 0.1507, unknown_instances: 0 });
    expect(two.estimate).toEqual(one.estimate);
    expect(two.steps).toEqual([expect.objectContaining({ price_usd: null, price_source: 'table', token_priced: true, cost_usd: 0.1507 })]);
  });
});
