// The contact sheet's grid: axes -> rows, columns and pages, in natural order.
import { describe, expect, it } from 'vitest';
import { chooseLayout, naturalCompare, sortedAxes } from '../../src/gallery/grid-layout.js';
import { instanceAxes } from '../../src/gallery/instance-axes.js';

const axes = (spec: Record<string, number>) =>
  Object.entries(spec).map(([name, n]) => ({ name, values: Array.from({ length: n }, (_, i) => String(i)) }));

describe('grid layout', () => {
  it('puts the axis with the most values down the rows, the next across, the rest on pages', () => {
    expect(chooseLayout(axes({ tier: 4, seed: 20, variation_index: 9 }))).toEqual({
      rows: 'seed',
      cols: 'variation_index',
      pages: ['tier'],
    });
  });

  it('keeps the manifest order between axes of the same size', () => {
    expect(chooseLayout(axes({ seed: 3, variation_index: 3, tier: 3 }))).toEqual({
      rows: 'seed',
      cols: 'variation_index',
      pages: ['tier'],
    });
  });

  it('takes the manifest choice, fills what it leaves open, and ignores names that are no axis', () => {
    expect(
      chooseLayout(axes({ tier: 4, seed: 20, variation_index: 9 }), { rows: 'tier', cols: 'seed', pages: ['variation_index'] }),
    ).toEqual({ rows: 'tier', cols: 'seed', pages: ['variation_index'] });
    expect(chooseLayout(axes({ tier: 4, seed: 20, variation_index: 9 }), { cols: 'tier' })).toEqual({
      rows: 'seed',
      cols: 'tier',
      pages: ['variation_index'],
    });
    expect(chooseLayout(axes({ seed: 2 }), { rows: 'nope', cols: 'seed' })).toEqual({ rows: undefined, cols: 'seed', pages: [] });
  });

  it('a step with one axis or none has no columns or no grid', () => {
    expect(chooseLayout(axes({ seed: 5 }))).toEqual({ rows: 'seed', cols: undefined, pages: [] });
    expect(chooseLayout([])).toEqual({ rows: undefined, cols: undefined, pages: [] });
  });

  it('sorts values naturally: row=2 before row=11, text case aside', () => {
    expect(['11', '2', 'b', 'A', '1'].sort(naturalCompare)).toEqual(['1', '2', '11', 'A', 'b']);
    expect(
      sortedAxes(
        new Map([
          ['row', new Set(['11', '2'])],
          ['col', new Set(['b', 'A'])],
        ]),
      ),
    ).toEqual([
      { name: 'row', values: ['2', '11'] },
      { name: 'col', values: ['A', 'b'] },
    ]);
  });
});

describe('axes read back from instance ids', () => {
  it('reads a plain instance, quoted labels included', () => {
    expect(instanceAxes('sheets[tier=cats,seed=3]')).toEqual({
      step: 'sheets',
      values: [
        ['tier', 'cats'],
        ['seed', '3'],
      ],
    });
    expect(instanceAxes('ads[row=SKU-1,preset="Summer, Market"]').values).toEqual([
      ['row', 'SKU-1'],
      ['preset', 'Summer, Market'],
    ]);
    expect(instanceAxes('banner')).toEqual({ step: 'banner', values: [] });
  });

  it('gives a for_each instance its upstream values first, prefixed when its own axes share a name', () => {
    expect(instanceAxes('clips[sheets[tier=cats,seed=3]]')).toEqual({
      step: 'clips',
      values: [
        ['tier', 'cats'],
        ['seed', '3'],
      ],
    });
    expect(instanceAxes('clips[sheets[tier=cats,seed=3],seed=9]').values).toEqual([
      ['tier', 'cats'],
      ['sheets.seed', '3'],
      ['seed', '9'],
    ]);
    expect(instanceAxes('clips[banner,motion=2]').values).toEqual([['motion', '2']]);
    expect(instanceAxes('more[clips[sheets[tier=cats]]]').values).toEqual([['tier', 'cats']]);
  });
});
