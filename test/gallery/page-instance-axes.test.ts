// The gallery page keeps its own copy of instanceAxes (the page imports nothing): the copy, taken
// out of the page's script between its markers and run here, must read every id as the server's
// gallery/instance-axes.ts does, or review decisions land on the wrong cells.
import { describe, expect, it } from 'vitest';
import { instanceAxes } from '../../src/gallery/instance-axes.js';
import { PAGE_SCRIPT } from '../../src/gallery/page-script.js';

function pageInstanceAxes(): (id: string) => unknown {
  const begin = PAGE_SCRIPT.indexOf('// instance-axes: begin');
  const end = PAGE_SCRIPT.indexOf('// instance-axes: end');
  expect(begin).toBeGreaterThan(0);
  expect(end).toBeGreaterThan(begin);
  return new Function(`${PAGE_SCRIPT.slice(begin, end)}\nreturn instanceAxes;`)() as (id: string) => unknown;
}

const IDS = [
  'banner',
  'sheets[tier=cats,seed=3]',
  'sheets[seed=1,variation_index=0]',
  'ads[row=SKU-1,preset="Summer, Market"]',
  'ads[row=2,headline="a \\"quoted\\", [bracketed] line"]',
  'ads[row=3,city="Zürich",name="北京 Tea Set"]',
  'clips[sheets[tier=cats,seed=3]]',
  'clips[sheets[tier=cats,seed=3],seed=9]',
  'clips[sheets[tier=cats,seed=3],tier=dogs]',
  'clips[banner,motion=2]',
  'more[clips[sheets[tier=cats]]]',
  'more[clips[sheets[preset="x]y",seed=1],motion=2],take=1]',
  'odd[',
  'odd[]',
  'odd[=1]',
];

describe("the gallery page's instanceAxes", () => {
  it('reads every id as the server does', () => {
    const onPage = pageInstanceAxes();
    for (const id of IDS) expect(onPage(id), id).toEqual(instanceAxes(id));
  });

  it('would catch a copy that reads ids differently', () => {
    // The comparison is not vacuous: the ids above give the server more than one shape.
    const shapes = new Set(IDS.map((id) => JSON.stringify(instanceAxes(id))));
    expect(shapes.size).toBe(IDS.length - 1);
    expect(instanceAxes('clips[sheets[tier=cats,seed=3],tier=dogs]').values).toEqual([
      ['sheets.tier', 'cats'],
      ['seed', '3'],
      ['tier', 'dogs'],
    ]);
  });
});
