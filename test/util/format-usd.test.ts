import { afterEach, describe, expect, it, vi } from 'vitest';
import { formatCount, formatUsd } from '../../src/util/format-usd.js';

describe('formatUsd', () => {
  it('writes cents, with a comma every three digits of the dollars', () => {
    expect(formatUsd(0)).toBe('US$0.00');
    expect(formatUsd(0.3)).toBe('US$0.30');
    expect(formatUsd(100)).toBe('US$100.00');
    expect(formatUsd(999.99)).toBe('US$999.99');
    expect(formatUsd(1000)).toBe('US$1,000.00');
    expect(formatUsd(100.05)).toBe('US$100.05');
    expect(formatUsd(250_000)).toBe('US$250,000.00');
    expect(formatUsd(1_234_567.5)).toBe('US$1,234,567.50');
    expect(formatUsd(-1234.5)).toBe('US$-1,234.50');
  });

  it('keeps the digits of a price finer than a cent when it is a price (each), never in a total', () => {
    expect(formatUsd(0.005, 'each')).toBe('US$0.005');
    expect(formatUsd(1234.0055, 'each')).toBe('US$1,234.0055');
    expect(formatUsd(1234.0055)).toBe('US$1,234.01');
  });
});

describe('formatCount', () => {
  it('groups whole counts by thousands', () => {
    expect(formatCount(0)).toBe('0');
    expect(formatCount(999)).toBe('999');
    expect(formatCount(2001)).toBe('2,001');
    expect(formatCount(5_000_000)).toBe('5,000,000');
    expect(formatCount(10_000_000)).toBe('10,000,000');
  });
});

describe('without ICU', () => {
  afterEach(() => {
    vi.restoreAllMocks();
    vi.unstubAllGlobals();
  });

  // toLocaleString and Intl load ICU at start-up (+8 MB RSS): the grouping is done by hand.
  it('formats the same with toLocaleString and Intl unusable', () => {
    const refuse = (): never => {
      throw new Error('ICU used');
    };
    vi.spyOn(Number.prototype, 'toLocaleString').mockImplementation(refuse);
    vi.stubGlobal('Intl', new Proxy({}, { get: refuse }));
    expect(formatUsd(250_000)).toBe('US$250,000.00');
    expect(formatUsd(0.005, 'each')).toBe('US$0.005');
    expect(formatCount(5_000_000)).toBe('5,000,000');
  });
});
