/**
 * "Did you mean ...?" for unknown keys and names: the nearest valid one by edit distance, when close
 * enough. Edit distance costs the product of the two lengths, so it is bounded three ways: words
 * and candidates longer than MAX_SUGGEST_LENGTH get no suggestion, candidates whose length alone
 * rules them out are skipped, and a Suggester stops suggesting once its budget of cells is spent
 * (a manifest with thousands of bad references gets suggestions for the first ones only).
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
      if (candidate.length > MAX_SUGGEST_LENGTH || Math.abs(candidate.length - word.length) > allowed) continue;
      const cost = (word.length + 1) * (candidate.length + 1);
      if (cost > this.budget) return undefined;
      this.budget -= cost;
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
  const rows: number[][] = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  const at = (i: number, j: number): number => rows[i]?.[j] ?? 0;
  for (let i = 1; i <= a.length; i++) {
    const row = rows[i] ?? [];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, at(i - 2, j - 2) + 1);
      row[j] = best;
    }
  }
  return at(a.length, b.length);
}
