/**
 * gallery.html: one self-contained page (style, script and data inline) that opens from file://
 * with no network request. It refers to the run's files by relative path. `review: true` marks the
 * page for `genpipe review`, which adds the decision controls.
 */
import type { Cell, GalleryData, GalleryStep } from './gallery-data.js';
import { PAGE_SCRIPT } from './page-script.js';

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

/** JSON safe inside a <script> element: no `</script>`, no `<!--`, no line separators JS would choke on. */
function scriptJson(value: unknown): string {
  return JSON.stringify(value)
    .replace(/</g, '\\u003c')
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029');
}

export const escapeHtml = (text: string): string => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** A step of the page: its own fields, and its cells in sorted chunks (made as they are written). */
export interface PageStep {
  fields: Omit<GalleryStep, 'cells'>;
  chunks: AsyncIterable<Cell[]> | Iterable<Cell[]>;
}

/** Cells serialised at a time: a page of 100,000 cells is written in pieces, never held whole. */
export const CELLS_PER_CHUNK = 2_000;

/** A list of cells in chunks of CELLS_PER_CHUNK. */
export function* chunksOf<T>(list: readonly T[]): Generator<T[]> {
  for (let at = 0; at < list.length; at += CELLS_PER_CHUNK) yield list.slice(at, at + CELLS_PER_CHUNK);
}

/** The page as a whole string (`genpipe review` serves it). */
export async function galleryHtml(data: GalleryData, options: { review?: boolean } = {}): Promise<string> {
  const steps: PageStep[] = data.steps.map(({ cells, ...fields }) => ({ fields, chunks: chunksOf(cells) }));
  const parts: string[] = [];
  for await (const part of galleryPageChunks(data, steps, options)) parts.push(part);
  return parts.join('');
}

/**
 * The page in pieces, in order: a 100,000-cell page is about 30 MB of text, and building it whole
 * (its data, the JSON, its escaping, the page around it, the bytes to write) had cost a running
 * run some 150 MB at each rewrite.
 */
export async function* galleryPageChunks(
  run: Pick<GalleryData, 'pipeline' | 'runId' | 'writtenAt'>,
  steps: readonly PageStep[],
  options: { review?: boolean } = {},
): AsyncGenerator<string> {
  const title = `${run.pipeline} ${run.runId}`;
  yield `<!doctype html>
<html lang="en" data-review="${options.review ? 'on' : 'off'}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}: gallery</title>
<link rel="icon" href="data:,">
<style>${STYLE}</style>
</head>
<body>
<header><h1>${escapeHtml(title)}</h1><p class="counts"><span id="spend"></span> · Written ${escapeHtml(run.writtenAt)} by genpipe${options.review ? '; decisions are saved to review.json as you make them' : ''}. <span id="notice"></span></p>${options.review ? '<p class="review-counts"><strong id="review-counts"></strong> <span id="saved" aria-live="polite"></span></p>' : ''}</header>
<main id="app"></main>
<section id="compare" hidden></section>
<script type="application/json" id="gallery-data">`;
  // The data as scriptJson would write it whole: each object's own fields, then its list a chunk at a time.
  yield `${scriptJson({ pipeline: run.pipeline, runId: run.runId, writtenAt: run.writtenAt }).slice(0, -1)},"steps":[`;
  for (const [i, step] of steps.entries()) {
    yield `${i > 0 ? ',' : ''}${scriptJson(step.fields).slice(0, -1)},"cells":[`;
    let first = true;
    for await (const cells of step.chunks) {
      if (cells.length === 0) continue;
      yield `${first ? '' : ','}${scriptJson(cells).slice(1, -1)}`;
      first = false;
    }
    yield ']}';
  }
  yield `]}</script>
<script>${PAGE_SCRIPT}</script>
</body>
</html>
`;
}
