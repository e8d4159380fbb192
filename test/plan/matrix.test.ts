import { describe, expect, it } from 'vitest';
import { resolveAxis, type ResolvedAxis } from '../../src/manifest/axes.js';
import type { Axis } from '../../src/manifest/schema.js';
import { expandMatrix, MatrixError, productSize, type MatrixSpec } from '../../src/plan/matrix.js';

const list = (name: string, values: Axis & unknown[]): Promise<ResolvedAxis> => resolveAxis(name, values, { dir: '.' });
const labels = (spec: MatrixSpec): string[] => [...expandMatrix(spec)].map((c) => c.label);

describe('matrix expansion', () => {
  it('crosses axes (cartesian product), the last axis turning fastest', async () => {
    const spec = { axes: [await list('tier', ['cats', 'dogs']), await list('seed', [1, 2])] };
    expect(labels(spec)).toEqual(['tier=cats,seed=1', 'tier=cats,seed=2', 'tier=dogs,seed=1', 'tier=dogs,seed=2']);
    expect(productSize(spec)).toBe(4);
  });

  it('integer ranges with a step, up to variation_index 2,147,483,647, stay lazy', async () => {
    const range = await resolveAxis('variation_index', { range: { from: 2_147_483_640, to: 2_147_483_647, step: 3 } }, { dir: '.' });
    expect(range.length).toBe(3);
    expect([0, 1, 2].map((i) => range.value(i))).toEqual([2_147_483_640, 2_147_483_643, 2_147_483_646]);
    const huge = await resolveAxis('seed', { range: { from: 1, to: 1_000_000 } }, { dir: '.' });
    expect(huge.length).toBe(1_000_000);
    expect(huge.value(999_999)).toBe(1_000_000);
  });

  it('zip pairs axes instead of crossing them', async () => {
    const spec = {
      axes: [await list('prompt', ['a', 'b']), await list('seed', [1, 2]), await list('tier', ['cats'])],
      zip: [['prompt', 'seed']],
    };
    expect(labels(spec)).toEqual(['prompt=a,seed=1,tier=cats', 'prompt=b,seed=2,tier=cats']);
  });

  it('zip refuses axes of different lengths, and names that are not axes', async () => {
    const a = await list('a', [1, 2]);
    const b = await list('b', [1]);
    expect(() => labels({ axes: [a, b], zip: [['a', 'b']] })).toThrow(/same length: a has 2, b has 1/);
    expect(() => labels({ axes: [a, b], zip: [['a', 'c']] })).toThrow(MatrixError);
  });

  it('exclude drops every combination matching all of an entry, objects partially', async () => {
    const rows = await list('row', [
      { region: 'EU', id: '1' },
      { region: 'US', id: '2' },
    ]);
    const tier = await list('tier', ['cats', 'dogs']);
    expect(labels({ axes: [tier, rows], exclude: [{ tier: 'dogs', row: { region: 'EU' } }] })).toEqual([
      'tier=cats,row=#0',
      'tier=cats,row=#1',
      'tier=dogs,row=#1',
    ]);
  });

  it('exclude refuses a key that is not an axis', async () => {
    const tier = await list('tier', ['cats']);
    expect(() => labels({ axes: [tier], exclude: [{ color: 'red' }] })).toThrow(/not an axis/);
  });

  it('include adds values to matching combinations without overwriting original values (GitHub semantics)', async () => {
    // The GitHub docs example: fruit x animal, include color/shape/etc.
    const spec = {
      axes: [await list('fruit', ['apple', 'pear']), await list('animal', ['cat', 'dog'])],
      include: [
        { color: 'green' },
        { color: 'pink', animal: 'cat' },
        { fruit: 'apple', shape: 'circle' },
        { fruit: 'banana' },
        { fruit: 'banana', animal: 'cat' },
      ],
    };
    const combos = [...expandMatrix(spec)].map((c) => c.values);
    expect(combos).toEqual([
      { fruit: 'apple', animal: 'cat', color: 'pink', shape: 'circle' },
      { fruit: 'apple', animal: 'dog', color: 'green', shape: 'circle' },
      { fruit: 'pear', animal: 'cat', color: 'pink' },
      { fruit: 'pear', animal: 'dog', color: 'green' },
      { fruit: 'banana' },
      { fruit: 'banana', animal: 'cat' },
    ]);
  });

  it('with no axes, each include entry is a combination; with neither, one empty combination', () => {
    expect(labels({ axes: [], include: [{ a: 1 }, { a: 2 }] })).toEqual(['a=1', 'a=2']);
    expect(labels({ axes: [] })).toEqual(['']);
  });

  it('quotes labels that would make an id ambiguous', async () => {
    const names = await list('name', ['a,b', 'c=d', 'plain']);
    expect(labels({ axes: [names] })).toEqual(['name="a,b"', 'name="c=d"', 'name=plain']);
  });

  it('streams: taking the first combinations of a billion does not build the rest', async () => {
    const a = await resolveAxis('seed', { range: { from: 1, to: 100_000 } }, { dir: '.' });
    const b = await resolveAxis('variation_index', { range: { from: 0, to: 9_999 } }, { dir: '.' });
    const iterator = expandMatrix({ axes: [a, b] });
    expect(iterator.next().value?.label).toBe('seed=1,variation_index=0');
    expect(productSize({ axes: [a, b] })).toBe(1_000_000_000);
  });
});
