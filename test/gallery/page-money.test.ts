// The gallery page formats money with a browser copy of the server's one formatter: the two must
// write every amount the same, or the page's header and the report disagree on a figure.
import { describe, expect, it } from 'vitest';
import { PAGE_SCRIPT } from '../../src/gallery/page-script.js';
import { formatMoney, formatSpend, type MoneyKind, type MoneyUnit, type SpendFigures } from '../../src/util/format-usd.js';

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
