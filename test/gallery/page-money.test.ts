// The gallery page formats money with a browser copy of the server's one formatter: the two must
// write every amount the same, or the page's header and the report disagree on a figure.
import { describe, expect, it } from 'vitest';
import { PAGE_SCRIPT } from '../../src/gallery/page-script.js';
import { formatMoney, formatSpend, formatUsd, type MoneyKind, type MoneyUnit, type SpendFigures } from '../../src/util/format-usd.js';
import { runPage } from '../../src/ui/run-page.js';

type Formatter = (value: number, kind: MoneyKind, unit: MoneyUnit) => string;
type Spend = (money: SpendFigures) => string;

/** The page's copies, cut from the script between their markers and evaluated on their own. */
function pageMoney(): { formatMoney: Formatter; formatSpend: Spend } {
  const begin = PAGE_SCRIPT.indexOf('// money:begin');
  const end = PAGE_SCRIPT.indexOf('// money:end');
  expect(begin).toBeGreaterThan(0);
  expect(end).toBeGreaterThan(begin);
  return new Function(`${PAGE_SCRIPT.slice(begin, end)}\nreturn { formatMoney, formatSpend };`)() as {
    formatMoney: Formatter;
    formatSpend: Spend;
  };
}

const AMOUNTS = [
  0, -0, 0.001, 0.004, 0.005, 0.0438, 0.05, 0.0865, 0.1, 0.3, 1.839963, 1.8406, 2.005, 4.325, 99.995, 999.99, 1000, 1234.0055, 250_000,
  1_234_567.5, -1234.5, 1e21,
];

describe("the gallery's money", () => {
  it('writes every amount, of each kind and unit, as the server does', () => {
    const page = pageMoney().formatMoney;
    // A spread of amounts too, with the rounding edges a sum of prices meets.
    const spread = Array.from({ length: 2000 }, (_, i) => Math.round(i * 7.77777) / 1000 + (i % 3) * 1e-7);
    for (const value of [...AMOUNTS, ...spread])
      for (const kind of ['total', 'each'] as const)
        for (const unit of ['usd', 'credits'] as const)
          expect(page(value, kind, unit), `${value} ${kind} ${unit}`).toBe(formatMoney(value, kind, unit));
  });

  it('writes a sum with unpriced instances as the server does: never US$0.00 alone', () => {
    const page = pageMoney().formatSpend;
    for (const netUsd of [0, 0.05, 1.839963, 1234.5])
      for (const unpricedInstances of [0, 1, 2, 1500])
        for (const unknownUsd of [0, 0.09])
          for (const provisional of [false, true]) {
            const money = { netUsd, unpricedInstances, unknownUsd, provisional };
            expect(page(money), JSON.stringify(money)).toBe(formatSpend(money));
          }
    expect(page({ netUsd: 0, unpricedInstances: 2 })).toBe('unpriced (2 instances)');
    // A figure resting on a token-priced charge at submit is marked with the word the docs define.
    expect(page({ netUsd: 0.56, provisional: true })).toBe('US$0.56 (provisional)');
  });
});

/** The run page's inlined script, as `genpipe ui` serves it. */
function runPageScript(): string {
  const html = runPage('token', '');
  const scripts = [...html.matchAll(/<script>([\s\S]*?)<\/script>/g)].map((m) => m[1] as string);
  expect(scripts).toHaveLength(1);
  return scripts[0] as string;
}

/** A part of `script` between `// NAME:begin` and `// NAME:end`. */
function part(script: string, name: string): string {
  const begin = script.indexOf(`// ${name}:begin`);
  const end = script.indexOf(`// ${name}:end`);
  expect(begin).toBeGreaterThan(0);
  expect(end).toBeGreaterThan(begin);
  return script.slice(begin, end);
}

describe("the run page's money", () => {
  it("labels the spend chart's axis as the server writes a total: the gallery's copy of the formatter, not a format of its own", () => {
    const script = runPageScript();
    const axisUsd = new Function(`${part(script, 'money')}\n${part(script, 'axis')}\nreturn axisUsd;`)() as (
      u: unknown,
      ticks: number[],
    ) => string[];
    // uPlot's ticks: round steps, the rounding edges, and sums past a thousand (grouped: US$1,234.50).
    const ticks = [0, -0, 0.005, 0.05, 0.1, 0.25, 1.5, 2.005, 99.995, 1000, 1234.5, 250_000, -1234.5];
    expect(axisUsd(undefined, ticks)).toEqual(ticks.map((v) => formatUsd(v)));
    expect(axisUsd(undefined, [1234.5])).toEqual(['US$1,234.50']);
    // The page's copy is the gallery's, byte for byte.
    expect(part(script, 'money')).toBe(part(PAGE_SCRIPT, 'money'));
    // No money of its own anywhere else in the script.
    expect(script.replace(part(script, 'money'), '')).not.toMatch(/toFixed|'US\$'/);
  });
});
