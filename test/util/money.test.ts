// One formatter for money, with a kind: totals to the cent with thousands separators, an instance's
// amount or a unit price with 2 to 4 decimals; credits likewise; JSON to a millionth.
import { describe, expect, it } from 'vitest';
import { formatMoney, formatSpend, jsonUsd, toCredits } from '../../src/util/format-usd.js';

describe('formatMoney', () => {
  it('writes totals in US$ with 2 decimals and thousands separators', () => {
    expect(formatMoney(1.8406, 'total')).toBe('US$1.84');
    expect(formatMoney(1.8382, 'total')).toBe('US$1.84');
    expect(formatMoney(4.325, 'total')).toBe('US$4.33');
    expect(formatMoney(1_234_567.5, 'total')).toBe('US$1,234,567.50');
    expect(formatMoney(-0.001, 'total')).toBe('US$0.00');
  });

  it('writes an instance amount or a unit price with 2 to 4 decimals', () => {
    expect(formatMoney(0.0865, 'each')).toBe('US$0.0865');
    expect(formatMoney(0.05, 'each')).toBe('US$0.05');
    expect(formatMoney(0.005, 'each')).toBe('US$0.005');
    expect(formatMoney(0.123456, 'each')).toBe('US$0.1235');
    expect(formatMoney(1234.5, 'each')).toBe('US$1,234.50');
  });

  it('writes credits the same way', () => {
    expect(formatMoney(432.5, 'total', 'credits')).toBe('432.50 credits');
    expect(formatMoney(123_456.789, 'total', 'credits')).toBe('123,456.79 credits');
    expect(formatMoney(8.65, 'each', 'credits')).toBe('8.65 credits');
    expect(formatMoney(toCredits(0.0865, 100), 'each', 'credits')).toBe('8.65 credits');
  });

  it('rounds JSON amounts to a millionth', () => {
    expect(jsonUsd(1.839963000001)).toBe(1.839963);
    expect(jsonUsd(0.1 + 0.2)).toBe(0.3);
    expect(Object.is(jsonUsd(-1e-9), 0)).toBe(true);
  });
});

describe('formatSpend', () => {
  it('writes a net as a total, unknown apart', () => {
    expect(formatSpend({ netUsd: 1.839963 })).toBe('US$1.84');
    expect(formatSpend({ netUsd: 1.84, unknownUsd: 0.0865 })).toBe('US$1.84 + up to US$0.09 unknown');
    expect(formatSpend({ netUsd: 4.325 }, 'credits', 100)).toBe('432.50 credits');
  });
});
