/**
 * Writes `gallery.html` (and the thumbnails it needs) into a run directory, from the run's state:
 * the live state while a run goes (GalleryWriter, at most every few seconds, so an interrupted run
 * has a gallery of what is finished), the replayed journal for `genpipe report`. The page is a
 * view: it is written to a temp file and renamed, never synced, and a failure to write it never
 * touches the run.
 */
import { open, rename, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { readPlanFile, type PlanFile } from '../run/run-dir.js';
import { instanceStates } from '../report/instance-lines.js';
import type { RunState } from '../run/run-state.js';
import { cellLists, GalleryCells, MAX_GALLERY_CELLS, type Cell, type StepCells } from './gallery-data.js';
import { chunksOf, galleryPageChunks, type PageStep } from './gallery-page.js';
import { chooseLayout, naturalCompare, type AxisValues, type LayoutChoice } from './grid-layout.js';
import { readHeadlines } from '../run/run-headlines.js';
import { unquote } from '../plan/selection.js';
import type { ImageSize } from '../util/image-size.js';
import { makeThumbnails, noteDownloadedImage, type ThumbnailMemo } from './thumbnails.js';
import { RedactingText } from '../util/redact.js';

export const GALLERY_FILE = 'gallery.html';

export interface GallerySource {
  plan: Pick<PlanFile, 'pipeline' | 'runId' | 'steps'>;
  /** GalleryCells.withLive. */
  cells: ReadonlyMap<string, StepCells>;
}

/** The cells of a replayed run state (`genpipe report`, `genpipe review`, `genpipe diff`), sorted. */
export function cellsOfState(plan: Pick<PlanFile, 'steps'>, state: RunState): Map<string, Cell[]> {
  return cellLists(new GalleryCells(pricesOf(plan)).withLive(state.instances));
}

export const pricesOf = (plan: Pick<PlanFile, 'steps'>): Map<string, number | null> => new Map(plan.steps.map((s) => [s.id, s.price_usd]));

/** The manifest's `gallery` choices, by step, as plan.json records them. */
export function layoutsOf(plan: Pick<PlanFile, 'steps'>): Map<string, LayoutChoice> {
  return new Map(plan.steps.flatMap((s) => (s.gallery ? [[s.id, s.gallery] as const] : [])));
}

/**
 * Writes the page: each step's cells are made (and their thumbnails) a chunk at a time as the page
 * is written, so a rewrite never holds them all.
 */
export async function writeGallery(
  runDir: string,
  source: GallerySource,
  options: { signal?: AbortSignal; thumbnails?: ThumbnailMemo; headlines?: ReadonlyMap<string, string> } = {},
): Promise<string> {
  const headlines = options.headlines ?? (await readHeadlines(runDir));
  return writePage(runDir, galleryChunks(runDir, source, { ...options, headlines }));
}

function galleryChunks(
  runDir: string,
  source: GallerySource,
  options: { review?: boolean; signal?: AbortSignal; thumbnails?: ThumbnailMemo; headlines?: ReadonlyMap<string, string> } = {},
): AsyncGenerator<string> {
  const layouts = layoutsOf(source.plan);
  // plan.json lists steps in the manifest's order; each axis's values in the manifest's order too.
  const steps: PageStep[] = source.plan.steps.map((s) => {
    const cells = source.cells.get(s.id) ?? NO_CELLS;
    const axes = inManifestOrder(cells.axes, s, source.plan.steps);
    return {
      fields: { id: s.id, model: s.model, forEach: s.for_each, planned: s.count, axes, layout: chooseLayout(axes, layouts.get(s.id)) },
      chunks: cellChunks(runDir, cells, options),
    };
  });
  return galleryPageChunks({ pipeline: source.plan.pipeline, runId: source.plan.runId, writtenAt: new Date().toISOString() }, steps, {
    review: options.review === true,
  });
}

const NO_CELLS: StepCells = {
  ids: [],
  axes: [],
  cell: (id) => {
    throw new Error(`no cell ${id}`);
  },
};

/**
 * A step's axes with their values in the order plan.json recorded (list values as written, CSV rows
 * as in the file); a for_each step's upstream axes (`tier`, or `sheets.tier` when its own axes use
 * the name) in its upstream's order. Values it did not record keep natural order, after those.
 */
export function inManifestOrder(axes: readonly AxisValues[], step: PlanFile['steps'][number], steps: PlanFile['steps']): AxisValues[] {
  const recordedOf = (name: string): readonly string[] | undefined => {
    const own = step.axes?.[name];
    if (own) return own;
    for (let up = steps.find((s) => s.id === step.for_each); up; up = steps.find((s) => s.id === up?.for_each)) {
      const dotted = name.startsWith(`${up.id}.`) ? name.slice(up.id.length + 1) : name;
      if (up.axes?.[dotted]) return up.axes[dotted];
    }
    return undefined;
  };
  return axes.map((axis) => {
    const recorded = recordedOf(axis.name);
    if (!recorded) return axis;
    const rank = new Map(recorded.map((label, i) => [unquote(label), i]));
    const values = [...axis.values].sort(
      (a, b) => (rank.get(a) ?? Number.MAX_SAFE_INTEGER) - (rank.get(b) ?? Number.MAX_SAFE_INTEGER) || naturalCompare(a, b),
    );
    return { name: axis.name, values };
  });
}

async function* cellChunks(
  runDir: string,
  cells: StepCells,
  options: { signal?: AbortSignal; thumbnails?: ThumbnailMemo; headlines?: ReadonlyMap<string, string> },
): AsyncGenerator<Cell[]> {
  for (const ids of chunksOf(cells.ids)) {
    const chunk = ids.map((id) => {
      const cell = cells.cell(id);
      const headline = options.headlines?.get(id);
      return headline === undefined ? cell : { ...cell, headline };
    });
    await makeThumbnails(runDir, chunk, options.signal, options.thumbnails);
    yield chunk;
  }
}

/** Bytes gathered before a write of the page. */
const WRITE_BYTES = 1 << 20;

/** Writes the page's pieces to a temp file a megabyte at a time, then renames it over gallery.html. */
async function writePage(runDir: string, chunks: AsyncIterable<string>): Promise<string> {
  const path = join(runDir, GALLERY_FILE);
  const temp = `${path}.${process.pid}.tmp`;
  const file = await open(temp, 'w');
  try {
    let pending: string[] = [];
    let size = 0;
    // The page quotes the service (error text) and the manifest: secrets out, even split across chunks.
    const redacting = new RedactingText();
    for await (const chunk of chunks) {
      pending.push(redacting.push(chunk));
      size += chunk.length;
      if (size < WRITE_BYTES) continue;
      await file.write(pending.join(''));
      pending = [];
      size = 0;
    }
    pending.push(redacting.end());
    await file.write(pending.join(''));
  } catch (error) {
    await file.close();
    await unlink(temp).catch(() => undefined);
    throw error;
  }
  await file.close();
  await rename(temp, path);
  return path;
}

/** A running run's gallery is rewritten no more often than every this many times its last write took. */
const SPACING_TO_COST = 10;

/**
 * The gallery of a running run: `update()` rewrites it when none is under way (without waiting
 * for it) and the last one is `intervalMs` old, or ten times as old as it took to write, whichever
 * is longer, so that a big page takes at most a tenth of the run's time; `finish()` waits for the
 * one under way and writes the last.
 */
export class GalleryWriter {
  #last = 0;
  #cost = 0;
  #running: Promise<void> | undefined;
  /** Each output's thumbnail is looked for (and made) once, not at every rewrite. */
  readonly #thumbnails: ThumbnailMemo = new Map();
  /** Read once: written when the run started, never changed. */
  #headlines: Promise<Map<string, string>> | undefined;

  constructor(
    private readonly runDir: string,
    private readonly source: () => GallerySource,
    private readonly onError: (error: unknown) => void,
    private readonly intervalMs = 5_000,
  ) {}

  update(): void {
    if (this.#running || Date.now() - this.#last < Math.max(this.intervalMs, SPACING_TO_COST * this.#cost)) return;
    this.#running = this.#write().finally(() => {
      this.#running = undefined;
    });
  }

  /** A file the run downloaded, with an image's size from its first bytes: an image that fits is not opened again (thumbnails.ts). */
  noteDownloaded(path: string, imageSize: ImageSize | undefined): void {
    noteDownloadedImage(this.#thumbnails, path, imageSize);
  }

  async finish(): Promise<void> {
    await this.#running;
    await this.#write();
  }

  async #write(): Promise<void> {
    const started = Date.now();
    try {
      this.#headlines ??= readHeadlines(this.runDir);
      await writeGallery(this.runDir, this.source(), { thumbnails: this.#thumbnails, headlines: await this.#headlines });
    } catch (error) {
      this.onError(error);
    }
    this.#last = Date.now();
    this.#cost = this.#last - started;
  }
}

/**
 * A finished (or interrupted) run's gallery page, built from its journal as it streams (sorted and
 * reduced to what cells show, in bounded memory: report/instance-lines.ts), its cells kept packed,
 * thumbnails made where missing. A run planned for more than twice MAX_GALLERY_CELLS instances gets
 * none this way (its page would show a part of it, for another pass over a journal of millions of
 * records): undefined.
 */
export async function galleryPageOf(runDir: string, options: { review?: boolean } = {}): Promise<string | undefined> {
  const source = await gallerySourceOf(runDir);
  if (source === undefined) return undefined;
  const parts: string[] = [];
  for await (const part of galleryChunks(runDir, source, { review: options.review === true, headlines: await readHeadlines(runDir) }))
    parts.push(part);
  return parts.join('');
}

async function gallerySourceOf(runDir: string): Promise<GallerySource | undefined> {
  const plan = await readPlanFile(runDir);
  if (plan.steps.reduce((n, s) => n + s.count, 0) > 2 * MAX_GALLERY_CELLS) return undefined;
  const cells = new GalleryCells(pricesOf(plan));
  for await (const [id, entry] of instanceStates(join(runDir, 'journal.jsonl'), { gallery: true })) cells.add(id, entry);
  return { plan, cells: cells.withLive([]) };
}

/** Rewrites a run's gallery.html from its journal (see galleryPageOf); the page's path, or undefined when skipped. */
export async function rewriteGallery(runDir: string): Promise<string | undefined> {
  const source = await gallerySourceOf(runDir);
  return source && writeGallery(runDir, source);
}
