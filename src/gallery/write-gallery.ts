/**
 * Writes `gallery.html` (and the thumbnails it needs) into a run directory, from the run's state:
 * the live state while a run goes (GalleryWriter, at most every few seconds, so an interrupted run
 * has a gallery of what is finished), the replayed journal for `genpipe report`. The page is a
 * view: it is written to a temp file and renamed, never synced, and a failure to write it never
 * touches the run.
 */
import { rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { readPlanFile, type PlanFile } from '../run/run-dir.js';
import { replayFile, type RunState } from '../run/run-state.js';
import { galleryData, GalleryCells, MAX_GALLERY_CELLS, type Cell } from './gallery-data.js';
import { galleryHtml } from './gallery-page.js';
import type { LayoutChoice } from './grid-layout.js';
import { makeThumbnails, type ThumbnailMemo } from './thumbnails.js';

export const GALLERY_FILE = 'gallery.html';

export interface GallerySource {
  plan: Pick<PlanFile, 'pipeline' | 'runId' | 'steps'>;
  cells: ReadonlyMap<string, Iterable<Cell>>;
}

/** The cells of a replayed run state (`genpipe report`, `genpipe review`). */
export function cellsOfState(plan: Pick<PlanFile, 'steps'>, state: RunState): Map<string, Cell[]> {
  return new GalleryCells(pricesOf(plan)).withLive(state.instances);
}

export const pricesOf = (plan: Pick<PlanFile, 'steps'>): Map<string, number | null> => new Map(plan.steps.map((s) => [s.id, s.price_usd]));

/** The manifest's `gallery` choices, by step, as plan.json records them. */
export function layoutsOf(plan: Pick<PlanFile, 'steps'>): Map<string, LayoutChoice> {
  return new Map(plan.steps.flatMap((s) => (s.gallery ? [[s.id, s.gallery] as const] : [])));
}

export async function writeGallery(runDir: string, source: GallerySource, options: { review?: boolean; signal?: AbortSignal; thumbnails?: ThumbnailMemo } = {}): Promise<string> {
  const data = galleryData({ plan: source.plan, cells: source.cells, layouts: layoutsOf(source.plan) });
  await makeThumbnails(runDir, data, options.signal, options.thumbnails);
  const path = join(runDir, GALLERY_FILE);
  const temp = `${path}.${process.pid}.tmp`;
  await writeFile(temp, galleryHtml(data, { review: options.review === true }));
  await rename(temp, path);
  return path;
}

/**
 * The gallery of a running run: `update()` rewrites it when the last write is `intervalMs` old and
 * none is under way (without waiting for it); `finish()` waits for that one and writes the last.
 */
export class GalleryWriter {
  #last = 0;
  #running: Promise<void> | undefined;
  /** Each output's thumbnail is looked for (and made) once, not at every rewrite. */
  readonly #thumbnails: ThumbnailMemo = new Map();

  constructor(
    private readonly runDir: string,
    private readonly source: () => GallerySource,
    private readonly onError: (error: unknown) => void,
    private readonly intervalMs = 5_000,
  ) {}

  update(): void {
    if (this.#running || Date.now() - this.#last < this.intervalMs) return;
    this.#running = this.#write().finally(() => {
      this.#running = undefined;
    });
  }

  async finish(): Promise<void> {
    await this.#running;
    await this.#write();
  }

  async #write(): Promise<void> {
    this.#last = Date.now();
    try {
      await writeGallery(this.runDir, this.source(), { thumbnails: this.#thumbnails });
    } catch (error) {
      this.onError(error);
    }
  }
}

/**
 * A finished (or interrupted) run's gallery page, built from its journal (thumbnails made where
 * missing). A run planned for more than twice MAX_GALLERY_CELLS instances gets none this way (its
 * replay would hold every instance): undefined.
 */
export async function galleryPageOf(runDir: string, options: { review?: boolean } = {}): Promise<string | undefined> {
  const plan = await readPlanFile(runDir);
  if (plan.steps.reduce((n, s) => n + s.count, 0) > 2 * MAX_GALLERY_CELLS) return undefined;
  const state = await replayFile(join(runDir, 'journal.jsonl'));
  const data = galleryData({ plan, cells: cellsOfState(plan, state), layouts: layoutsOf(plan) });
  await makeThumbnails(runDir, data);
  return galleryHtml(data, { review: options.review === true });
}

/** Rewrites a run's gallery.html from its journal (see galleryPageOf); the page's path, or undefined when skipped. */
export async function rewriteGallery(runDir: string): Promise<string | undefined> {
  const html = await galleryPageOf(runDir);
  if (html === undefined) return undefined;
  const path = join(runDir, GALLERY_FILE);
  const temp = `${path}.${process.pid}.tmp`;
  await writeFile(temp, html);
  await rename(temp, path);
  return path;
}
