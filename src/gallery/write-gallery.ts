/**
 * Writes `gallery.html` and its data files (`gallery-data/`, gallery-page.ts) into a run
 * directory, with the thumbnails they need, from the run's state: the live state while a run goes
 * (GalleryWriter, at most every few seconds, so an interrupted run has a gallery of what is
 * finished), the replayed journal for `genpipe report`. Each file is written to a temp file and
 * renamed, never synced: the data files first, then the page, then the data files of an earlier
 * write that the page no longer names are removed. A failure to write never touches the run.
 *
 * A running run rewrites only the data files whose cells changed since its last write (each page
 * has a signature of its cells' packed text): cells mostly come in id order, so a rewrite writes
 * the page and the last data file or two, not every cell.
 */
import { jsonUsd } from '../util/format-usd.js';
import { mkdir, open, readdir, rename, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { readPlanFile, type PlanFile } from '../run/files/run-dir.js';
import { instanceStates } from '../report/instance-lines.js';
import { compareValues, InstanceOrder } from '../plan/instance-order.js';
import type { RunState } from '../run/journal/run-state.js';
import { streamJournalBatches } from '../run/journal/journal.js';
import { cellLists, GalleryCells, MAX_GALLERY_CELLS, type Cell, type PackedCell, type StepCells } from './gallery-data.js';
import {
  dataFileOf,
  dataFileText,
  GALLERY_DATA_DIR,
  GALLERY_PAGE_CELLS,
  galleryPageHtml,
  IndexBuilder,
  signatureOf,
  type GalleryFiles,
  type PageRef,
  type PageStep,
} from './gallery-page.js';
import { chooseLayout, type AxisValues, type LayoutChoice } from './grid-layout.js';
import { instanceAxes } from './instance-axes.js';
import { readHeadlines } from '../run/files/run-headlines.js';
import { unquote } from '../plan/selection.js';
import type { ImageSize } from '../util/image-size.js';
import { makeThumbnails, noteDownloadedImage, type ThumbnailMemo } from './thumbnails.js';
import { redactEveryForm } from '../util/redact.js';
import { RUN_FILES, runFile } from '../run/files/run-layout.js';

export const GALLERY_FILE = RUN_FILES.gallery;

export interface GallerySource {
  plan: Pick<PlanFile, 'pipeline' | 'runId' | 'steps'>;
  /** GalleryCells.withLive. */
  cells: ReadonlyMap<string, StepCells>;
  /** What the journal says of its images' sizes (`downloaded` width and height): files it need not open. */
  thumbnails?: ThumbnailMemo | undefined;
}

/**
 * What a writer wrote last, by data file: its signature, so an unchanged one is not written again,
 * and what its cells gave the index (their label positions on the axes as they were, their
 * statuses and cost), so an unchanged one is not read again either.
 */
export type WrittenPages = Map<string, WrittenPage>;

export interface WrittenPage {
  sig: string;
  /** The step's axes when it was indexed: its label positions hold while they are the same. */
  axes: string;
  /** Label positions, axes.length a cell. */
  rows: number[];
  statuses: string[];
  spendUsd: number;
  /** Its cells sent with no known price. */
  unpriced: number;
}

interface BuildOptions {
  review?: boolean;
  signal?: AbortSignal | undefined;
  thumbnails?: ThumbnailMemo | undefined;
  headlines?: ReadonlyMap<string, string> | undefined;
  /** Data files whose signature is here are taken as written; each one written is set here. */
  written?: WrittenPages | undefined;
}

/** The cells of a replayed run state (`genpipe report`, `genpipe review`, `genpipe diff`), sorted. */
export function cellsOfState(plan: Pick<PlanFile, 'steps'>, state: RunState): Map<string, Cell[]> {
  return cellLists(
    new GalleryCells(pricesOf(plan), undefined, publicBasesOf(plan), new InstanceOrder(plan.steps)).withLive(state.instances),
  );
}

export const pricesOf = (plan: Pick<PlanFile, 'steps'>): Map<string, number | null> => new Map(plan.steps.map((s) => [s.id, s.price_usd]));

/** Per step with a public storage sink, the public URL of its prefix (a cell links its uploaded files there). */
export const publicBasesOf = (plan: Pick<PlanFile, 'steps'>): Map<string, string> =>
  new Map(plan.steps.flatMap((s) => (s.sink?.public_url === undefined ? [] : [[s.id, s.sink.public_url] as const])));

/** The manifest's `gallery` choices, by step, as plan.json records them. */
export function layoutsOf(plan: Pick<PlanFile, 'steps'>): Map<string, LayoutChoice> {
  return new Map(plan.steps.flatMap((s) => (s.gallery ? [[s.id, s.gallery] as const] : [])));
}

/**
 * Writes the gallery: each step's data files a page of cells at a time (each page's cells made, and
 * their thumbnails, only when its signature changed), then gallery.html, then removes data files
 * of an earlier write that it no longer names. Returns the page's path.
 */
export async function writeGallery(
  runDir: string,
  source: GallerySource,
  options: { signal?: AbortSignal; thumbnails?: ThumbnailMemo; headlines?: ReadonlyMap<string, string>; written?: WrittenPages } = {},
): Promise<string> {
  const headlines = options.headlines ?? (await readHeadlines(runDir));
  await mkdir(join(runDir, GALLERY_DATA_DIR), { recursive: true });
  const { html, files } = await buildGallery(runDir, source, { ...options, headlines }, (file, text) =>
    writeAtomically(join(runDir, file), text),
  );
  const path = join(runDir, GALLERY_FILE);
  await writeAtomically(path, html);
  await removeStale(runDir, files);
  return path;
}

/**
 * The gallery's page and data files: `put` is given each data file to write (those whose
 * signature is not in `options.written`); the page's text and every data file it names come back.
 */
async function buildGallery(
  runDir: string,
  source: GallerySource,
  options: BuildOptions,
  put: (file: string, text: string) => Promise<void>,
): Promise<{ html: string; files: Set<string> }> {
  const layouts = layoutsOf(source.plan);
  const statuses: string[] = [];
  const files = new Set<string>();
  const steps: PageStep[] = [];
  // plan.json lists steps in the manifest's order; each axis's values in the manifest's order too.
  for (const [stepAt, s] of source.plan.steps.entries()) {
    const cells = source.cells.get(s.id) ?? NO_CELLS;
    const axes = inManifestOrder(cells.axes, s, source.plan.steps);
    const axesKey = JSON.stringify(axes);
    const index = new IndexBuilder(axes, statuses);
    let spendUsd = 0;
    let unpriced = 0;
    const pages: PageRef[] = [];
    for (let at = 0, page = 0; at < cells.ids.length; at += GALLERY_PAGE_CELLS, page++) {
      const ids = cells.ids.slice(at, at + GALLERY_PAGE_CELLS);
      const packed = ids.map((id) => cells.packed(id));
      const sig = signatureOf(
        (function* () {
          yield String(stepAt);
          for (const [i, id] of ids.entries()) yield `${id}\t${packed[i] as string}\t${options.headlines?.get(id) ?? ''}`;
        })(),
      );
      const file = dataFileOf(s.id, page);
      const last = options.written?.get(file);
      // The same cells under the same axes: their part of the index as it was.
      const known: WrittenPage =
        last?.sig === sig && last.axes === axesKey ? last : { sig, axes: axesKey, rows: [], statuses: [], spendUsd: 0, unpriced: 0 };
      if (known !== last) {
        for (const [i, id] of ids.entries()) {
          const [status, , costUsd, , , , , cellUnpriced] = JSON.parse(packed[i] as string) as PackedCell;
          for (const n of index.rowOf(instanceAxes(id).values)) known.rows.push(n);
          known.statuses.push(status);
          known.spendUsd = jsonUsd(known.spendUsd + (costUsd ?? 0));
          if (cellUnpriced === 1) known.unpriced++;
        }
      }
      for (const [i, status] of known.statuses.entries()) index.push(known.rows, status, i * axes.length);
      spendUsd = jsonUsd(spendUsd + known.spendUsd);
      unpriced += known.unpriced;
      files.add(file);
      pages.push({ file, count: ids.length, sig });
      if (last?.sig === sig) {
        options.written?.set(file, known);
        continue;
      }
      const chunk = ids.map((id) => {
        const cell = cells.cell(id);
        const headline = options.headlines?.get(id);
        return headline === undefined ? cell : { ...cell, headline };
      });
      await makeThumbnails(runDir, chunk, options.signal, options.thumbnails ?? source.thumbnails);
      // The files quote the service (error text) and the manifest: secrets out.
      await put(file, redactEveryForm(dataFileText(stepAt, page, sig, chunk)));
      options.written?.set(file, known);
    }
    steps.push({
      fields: { id: s.id, model: s.model, forEach: s.for_each, planned: s.count, axes, layout: chooseLayout(axes, layouts.get(s.id)) },
      count: cells.ids.length,
      spendUsd,
      unpriced,
      index: index.index,
      pages,
    });
  }
  for (const file of options.written?.keys() ?? []) if (!files.has(file)) options.written?.delete(file);
  const html = galleryPageHtml(
    { pipeline: source.plan.pipeline, runId: source.plan.runId, writtenAt: new Date().toISOString(), statuses, steps },
    { review: options.review === true },
  );
  return { html: redactEveryForm(html), files };
}

const NO_CELLS: StepCells = {
  ids: [],
  axes: [],
  cell: (id) => {
    throw new Error(`no cell ${id}`);
  },
  packed: (id) => {
    throw new Error(`no cell ${id}`);
  },
};

/**
 * A step's axes with their values in the order plan.json recorded (list values as written, CSV rows
 * as in the file); a for_each step's upstream axes (`tier`, or `sheets.tier` when its own axes use
 * the name) in its upstream's order. Values it did not record come after those, numbers by value, then text (as cells are ordered).
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
    if (!recorded) return { name: axis.name, values: [...axis.values].sort(compareValues) };
    const rank = new Map(recorded.map((label, i) => [unquote(label), i]));
    const values = [...axis.values].sort(
      (a, b) => (rank.get(a) ?? Number.MAX_SAFE_INTEGER) - (rank.get(b) ?? Number.MAX_SAFE_INTEGER) || compareValues(a, b),
    );
    return { name: axis.name, values };
  });
}

/** Writes `text` to a temp file beside `path` and renames it over `path`. */
async function writeAtomically(path: string, text: string): Promise<void> {
  const temp = `${path}.${process.pid}.tmp`;
  const file = await open(temp, 'w');
  try {
    await file.write(text);
  } catch (error) {
    await file.close();
    await unlink(temp).catch(() => undefined);
    throw error;
  }
  await file.close();
  await rename(temp, path);
}

/** Removes the data files (and this process's temp files) under gallery-data/ that the page does not name. */
async function removeStale(runDir: string, keep: ReadonlySet<string>): Promise<void> {
  let names: string[];
  try {
    names = await readdir(join(runDir, GALLERY_DATA_DIR));
  } catch {
    return;
  }
  for (const name of names) {
    const file = `${GALLERY_DATA_DIR}/${name}`;
    const ours = name.endsWith('.js') || name.endsWith(`.${process.pid}.tmp`);
    if (ours && !keep.has(file)) await unlink(join(runDir, file)).catch(() => undefined);
  }
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
  /** The data files of the last writes, by signature: only those whose cells changed are written again. */
  readonly #written: WrittenPages = new Map();
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
      await writeGallery(this.runDir, this.source(), {
        thumbnails: this.#thumbnails,
        headlines: await this.#headlines,
        written: this.#written,
      });
    } catch (error) {
      this.onError(error);
    }
    this.#last = Date.now();
    this.#cost = this.#last - started;
  }
}

