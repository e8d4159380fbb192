// The views' order of instances (src/plan/instance-order.ts): steps and axes in manifest order,
// recorded values in manifest order, numbers by value, and a sort key that gives that order when
// keys are compared as strings (what the report's external sort does).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { byCodeUnits, compareValues, idOfSortKey, InstanceOrder, type OrderStep } from '../../src/plan/instance-order.js';
import { inManifestOrder } from '../../src/gallery/write-gallery.js';

const STEPS: OrderStep[] = [
  // Written first, so listed first, though `sheets` sorts after `clips` as text.
  { id: 'sheets', for_each: null, axes: { tier: ['normal', 'frogs', 'cats'], row: ['zeta', 'alpha', '"mid row"'] } },
  { id: 'clips', for_each: 'sheets', axes: { motion: ['slow', 'fast'] } },
];

/** Sorted as an external sort would: by key, as strings. */
const byKeys = (order: InstanceOrder, ids: readonly string[]): string[] =>
  ids
    .map((id) => order.sortKey(id))
    .sort(byCodeUnits)
    .map(idOfSortKey);

const shuffled = <T>(items: readonly T[]): T[] => [...items].reverse().sort((a, b) => (String(a).length % 3) - (String(b).length % 3));

describe('InstanceOrder', () => {
  const order = new InstanceOrder(STEPS);

  it('lists steps, axes and recorded values in manifest order; a for_each instance after its upstream, then by its own axes', () => {
    const expected = [
      'sheets[tier=normal,row=zeta]',
      'sheets[tier=normal,row=alpha]',
      'sheets[tier=normal,row="mid row"]',
      'sheets[tier=frogs,row=zeta]',
      'sheets[tier=cats,row=zeta]',
      'clips[sheets[tier=normal,row=zeta],motion=slow]',
      'clips[sheets[tier=normal,row=zeta],motion=fast]',
      'clips[sheets[tier=normal,row=alpha],motion=slow]',
      'clips[sheets[tier=cats,row=zeta],motion=slow]',
      // A step plan.json does not name: last, by its text.
      'extra[seed=1]',
    ];
    expect(byKeys(order, shuffled(expected))).toEqual(expected);
    expect(order.sort(shuffled(expected))).toEqual(expected);
    expect(shuffled(expected).sort(order.compare)).toEqual(expected);
  });

  it('sorts values plan.json did not record (a long range) by number: 9 before 10, -10 before -2, 1.5 between 1 and 2', () => {
    const long = new InstanceOrder([{ id: 's', for_each: null }]);
    const seeds = [-10, -5.5, -5.25, -5, -2, -0.5, 0, 0.25, 1, 1.5, 2, 9, 10, 11, 99, 100, 1e6, 123456789012];
    const ids = seeds.map((seed) => `s[seed=${seed}]`);
    expect(byKeys(long, shuffled(ids))).toEqual(ids);
    // Text after numbers, by code unit.
    expect(long.sort(['s[seed=b]', 's[seed=10]', 's[seed=A]', 's[seed=9]'])).toEqual(['s[seed=9]', 's[seed=10]', 's[seed=A]', 's[seed=b]']);
  });

  it('sorts any numbers by value (property)', () => {
    const long = new InstanceOrder([{ id: 's', for_each: null }]);
    const number = fc.oneof(
      fc.integer({ min: -1e9, max: 1e9 }),
      fc.double({ min: -1e6, max: 1e6, noNaN: true }).filter((n) => !String(n).includes('e')),
    );
    fc.assert(
      fc.property(fc.uniqueArray(number, { minLength: 2, maxLength: 30, selector: (n) => String(n === 0 ? 0 : n) }), (values) => {
        const ids = values.map((v) => `s[seed=${String(v === 0 ? 0 : v)},variation_index=0]`);
        const numeric = [...values].sort((a, b) => a - b).map((v) => `s[seed=${String(v === 0 ? 0 : v)},variation_index=0]`);
        expect(byKeys(long, ids)).toEqual(numeric);
      }),
      { numRuns: 300 },
    );
  });

  it('keeps every id apart and reads it back from its key, whatever characters its labels hold (property)', () => {
    fc.assert(
      fc.property(fc.uniqueArray(fc.string({ maxLength: 8 }), { minLength: 1, maxLength: 20 }), (labels) => {
        const ids = labels.map((l) => `sheets[tier=${JSON.stringify(l)}]`);
        const keys = ids.map((id) => order.sortKey(id));
        expect(keys.map(idOfSortKey)).toEqual(ids);
        expect(new Set(keys).size).toBe(ids.length);
        // Its JSON (a spill line's key) holds no tab or newline.
        for (const key of keys) expect(JSON.stringify(key)).not.toMatch(/[\t\n]/);
      }),
    );
  });

  it('a shorter id of a step (an include with fewer axes) sorts before the longer ones it starts like', () => {
    const ids = ['sheets[tier=normal]', 'sheets[tier=normal,row=zeta]', 'sheets[tier=frogs]'];
    expect(byKeys(order, [...ids].reverse())).toEqual(ids);
  });

  it("the gallery's selector lists values plan.json did not record as cells are ordered: numbers by value, then text", () => {
    expect(['10', 'x', '9', '-1.5', '2'].sort(compareValues)).toEqual(['-1.5', '2', '9', '10', 'x']);
    const step = { id: 's', model: 'm', count: 5, needs: [], for_each: null, price_usd: null };
    expect(inManifestOrder([{ name: 'seed', values: ['10', '9', '-2'] }], step, [step])).toEqual([
      { name: 'seed', values: ['-2', '9', '10'] },
    ]);
  });
});
