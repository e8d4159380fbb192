/**
 * gallery.html and the data files beside it. The page holds the run's header, each step's axes and
 * an index of its cells (per cell, the position of its label on each axis and its status: about 9
 * bytes a cell), and its style and script; the cells themselves (files, errors, costs, headlines)
 * are in `gallery-data/<step>.<page>.js`, GALLERY_PAGE_CELLS a file, which the page loads as it
 * needs them (the cells on screen, or all of a step's for a text filter).
 *
 * Those files are classic scripts that call `window.__genpipeCells(...)`: a page opened from
 * file:// may not fetch() or XMLHttpRequest another file: (Chromium refuses, and ES modules are
 * fetched under CORS, so are refused too), but it may run a `<script src>` beside it, as any
 * browser does. `genpipe review` serves the same files from memory. Their JSON is escaped as an
 * inline <script>'s is (no `<`, no U+2028/U+2029), so no cell text can end or change the script.
 */
import { jsonUsd } from '../util/format-usd.js';
import { createHash } from 'node:crypto';
import type { Cell, GalleryData, GalleryStep } from './gallery-data.js';
import { modelFor } from '../models/registry.js';
import { PAGE_SCRIPT } from './page-script.js';
import { RUN_FILES } from '../run/files/run-layout.js';

const STYLE = `
:root { color-scheme: light dark; --line: #8884; --muted: #888; --ok: #2e7d32; --bad: #c62828; --warn: #ef6c00; }
* { box-sizing: border-box; }
body { font: 14px/1.4 system-ui, sans-serif; margin: 0 1rem 2rem; }
header { position: sticky; top: 0; background: Canvas; padding: .5rem 0; border-bottom: 1px solid var(--line); z-index: 1; }
h1 { font-size: 1.2rem; margin: 0; } h2 { font-size: 1.05rem; margin: 1.2rem 0 .2rem; }
.counts, .id, .empty, .pager span { color: var(--muted); }
.controls { display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: center; margin: .4rem 0; }
/* The grid scrolls in its own box, both ways, so its labels can stick: column labels on top, row labels on the left. */
.scroll { overflow: auto; max-height: 85vh; }
table.grid { border-collapse: separate; border-spacing: 0; }
.grid th { font-weight: 600; text-align: left; padding: .25rem .4rem; white-space: nowrap; background: Canvas; }
.grid thead th { position: sticky; top: 0; z-index: 2; border-bottom: 1px solid var(--line); }
.grid tbody th { position: sticky; left: 0; z-index: 1; vertical-align: top; border-right: 1px solid var(--line); }
.grid thead th.corner { left: 0; z-index: 3; }
.headline { font-size: 13px; margin: .25rem 0 0; display: -webkit-box; -webkit-line-clamp: 3; -webkit-box-orient: vertical; overflow: hidden; }
#spend { font-weight: 600; }
.grid td { vertical-align: top; padding: .25rem; border-top: 1px solid var(--line); }
.cell { width: 200px; border: 2px solid transparent; border-radius: 6px; padding: 4px; margin-bottom: 4px; }
.cell:focus { outline: 2px solid Highlight; }
.cell img, .cell video { display: block; width: 100%; height: auto; min-height: 60px; background: #8882; border-radius: 4px; }
.cell audio { width: 100%; }
.cell.approved { border-color: var(--ok); } .cell.rejected { border-color: var(--bad); opacity: .7; } .cell.starred .actions [data-action=unstar] { color: #f9a825; }
.review-counts { margin: .2rem 0 0; } #saved { color: var(--muted); }
.facts { display: flex; flex-wrap: wrap; gap: .3rem; margin-top: .2rem; }
.badge { font-size: 12px; padding: 0 .35rem; border-radius: 3px; background: #8883; }
.status-completed .badge:first-child, .status-reused .badge:first-child { background: #2e7d3233; }
.status-failed .badge:first-child, .status-nsfw .badge:first-child, .status-canceled .badge:first-child { background: #c6282833; }
.status-unknown .badge:first-child, .status-in_flight .badge:first-child { background: #ef6c0033; }
.reroll { background: #1565c033; }
.error { color: var(--bad); margin: .2rem 0; font-size: 13px; }
.id { font-size: 11px; margin: .2rem 0; word-break: break-all; }
.answer { white-space: pre-wrap; font-size: 12px; max-height: 12rem; overflow: auto; background: #8881; padding: .3rem; margin: 0; }
.actions { display: flex; gap: .25rem; flex-wrap: wrap; }
.actions button { font-size: 12px; }
.actions [aria-pressed=true] { font-weight: 700; }
#compare { border-top: 2px solid var(--line); margin-top: 1rem; }
.compare-row { display: flex; gap: 1rem; overflow-x: auto; }
.compare-row .cell { width: min(360px, 24vw); }
#notice { color: var(--bad); }
`;

