// The page of a running run (issue 14): its cells are kept packed and written a chunk at a time.
// What lands in gallery.html must be what the cells say, exactly, whatever the chunking: every
// field of every cell, the axes, natural order, and text that could end the <script> escaped.
import { readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { cellLists, GalleryCells, type Cell, type GalleryData } from '../../src/gallery/gallery-data.js';
import { CELLS_PER_CHUNK, galleryHtml } from '../../src/gallery/gallery-page.js';
import { writeGallery } from '../../src/gallery/write-gallery.js';
import type { InstanceState } from '../../src/run/run-state.js';
import { cleanTemps, tempDir } from '../run/runner-helpers.js';

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

function embedded(html: string): GalleryData {
  const start = html.indexOf('<script type="application/json" id="gallery-data">');
  const body = html.slice(start).replace(/^<script[^>]*>/, '');
  const json = body.slice(0, body.indexOf('</script>'));
  expect(json).not.toMatch(/<|\u2028|\u2029/);
  return JSON.parse(json) as GalleryData;
}

describe('gallery page of a running run', () => {
  const plan = {
    pipeline: 'page',
    runId: 'r1',
    steps: [{ id: 'sheets', model: 'character-sheet', for_each: null, count: 5_000, price_usd: 0.05, gallery: undefined }],
  } as never;
  const states: [string, InstanceState][] = [];
  for (let seed = 50; seed >= 1; seed--)
    for (let v = 0; v < 100; v++) states.push([`sheets[seed=${seed},variation_index=${v}]`, stateOf(seed, v)]);

  it(`writes ${5_000} packed cells in chunks of ${CELLS_PER_CHUNK} exactly as the live cells read, in natural order, with live ones laid over`, async () => {
    expect(states.length).toBeGreaterThan(2 * CELLS_PER_CHUNK);
    const prices = new Map([['sheets', 0.05]]);
    const kept = new GalleryCells(prices);
    // All but the last 20 finished (kept packed); those 20 are still in the run's state.
    for (const [id, entry] of states.slice(0, -20)) kept.add(id, entry);
    const live = states.slice(-20);
    const runDir = tempDir();
    await writeGallery(runDir, { plan, cells: kept.withLive(live) });
    const page = embedded(readFileSync(`${runDir}/gallery.html`, 'utf8'));
    const step = page.steps[0];
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
    expect(step?.axes).toEqual([
      { name: 'seed', values: Array.from({ length: 50 }, (_, i) => String(i + 1)) },
      { name: 'variation_index', values: Array.from({ length: 100 }, (_, i) => String(i)) },
    ]);
    expect(step?.layout).toEqual({ rows: 'variation_index', cols: 'seed', pages: [] });
    expect(step).toMatchObject({ id: 'sheets', model: 'character-sheet', forEach: null, planned: 5_000 });
    expect(page).toMatchObject({ pipeline: 'page', runId: 'r1' });
  });

  it('writes the same data as the whole-page string of the same cells', async () => {
    const cells = cellLists(new GalleryCells(new Map([['sheets', 0.05]])).withLive(states)).get('sheets') as Cell[];
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
          axes: [],
          layout: { rows: undefined, cols: undefined, pages: [] },
          cells,
        },
      ],
    };
    expect(embedded(await galleryHtml(data))).toEqual(JSON.parse(JSON.stringify(data)));
  });
});
