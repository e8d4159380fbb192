import { describe, expect, it } from 'vitest';
import { formatBytes } from '../../src/util/format-bytes.js';

describe('formatBytes', () => {
  it('writes sizes in decimal units with three significant figures, trailing zeros dropped', () => {
    expect(formatBytes(0)).toBe('0 B');
    expect(formatBytes(999)).toBe('999 B');
    expect(formatBytes(1000)).toBe('1 kB');
    expect(formatBytes(1234)).toBe('1.23 kB');
    expect(formatBytes(120_000)).toBe('120 kB');
    expect(formatBytes(150_000_000)).toBe('150 MB');
    expect(formatBytes(1_500_000)).toBe('1.5 MB');
    expect(formatBytes(999_499)).toBe('999 kB');
    expect(formatBytes(999_500)).toBe('1 MB');
    expect(formatBytes(1.05e9)).toBe('1.05 GB');
  });

  it('never writes an exponent or a negative size', () => {
    expect(formatBytes(5e18)).toBe('5000 PB');
    expect(formatBytes(-3)).toBe('0 B');
    expect(formatBytes(Number.NaN)).toBe('0 B');
  });
});
