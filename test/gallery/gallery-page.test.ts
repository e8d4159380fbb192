// The page of a running run, which must stay cheap to rewrite on big runs: its cells are kept packed, and written as data
// files of GALLERY_PAGE_CELLS cells beside a gallery.html that holds their index. What the files
// hold must be what the cells say, exactly: every field of every cell, the axes, natural order,
// text that could end a <script> escaped; a rewrite writes only the data files whose cells
// changed, and removes those of an earlier write that the page no longer names.
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cellLists, GalleryCells, type Cell, type GalleryData } from '../../src/gallery/gallery-data.js';
import { dataFileOf, GALLERY_DATA_DIR, GALLERY_PAGE_CELLS, galleryFiles } from '../../src/gallery/gallery-page.js';
import { writeGallery, type WrittenPages } from '../../src/gallery/write-gallery.js';
import type { InstanceState } from '../../src/run/journal/run-state.js';
import { cleanTemps, tempDir } from '../run/runner-helpers.js';
import { readGallery, readGalleryDir, runDataFile } from './read-gallery.js';

afterAll(cleanTemps);

const HOSTILE = 'bad </script><!-- \u2028 \u2029 "quoted" & done';

function stateOf(seed: number, v: number): InstanceState {
  const instance = `sheets[seed=${seed},variation_index=${v}]`;
  const entry: InstanceState = { rerolls: 0, retries: 0, submission: { kind: 'request', requestId: `req-${seed}-${v}` } };
  if (v % 3 === 0) {
    entry.final = { type: 'status', at: 1, instance, status: 'failed', outputs: [], error: `${HOSTILE} ${seed}` };
    return entry;
  }
  entry.final = { type: 'status', at: 1, instance, status: 'completed', outputs: [] };
  entry.downloads = new Map([
    [0, { type: 'downloaded', at: 1, instance, output: 0, path: `outputs/sheets/${seed}-${v}.bin`, sha256: 'f'.repeat(64), size: 1 }],
  ]);
  if (v === 4) entry.rerollSeed = 1000 + seed;
  return entry;
}

const plan = {
  pipeline: 'page',
  runId: 'r1',
  steps: [{ id: 'sheets', model: 'character-sheet', for_each: null, count: 5_000, price_usd: 0.05, gallery: undefined }],
} as never;
const prices = new Map([['sheets', 0.05]]);
const states: [string, InstanceState][] = [];
for (let seed = 50; seed >= 1; seed--)
  for (let v = 0; v < 100; v++) states.push([`sheets[seed=${seed},variation_index=${v}]`, stateOf(seed, v)]);

const dataFiles = (runDir: string): string[] => readdirSync(join(runDir, GALLERY_DATA_DIR)).sort();
const inode = (runDir: string, file: string): number => statSync(join(runDir, file)).ino;