/**
 * A finished (or interrupted) run's gallery, in memory (`genpipe review` serves it): its page and
 * data files by path, built from its journal as it streams (sorted and reduced to what cells show,
 * in bounded memory: report/instance-lines.ts), its cells kept packed, thumbnails made where
 * missing. A journal of more than twice MAX_GALLERY_CELLS instances gets none (its page would show
 * a part of it): undefined.
 */
export async function galleryPageOf(
  runDir: string,
  options: { review?: boolean; maxInstances?: number } = {},
): Promise<GalleryFiles | undefined> {
  const source = await gallerySourceOf(runDir, options.maxInstances);
  if (source === undefined) return undefined;
  const files: GalleryFiles = new Map();
  const { html } = await buildGallery(
    runDir,
    source,
    { review: options.review === true, headlines: await readHeadlines(runDir) },
    async (file, text) => {
      files.set(file, text);
    },
  );
  files.set(GALLERY_FILE, html);
  return files;
}

/** Most instances a journal may name and still get a gallery: twice the cells a gallery keeps. */
export const MAX_GALLERY_INSTANCES = 2 * MAX_GALLERY_CELLS;

/**
 * The gallery's cells of a run, from its journal; undefined when the journal names more than
 * MAX_GALLERY_INSTANCES instances. The journal decides, not plan.json (a subset run, a run whose
 * plan.json says otherwise): a plan over the limit has its journal counted first, stopping at the
 * limit, so that a journal of millions is not replayed for nothing; a plan within it is replayed,
 * counting as it goes. A caller that has just read the journal (the cost report) may say how many
 * distinct instances it holds at least (`atLeast`): more than the limit, and it is not read again.
 */