/** JSON safe inside a <script> element or a script file: no `</script>`, no `<!--`, no line separators older JS engines choke on. */
export function scriptJson(value: unknown): string {
  return JSON.stringify(value)
    .replace(/</g, '\\u003c')
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029');
}

export const escapeHtml = (text: string): string => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** Cells a data file holds: the page loads these many at a time. */
export const GALLERY_PAGE_CELLS = 1_000;

/** The folder beside gallery.html that holds its data files. */
export const GALLERY_DATA_DIR = 'gallery-data';

/** The data file of a step's page `page` (0-based), relative to the run directory. */
export const dataFileOf = (step: string, page: number): string => `${GALLERY_DATA_DIR}/${step}.${String(page + 1).padStart(4, '0')}.js`;

/** A data file as the page's index names it: where, how many cells, and its signature (to tell a file of another write). */
export interface PageRef {
  file: string;
  count: number;
  sig: string;
}

/** A step as the page holds it: its own fields, its cells' index and its data files. */
export interface PageStep {
  fields: Omit<GalleryStep, 'cells'>;
  /** Cells in the step (also index.length / (axes + 1)). */
  count: number;
  /** What its cells cost in all, US$. */
  spendUsd: number;
  /** Its cells sent with no known price: not in spendUsd. */
  unpriced: number;
  /** Per cell, in order: the index of its label in each of `fields.axes` (-1: none), then its status's index in the page's `statuses`. */
  index: number[];
  pages: PageRef[];
}

/** The run's page: its header, statuses by code, and its steps. */
export interface PageData {
  pipeline: string;
  runId: string;
  writtenAt: string;
  statuses: readonly string[];
  steps: readonly PageStep[];
}

/**
 * The text of a data file: the page's registration call with the step's position, the page's,
 * its signature and its cells (without `values`, which the page has from its index).
 */
export function dataFileText(step: number, page: number, sig: string, cells: readonly Cell[]): string {
  const bare = cells.map(({ values: _values, ...rest }) => rest);
  return `window.__genpipeCells(${step},${page},${scriptJson(sig)},${scriptJson(bare)});\n`;
}

/** gallery.html: header, style, the index as JSON in a <script> element, and the script. */
export function galleryPageHtml(data: PageData, options: { review?: boolean } = {}): string {
  const title = `${data.pipeline} ${data.runId}`;
  const json = scriptJson({
    pipeline: data.pipeline,
    runId: data.runId,
    writtenAt: data.writtenAt,
    pageCells: GALLERY_PAGE_CELLS,
    statuses: data.statuses,
    steps: data.steps.map((s) => ({
      ...s.fields,
      count: s.count,
      // Money in JSON to a millionth, as everywhere (the sum of cells' costs carries float dust).
      spendUsd: jsonUsd(s.spendUsd),
      unpriced: s.unpriced,
      // A token-priced model's cost is its charge at submit, which the service reconciles later.
      provisional: modelFor(s.fields.model).tokenPriced === true && s.spendUsd > 0,
      pages: s.pages,
      index: s.index,
    })),
  });
  return `<!doctype html>
<html lang="en" data-review="${options.review ? 'on' : 'off'}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}: gallery</title>
<link rel="icon" href="data:,">
<style>${STYLE}</style>
</head>
<body>
<header><h1>${escapeHtml(title)}</h1><p class="counts"><span id="spend"></span> · Written ${escapeHtml(data.writtenAt)} by genpipe${options.review ? '; decisions are saved to review.json as you make them' : ''}. <span id="notice"></span></p>${options.review ? '<p class="review-counts"><strong id="review-counts"></strong> <span id="saved" aria-live="polite"></span></p>' : ''}</header>
<main id="app"></main>
<section id="compare" hidden></section>
<script type="application/json" id="gallery-data">${json}</script>
<script>${PAGE_SCRIPT}</script>
</body>
</html>
`;
}