describe('gallery page and data files of a running run', () => {
  it(`writes ${5_000} packed cells as data files of ${GALLERY_PAGE_CELLS}, exactly as the live cells read, in natural order, with live ones laid over`, async () => {
    const kept = new GalleryCells(prices);
    // All but the last 20 finished (kept packed); those 20 are still in the run's state.
    for (const [id, entry] of states.slice(0, -20)) kept.add(id, entry);
    const live = states.slice(-20);
    const runDir = tempDir();
    await writeGallery(runDir, { plan, cells: kept.withLive(live) });
    // The layout: gallery.html and five data files of 1,000 cells, named by step and page.
    expect(dataFiles(runDir)).toEqual(['sheets.0001.js', 'sheets.0002.js', 'sheets.0003.js', 'sheets.0004.js', 'sheets.0005.js']);
    expect(dataFileOf('sheets', 0)).toBe('gallery-data/sheets.0001.js');
    const html = readFileSync(join(runDir, 'gallery.html'), 'utf8');
    // The page holds the index, not the cells: no error text, no request id.
    expect(html).not.toContain('req-1-1');
    expect(html).not.toContain('bad \\u003c/script>');
    const page = readGalleryDir(runDir);
    const step = page.steps[0];
    expect(step?.pages.map((p) => [p.file, p.count])).toEqual([1, 2, 3, 4, 5].map((n) => [`gallery-data/sheets.000${n}.js`, 1_000]));
    // The same cells made straight from the states (nothing packed).
    const expected = cellLists(new GalleryCells(prices).withLive(states)).get('sheets') as Cell[];
    expect(step?.cells).toEqual(expected);
    expect(step?.cells.map((c) => c.id).slice(0, 3)).toEqual([
      'sheets[seed=1,variation_index=0]',
      'sheets[seed=1,variation_index=1]',
      'sheets[seed=1,variation_index=2]',
    ]);
    expect(step?.cells[1]).toEqual({
      id: 'sheets[seed=1,variation_index=1]',
      values: { seed: '1', variation_index: '1' },
      status: 'completed',
      files: [{ path: 'outputs/sheets/1-1.bin', kind: 'other' }],
      costUsd: 0.05,
      requestId: 'req-1-1',
    });
    expect(step?.cells[0]?.error).toBe(`${HOSTILE} 1`);
    expect(step?.cells.at(-1)?.id).toBe('sheets[seed=50,variation_index=99]');
    expect(step?.axes).toEqual([
      { name: 'seed', values: Array.from({ length: 50 }, (_, i) => String(i + 1)) },
      { name: 'variation_index', values: Array.from({ length: 100 }, (_, i) => String(i)) },
    ]);
    expect(step?.layout).toEqual({ rows: 'variation_index', cols: 'seed', pages: [] });
    expect(step).toMatchObject({ id: 'sheets', model: 'character-sheet', forEach: null, planned: 5_000, count: 5_000 });
    // What the cells cost: 3,333 completed at US$0.05, failures refunded.
    expect(step?.spendUsd).toBeCloseTo(
      expected.reduce((sum, c) => sum + (c.costUsd ?? 0), 0),
      9,
    );
    expect(page).toMatchObject({ pipeline: 'page', runId: 'r1', pageCells: GALLERY_PAGE_CELLS });
    // The hostile text is JSON-escaped in the data file: no `<`, no raw line separators.
    const first = readFileSync(join(runDir, 'gallery-data/sheets.0001.js'), 'utf8');
    expect(first.startsWith('window.__genpipeCells(0,0,')).toBe(true);
    expect(first).toContain('bad \\u003c/script>\\u003c!-- \\u2028 \\u2029 \\"quoted\\" & done');
  });

  it('galleryFiles of the same cells gives the same index and cells as writeGallery', async () => {
    const cells = cellLists(new GalleryCells(prices).withLive(states)).get('sheets') as Cell[];
    const axes = [
      { name: 'seed', values: Array.from({ length: 50 }, (_, i) => String(i + 1)) },
      { name: 'variation_index', values: Array.from({ length: 100 }, (_, i) => String(i)) },
    ];
    const data: GalleryData = {
      pipeline: 'page',
      runId: 'r1',
      writtenAt: 'now',
      steps: [
        {
          id: 'sheets',
          model: 'character-sheet',
          forEach: null,
          planned: 5_000,
          axes,
          layout: { rows: 'variation_index', cols: 'seed', pages: [] },
          cells,
        },
      ],
    };
    const files = galleryFiles(data);
    expect([...files.keys()].sort()).toEqual([
      'gallery-data/sheets.0001.js',
      'gallery-data/sheets.0002.js',
      'gallery-data/sheets.0003.js',
      'gallery-data/sheets.0004.js',
      'gallery-data/sheets.0005.js',
      'gallery.html',
    ]);
    const read = readGallery((path) => files.get(path) as string);
    expect(read.steps[0]?.cells).toEqual(JSON.parse(JSON.stringify(cells)));
    const runDir = tempDir();
    await writeGallery(runDir, { plan, cells: new GalleryCells(prices).withLive(states) });
    const written = readGalleryDir(runDir).steps[0];
    expect(written?.index).toEqual(read.steps[0]?.index);
    expect(written?.cells).toEqual(read.steps[0]?.cells);
  });

  it('a rewrite writes only the data files whose cells changed, then the page', async () => {
    const sorted = [...states].sort(([a], [b]) => a.localeCompare(b, 'en', { numeric: true }));
    const kept = new GalleryCells(prices);
    for (const [id, entry] of sorted.slice(0, 4_500)) kept.add(id, entry);
    const runDir = tempDir();
    const written: WrittenPages = new Map();
    await writeGallery(runDir, { plan, cells: kept.withLive([]) }, { written });
    expect(dataFiles(runDir)).toHaveLength(5);
    const before = dataFiles(runDir).map((f) => inode(runDir, `${GALLERY_DATA_DIR}/${f}`));
    const pageBefore = inode(runDir, 'gallery.html');
    // Ten more cells at the end: only the last data file (and the page) change.
    for (const [id, entry] of sorted.slice(4_500, 4_510)) kept.add(id, entry);
    await writeGallery(runDir, { plan, cells: kept.withLive([]) }, { written });
    const after = dataFiles(runDir).map((f) => inode(runDir, `${GALLERY_DATA_DIR}/${f}`));
    expect(after.slice(0, 4)).toEqual(before.slice(0, 4));
    expect(after[4]).not.toBe(before[4]);
    expect(inode(runDir, 'gallery.html')).not.toBe(pageBefore);
    expect(readGalleryDir(runDir).steps[0]?.count).toBe(4_510);
    // A cell that changes in the second file (a re-roll laid over it, live): that file is written again.
    const [changedId, changedEntry] = sorted[1_500] as [string, InstanceState];
    await writeGallery(runDir, { plan, cells: kept.withLive([[changedId, { ...changedEntry, rerollSeed: 777 }]]) }, { written });
    const third = dataFiles(runDir).map((f) => inode(runDir, `${GALLERY_DATA_DIR}/${f}`));
    expect(third[0]).toBe(after[0]);
    expect(third[1]).not.toBe(after[1]);
    expect(third.slice(2)).toEqual(after.slice(2));
    expect(readGalleryDir(runDir).steps[0]?.cells[1_500]).toMatchObject({ id: changedId, rerollSeed: 777 });
    // The index kept from earlier writes is the one a fresh write makes, also once a new label
    // (seed 0, before every other) moves every cell's position on its axis.
    const fresh = async (): Promise<number[] | undefined> => {
      const other = tempDir();
      await writeGallery(other, { plan, cells: kept.withLive([]) });
      return readGalleryDir(other).steps[0]?.index;
    };
    await writeGallery(runDir, { plan, cells: kept.withLive([]) }, { written });
    expect(readGalleryDir(runDir).steps[0]?.index).toEqual(await fresh());
    kept.add('sheets[seed=0,variation_index=1]', stateOf(0, 1));
    await writeGallery(runDir, { plan, cells: kept.withLive([]) }, { written });
    const moved = readGalleryDir(runDir).steps[0];
    expect(moved?.index).toEqual(await fresh());
    expect(moved?.cells[0]).toMatchObject({ id: 'sheets[seed=0,variation_index=1]', values: { seed: '0', variation_index: '1' } });
    expect(moved?.cells[1]?.values).toEqual({ seed: '1', variation_index: '0' });
    // No temp file is left behind.
    expect(readdirSync(runDir).filter((f) => f.endsWith('.tmp'))).toEqual([]);
    expect(dataFiles(runDir).filter((f) => !f.endsWith('.js'))).toEqual([]);
  });

  it('removes the data files of an earlier write that the page no longer names', async () => {
    const runDir = tempDir();
    await writeGallery(runDir, { plan, cells: new GalleryCells(prices).withLive(states) });
    expect(dataFiles(runDir)).toHaveLength(5);
    // A file of another step an older page had, left over.
    writeFileSync(join(runDir, GALLERY_DATA_DIR, 'gone.0001.js'), 'window.__genpipeCells(0,0,"x",[]);\n');
    const fewer = new GalleryCells(prices);
    for (const [id, entry] of states.slice(0, 1_500)) fewer.add(id, entry);
    await writeGallery(runDir, { plan, cells: fewer.withLive([]) });
    expect(dataFiles(runDir)).toEqual(['sheets.0001.js', 'sheets.0002.js']);
    expect(readGalleryDir(runDir).steps[0]?.cells).toHaveLength(1_500);
    // Nothing outside gallery-data/ is touched.
    mkdirSync(join(runDir, 'outputs'), { recursive: true });
    writeFileSync(join(runDir, 'outputs', 'keep.js'), 'x');
    await writeGallery(runDir, { plan, cells: new GalleryCells(prices).withLive([]) });
    expect(existsSync(join(runDir, 'outputs', 'keep.js'))).toBe(true);
    expect(dataFiles(runDir)).toEqual([]);
    expect(readGalleryDir(runDir).steps[0]?.count).toBe(0);
  });

  it('a data file runs as one registration call, whatever its cells say', () => {
    const cell: Cell = {
      id: 'x[k="</script><script>alert(1)</script>"]',
      values: {},
      status: 'failed',
      error: `${HOSTILE}\u2028`,
      files: [],
    };
    const files = galleryFiles({
      pipeline: 'p',
      runId: 'r',
      writtenAt: 'w',
      steps: [
        {
          id: 'x',
          model: 'm',
          forEach: null,
          planned: 1,
          axes: [],
          layout: { rows: undefined, cols: undefined, pages: [] },
          cells: [cell],
        },
      ],
    });
    const text = files.get('gallery-data/x.0001.js') as string;
    expect(text.split('\n').filter(Boolean)).toHaveLength(1);
    expect(runDataFile(text).cells).toEqual([{ id: cell.id, status: 'failed', error: cell.error, files: [] }]);
  });
});