async function gallerySourceOf(runDir: string, max = MAX_GALLERY_INSTANCES, atLeast = 0): Promise<GallerySource | undefined> {
  if (atLeast > max) return undefined;
  const plan = await readPlanFile(runDir);
  const journal = runFile(runDir, 'journal');
  if (plan.steps.reduce((n, s) => n + s.count, 0) > max && (await journalInstancesOver(journal, max))) return undefined;
  const publicBases = publicBasesOf(plan);
  const cells = new GalleryCells(pricesOf(plan), Math.min(MAX_GALLERY_CELLS, max), publicBases, new InstanceOrder(plan.steps));
  const thumbnails: ThumbnailMemo = new Map();
  // A public sink's uploads are read too: a cell links the files the bucket holds with its bytes.
  for await (const [id, entry] of instanceStates(journal, { gallery: true, sinks: publicBases.size > 0 })) {
    for (const d of entry.downloads?.values() ?? [])
      if (d.width && d.height) noteDownloadedImage(thumbnails, d.path, { width: d.width, height: d.height });
    cells.add(id, entry);
  }
  if (cells.seen > max) return undefined;
  return { plan, cells: cells.withLive([]), thumbnails };
}

const INSTANCE_FIELD = Buffer.from('"instance":"');

/**
 * True when the journal names more than `limit` distinct instances; it stops reading as soon as
 * it has seen that many. Each line's first `"instance":"…"` is read as it is written (JSON
 * escapes and all), not parsed.
 */
