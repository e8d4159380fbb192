import { describe, expect, it } from 'vitest';
import { editDistance, MAX_SUGGEST_LENGTH, nearest, Suggester } from '../../src/manifest/suggest.js';

describe('did-you-mean suggestions', () => {
  it('proposes the nearest candidate within a third of the word', () => {
    expect(nearest('concurrancy', ['concurrency', 'retries'])).toBe('concurrency');
    expect(nearest('modle', ['model', 'input'])).toBe('model');
    expect(nearest('banana', ['model', 'input'])).toBeUndefined();
    expect(editDistance('ab', 'ba')).toBe(1);
  });

  it('does not look at words or candidates longer than the limit, or at anything but a string', () => {
    const long = `${'a'.repeat(MAX_SUGGEST_LENGTH)}b`;
    expect(nearest(long.slice(1), [long.slice(1)])).toBe(long.slice(1));
    expect(nearest(long, [long])).toBeUndefined();
    expect(nearest('a'.repeat(MAX_SUGGEST_LENGTH), [long])).toBeUndefined();
    expect(new Suggester().nearest(['nested'], ['nested'])).toBeUndefined();
  });

  it('stops suggesting once its budget of edit-distance cells is spent', () => {
    // Each comparison of two 5-letter words costs 36 cells.
    const suggester = new Suggester(36 * 3);
    expect([1, 2, 3].map(() => suggester.nearest('modle', ['model']))).toEqual(['model', 'model', 'model']);
    expect(suggester.nearest('modle', ['model'])).toBeUndefined();
  });
});
