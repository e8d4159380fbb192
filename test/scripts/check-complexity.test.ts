// The bound on the run's functions (scripts/check-complexity.mjs): each kind of decision it names
// is counted, nested functions on their own, and a function over the bound is reported.
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain .mjs script, without types.
import { measureSource, overBounds } from '../../scripts/check-complexity.mjs';

interface Measured {
  name: string;
  lines: number;
  decisions: number;
}
const measure = (text: string): Measured[] => measureSource('src/run/x.ts', text) as Measured[];

describe('the complexity check', () => {
  it('counts if, ?:, case, catch, loops, &&, || and ?? (and their assignments) as one decision each', () => {
    const [f] = measure(`function f(a: any) {
      if (a) {}
      const b = a ? 1 : 2;
      switch (a) { case 1: break; case 2: break; default: break; }
      try {} catch {}
      for (;;) break;
      for (const k in a) {}
      for (const v of a) {}
      while (a) break;
      do {} while (a);
      const c = a && b || a ?? b;
      a ||= 1; a &&= 2; a ??= 3;
      return c;
    }`);
    // if 1, ?: 1, case 2, catch 1, loops 5, && || ?? 3, assignments 3.
    expect(f?.decisions).toBe(16);
  });

  it('measures a nested function on its own, not in the function around it', () => {
    const found = measure(`function outer(a: any) {
      const inner = () => (a ? 1 : 2);
      return a && inner();
    }`);
    expect(found.map((f) => [f.name, f.decisions])).toEqual([
      ['outer', 1],
      ['inner', 1],
    ]);
  });

  it('reports a function over 25 decisions or 100 lines', () => {
    const many = `function many(a: any) {\n${Array.from({ length: 26 }, (_, i) => `  if (a === ${i}) return ${i};`).join('\n')}\n}`;
    const long = `function long() {\n${Array.from({ length: 100 }, (_, i) => `  console.log(${i});`).join('\n')}\n}`;
    const fine = `function fine(a: any) {\n${Array.from({ length: 25 }, (_, i) => `  if (a === ${i}) return ${i};`).join('\n')}\n}`;
    const over = overBounds(measureSource('src/run/x.ts', `${many}\n${long}\n${fine}`)) as Measured[];
    expect(over.map((f) => f.name)).toEqual(['many', 'long']);
  });
});
