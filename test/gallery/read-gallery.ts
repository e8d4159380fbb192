// Reads a gallery as its page does (gallery-page.ts): the index in gallery.html, the cells from
// the data files beside it, each run as a script that calls window.__genpipeCells. Checks on the
// way that no text could end a <script> or break a line of JavaScript.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { runInNewContext } from 'node:vm';
import { expect } from 'vitest';
import type { Cell } from '../../src/gallery/gallery-data.js';
import type { GalleryFiles, PageRef } from '../../src/gallery/gallery-page.js';
import type { AxisValues, GridLayout } from '../../src/gallery/grid-layout.js';

export interface ReadStep {
  id: string;
  model: string;
  forEach: string | null;
  planned: number;
  axes: AxisValues[];
  layout: GridLayout;
  count: number;
  spendUsd: number;
  unpriced: number;
  /** Its cost rests on a token-priced charge at submit: the page writes it `(provisional)`. */
  provisional?: boolean;
  index: number[];
  pages: PageRef[];
  /** Every cell, from the data files, with its values from the index. */
  cells: Cell[];
}

export interface ReadGallery {
  pipeline: string;
  runId: string;
  writtenAt: string;
  pageCells: number;
  statuses: string[];
  steps: ReadStep[];
}

/** The JSON in gallery.html's data element, checked for `<` and line separators. */
export function pageIndex(html: string): Omit<ReadGallery, 'steps'> & { steps: Omit<ReadStep, 'cells'>[] } {
  const start = html.indexOf('<script type="application/json" id="gallery-data">');
  expect(start).toBeGreaterThan(0);
  const body = html.slice(start).replace(/^<script[^>]*>/, '');
  const json = body.slice(0, body.indexOf('</script>'));
  expect(json).not.toMatch(/<|\u2028|\u2029/);
  return JSON.parse(json) as ReturnType<typeof pageIndex>;
}

/** What one data file registers, run as the page runs it. */
export function runDataFile(text: string): { step: number; page: number; sig: string; cells: Omit<Cell, 'values'>[] } {
  expect(text).not.toMatch(/<|\u2028|\u2029/);
  const calls: unknown[][] = [];
  runInNewContext(text, { window: { __genpipeCells: (...args: unknown[]) => calls.push(args) } });
  expect(calls).toHaveLength(1);
  const [step, page, sig, cells] = calls[0] as [number, number, string, Omit<Cell, 'values'>[]];
  return { step, page, sig, cells };
}

/** A gallery from its files (by path relative to the run directory). */
export function readGallery(read: (path: string) => string): ReadGallery {
  const index = pageIndex(read('gallery.html'));
  const steps = index.steps.map((step, stepAt) => {
    const stride = step.axes.length + 1;
    const cells: Cell[] = [];
    for (const [page, ref] of step.pages.entries()) {
      const file = runDataFile(read(ref.file));
      expect({ step: file.step, page: file.page, sig: file.sig, count: file.cells.length }).toEqual({
        step: stepAt,
        page,
        sig: ref.sig,
        count: ref.count,
      });
      for (const [j, bare] of file.cells.entries()) {
        const at = (page * index.pageCells + j) * stride;
        const values: Record<string, string> = {};
        for (const [a, axis] of step.axes.entries()) {
          const k = step.index[at + a] as number;
          if (k >= 0) values[axis.name] = axis.values[k] as string;
        }
        expect(index.statuses[step.index[at + step.axes.length] as number]).toBe(bare.status);
        cells.push({ ...bare, values });
      }
    }
    expect(cells).toHaveLength(step.count);
    expect(step.index).toHaveLength(step.count * stride);
    return { ...step, cells };
  });
  return { ...index, steps };
}

export const readGalleryDir = (dir: string): ReadGallery => readGallery((path) => readFileSync(join(dir, path), 'utf8'));

export function writeGalleryFiles(dir: string, files: GalleryFiles): void {
  for (const [path, text] of files) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
}