export async function journalInstancesOver(journalPath: string, limit: number): Promise<boolean> {
  const seen = new Set<string>();
  const idOf = (json: Buffer): string | null => {
    const at = json.indexOf(INSTANCE_FIELD);
    if (at < 0) return null;
    const start = at + INSTANCE_FIELD.length;
    for (let i = start; i < json.length; i++) {
      const c = json[i];
      if (c === 0x5c) i++;
      else if (c === 0x22) return json.toString('utf8', start, i);
    }
    return null;
  };
  for await (const batch of streamJournalBatches(journalPath, { skipTypes: ['run_started', 'run_finished'], project: idOf })) {
    for (const item of batch) {
      const id = typeof item === 'string' ? item : item === null ? undefined : (item as { instance?: unknown }).instance;
      if (typeof id !== 'string') continue;
      seen.add(id);
      if (seen.size > limit) return true;
    }
  }
  return false;
}

/**
 * Rewrites a run's gallery from its journal (see galleryPageOf); the page's path, or undefined when
 * skipped. `maxInstances` (tests): another limit than MAX_GALLERY_INSTANCES. `instancesAtLeast`:
 * how many distinct instances the journal is known to name at least (the report's lines): over
 * the limit, the journal is not counted again (a million instances: 1.4 s).
 */
export async function rewriteGallery(
  runDir: string,
  options: { maxInstances?: number; instancesAtLeast?: number } = {},
): Promise<string | undefined> {
  const source = await gallerySourceOf(runDir, options.maxInstances, options.instancesAtLeast);
  return source && writeGallery(runDir, source);
}