/** Files of a gallery, by path relative to the run directory: gallery.html and its data files. */
export type GalleryFiles = Map<string, string>;

/**
 * A gallery's files from whole cell lists (tests, and any bounded set of cells): the step's cells
 * in the order given, their `values` as given. Signatures are the data files' content hashes.
 */
export function galleryFiles(data: GalleryData, options: { review?: boolean } = {}): GalleryFiles {
  const files: GalleryFiles = new Map();
  const statuses: string[] = [];
  const steps = data.steps.map(({ cells, ...fields }, stepAt) => {
    const builder = new IndexBuilder(fields.axes, statuses);
    let spendUsd = 0;
    let unpriced = 0;
    for (const cell of cells) {
      builder.add(Object.entries(cell.values), cell.status);
      spendUsd = jsonUsd(spendUsd + (cell.costUsd ?? 0));
      if (cell.unpriced) unpriced++;
    }
    const pages: PageRef[] = [];
    for (let at = 0, page = 0; at < cells.length; at += GALLERY_PAGE_CELLS, page++) {
      const slice = cells.slice(at, at + GALLERY_PAGE_CELLS);
      const sig = signatureOf(slice.map((c) => JSON.stringify(c)));
      const file = dataFileOf(fields.id, page);
      files.set(file, dataFileText(stepAt, page, sig, slice));
      pages.push({ file, count: slice.length, sig });
    }
    return { fields, count: cells.length, spendUsd, unpriced, index: builder.index, pages };
  });
  files.set(RUN_FILES.gallery, galleryPageHtml({ ...data, statuses, steps }, options));
  return files;
}

/** Builds a step's index: label positions (by axis, in the axes' order) and status codes. */
export class IndexBuilder {
  readonly index: number[] = [];
  readonly #positions: Map<string, number>[];
  readonly #axes: Map<string, number>;

  constructor(
    readonly axes: readonly { name: string; values: readonly string[] }[],
    private readonly statuses: string[],
  ) {
    this.#axes = new Map(axes.map((a, i) => [a.name, i]));
    this.#positions = axes.map((a) => new Map(a.values.map((v, i) => [v, i])));
  }

  add(values: Iterable<readonly [string, string]>, status: string): void {
    this.push(this.rowOf(values), status);
  }

  /** The positions of a cell's labels on the axes (-1 where it has none). */
  rowOf(values: Iterable<readonly [string, string]>): number[] {
    const row = new Array<number>(this.axes.length).fill(-1);
    for (const [axis, label] of values) {
      const at = this.#axes.get(axis);
      if (at !== undefined) row[at] = this.#positions[at]?.get(label) ?? -1;
    }
    return row;
  }

  /** Adds a cell by its label positions (`axes.length` of them from `from` in `row`) and its status. */
  push(row: ArrayLike<number>, status: string, from = 0): void {
    for (let a = 0; a < this.axes.length; a++) this.index.push(row[from + a] as number);
    let code = this.statuses.indexOf(status);
    if (code < 0) code = this.statuses.push(status) - 1;
    this.index.push(code);
  }
}

/** A short signature of a page's content (its cells' texts in order). */
export function signatureOf(parts: Iterable<string>): string {
  const hash = createHash('sha1');
  for (const part of parts) hash.update(part).update('\n');
  return hash.digest('base64url').slice(0, 16);
}
