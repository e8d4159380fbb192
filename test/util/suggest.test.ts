import { describe, expect, it } from 'vitest';
import { editDistance, MAX_SUGGEST_LENGTH, nearest, Suggester } from '../../src/util/suggest.js';

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

describe('the suggestion budget over many names', () => {
  it('counts candidates skipped on their length, so 15,000 bad names over 15,000 steps stay bounded', () => {
    const steps = Array.from({ length: 15_000 }, (_, i) => `step-${i}`);
    // No step is near these names: every candidate is skipped on its length alone.
    const suggester = new Suggester(1_000_000);
    const answered = Array.from({ length: 15_000 }, (_, i) => suggester.nearest(`a-much-longer-name-${i}`, steps));
    expect(answered.every((a) => a === undefined)).toBe(true);
    // Those 225 million skips drew on the budget (about 800,000 cells are needed below), so the
    // look-ups stopped early; a fresh suggester with the same budget still answers.
    expect(new Suggester(1_000_000).nearest('step-7x', steps)).toBe('step-7');
    expect(suggester.nearest('step-7x', steps)).toBeUndefined();
  });
});

describe('edit distance', () => {
  it('counts insertions, deletions, substitutions and adjacent transpositions', () => {
    const cases: [string, string, number][] = [
      ['', '', 0],
      ['', 'abc', 3],
      ['abc', '', 3],
      ['kitten', 'sitting', 3],
      ['concurrancy', 'concurrency', 1],
      ['ca', 'abc', 3], // optimal string alignment: no edit of a transposed pair
      ['abcdef', 'badcfe', 3],
      ['for_each', 'foreach', 1],
    ];
    for (const [a, b, d] of cases) {
      expect([a, b, editDistance(a, b)]).toEqual([a, b, d]);
      expect(editDistance(b, a)).toBe(d);
    }
  });
});
