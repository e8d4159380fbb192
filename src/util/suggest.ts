/**
 * "Did you mean ...?" for unknown keys and names: the nearest valid one by edit distance, when close
 * enough. Edit distance costs the product of the two lengths, so it is bounded three ways: words
 * and candidates longer than MAX_SUGGEST_LENGTH get no suggestion, candidates whose length alone
 * rules them out are skipped (for one cell each), and a Suggester stops suggesting once its budget
 * of cells is spent (a manifest with thousands of bad references gets suggestions for the first
 * ones only).
 */

/** Longest word, in characters, that gets a suggestion (or is suggested). */
export const MAX_SUGGEST_LENGTH = 64;
/** Edit-distance cells one manifest may spend on suggestions: a few milliseconds' work. */
export const SUGGEST_BUDGET_CELLS = 2_000_000;

export class Suggester {
  constructor(private budget: number = SUGGEST_BUDGET_CELLS) {}

  /** The nearest candidate within a third of the word's length (at least one edit), or undefined. */
  nearest(word: unknown, candidates: readonly string[]): string | undefined {
    if (typeof word !== 'string' || word.length === 0 || word.length > MAX_SUGGEST_LENGTH) return undefined;
    const allowed = Math.max(1, Math.floor(word.length / 3));
    const lower = word.toLowerCase();
    let best: string | undefined;
    let bestDistance = Number.POSITIVE_INFINITY;
    for (const candidate of candidates) {
      // A candidate skipped on its length still costs one cell: thousands of names, each read by
      // thousands of bad references, must not turn into millions of look-ups either.
      const skip = candidate.length > MAX_SUGGEST_LENGTH || Math.abs(candidate.length - word.length) > allowed;
      const cost = skip ? 1 : (word.length + 1) * (candidate.length + 1);
      if (cost > this.budget) return undefined;
      this.budget -= cost;
      if (skip) continue;
      const d = editDistance(lower, candidate.toLowerCase());
      if (d < bestDistance) {
        best = candidate;
        bestDistance = d;
      }
    }
    return bestDistance <= allowed ? best : undefined;
  }
}

/** The nearest valid key by edit distance, when close enough; see Suggester. */
export function nearest(word: string, candidates: readonly string[]): string | undefined {
  return new Suggester().nearest(word, candidates);
}

/** Optimal string alignment distance: insertions, deletions, substitutions and adjacent transpositions. */
export function editDistance(a: string, b: string): number {
  // Three rolling rows (i - 2, i - 1, i) of typed arrays: no allocation per cell.
  let before = new Int32Array(b.length + 1);
  let previous = Int32Array.from({ length: b.length + 1 }, (_, j) => j);
  let current = new Int32Array(b.length + 1);
  for (let i = 1; i <= a.length; i++) {
    current[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min((previous[j] as number) + 1, (current[j - 1] as number) + 1, (previous[j - 1] as number) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, (before[j - 2] as number) + 1);
      current[j] = best;
    }
    [before, previous, current] = [previous, current, before];
  }
  return previous[b.length] as number;
}
