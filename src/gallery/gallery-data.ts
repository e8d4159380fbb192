/**
 * What the contact sheet shows, read from a run's state (the journal, replayed or live) and its
 * plan.json: per step, its axes and grid, and per instance one cell that tells the truth about it.
 */
import { instanceCostUsd, instanceStatus, instanceUnpriced, type InstanceState, type InstanceStatus } from '../run/journal/run-state.js';
import { InstanceOrder } from '../plan/instance-order.js';
import { sortedAxes, type AxisValues, type GridLayout } from './grid-layout.js';
import { instanceAxes } from './instance-axes.js';
import { redactEveryForm } from '../util/redact.js';
import { publicUrl } from '../sink/sink-config.js';
import { submissionId } from '../models/submission.js';

/** `data-status` of a cell. */
export type CellStatus = InstanceStatus;

export interface CellFile {
  /** Relative to the run directory. */
  path: string;
  kind: 'image' | 'video' | 'audio' | 'text' | 'other';
  /** Relative to the run directory, for images. */
  thumb?: string | undefined;
  /** Relative to the run directory, for videos: their first frame (thumbnails.ts), when ffmpeg could make it. */
  poster?: string | undefined;
  /** Its public URL in the step's storage sink (`public_base_url`), once uploaded with these bytes. */
  url?: string | undefined;
}

export interface Cell {
  id: string;
  /** Axis → label. */
  values: Record<string, string>;
  status: CellStatus;
  error?: string | undefined;
  /** US$ this instance costs: the step's price, the service's reported cost, or 0 when refunded or reused. */
  costUsd?: number | undefined;
  /** An attempt of it was sent with no known price: what it cost is not in costUsd (never US$0). */
  unpriced?: true | undefined;
  requestId?: string | undefined;
  /** The seed a re-roll actually sent. */
  rerollSeed?: number | undefined;
  files: CellFile[];
  /** An agent's answer, shortened for the page. */
  answer?: string | undefined;
  /** What the instance is about: a marketing image's prompt, an agent's question (run/files/run-headlines.ts). */
  headline?: string | undefined;
}

export interface GalleryStep {
  id: string;
  model: string;
  forEach: string | null;
  planned: number;
  axes: AxisValues[];
  layout: GridLayout;
  cells: Cell[];
}

export interface GalleryData {
  pipeline: string;
  runId: string;
  writtenAt: string;
  steps: GalleryStep[];
}

/** Most characters of an agent answer kept in the page (the .md file has all of it). */
const MAX_ANSWER_CHARS = 4_000;

const IMAGE = /\.(png|jpe?g|webp|gif)$/i;
const VIDEO = /\.(mp4|webm|mov)$/i;
const AUDIO = /\.(wav|mp3|m4a|ogg)$/i;

export function fileKind(path: string): CellFile['kind'] {
  if (IMAGE.test(path)) return 'image';
  if (VIDEO.test(path)) return 'video';
  if (AUDIO.test(path)) return 'audio';
  if (/\.(md|txt)$/i.test(path)) return 'text';
  return 'other';
}

/** Where an image's thumbnail goes: `thumbs/<path below outputs/>.webp`. */
export const thumbPathOf = (path: string): string => `thumbs/${path.replace(/^outputs\//, '')}.webp`;

/** Where a video's poster frame goes: `thumbs/<path below outputs/>.jpg`. */
export const posterPathOf = (path: string): string => `thumbs/${path.replace(/^outputs\//, '')}.jpg`;

/** Most cells a gallery keeps: a contact sheet of more is no longer something to look at. */
export const MAX_GALLERY_CELLS = 100_000;

/**
 * The cells of a run, collected as its instances finish (the runner forgets a finished instance's
 * state; its cell is all the gallery keeps of it), at most MAX_GALLERY_CELLS of them.
 *
 * Each is kept packed: one short JSON string of what its id does not tell (its axis values come
 * back from the id, its thumbnail from the output's path). As objects, 100,000 cells held 66 MB
 * of a running run's heap; packed, about a third of that.
 */
export class GalleryCells {
  readonly #byStep = new Map<string, Map<string, string>>();
  /** Per step, axis → labels seen, kept as cells come so a rewrite need not gather them. */
  readonly #labels = new Map<string, Map<string, Set<string>>>();
  #count = 0;
  /** Instances left out once the cap was reached. */
  dropped = 0;

  /** Instances seen: those kept and those dropped. */
  get seen(): number {
    return this.#count + this.dropped;
  }

  constructor(
    private readonly prices: ReadonlyMap<string, number | null>,
    private readonly max = MAX_GALLERY_CELLS,
    /** Per step with a public storage sink, its prefix's public URL (write-gallery.ts publicBasesOf). */
    private readonly publicBases: ReadonlyMap<string, string> = new Map(),
    /** The views' order (plan/instance-order.ts), from plan.json's steps: report.md and outputs.csv list instances in it too. */
    private readonly order: InstanceOrder = new InstanceOrder(),
  ) {}

  /** Sets (or replaces) the cell of an instance from its state. */
  add(id: string, entry: InstanceState): void {
    const { step, values } = instanceAxes(id);
    let cells = this.#byStep.get(step);
    if (!cells) this.#byStep.set(step, (cells = new Map()));
    if (!cells.has(id)) {
      if (this.#count >= this.max) {
        this.dropped++;
        return;
      }
      this.#count++;
    }
    cells.set(id, packCell(cellOf(id, entry, values, this.prices.get(step) ?? null, this.publicBases.get(step))));
    let labels = this.#labels.get(step);
    if (!labels) this.#labels.set(step, (labels = new Map()));
    for (const [axis, label] of values) {
      let set = labels.get(axis);
      if (!set) labels.set(axis, (set = new Set()));
      set.add(label);
    }
  }

  /**
   * These cells, with those of `live` instances (still in a run's state) laid over them, per step:
   * the ids in the views' order, the axes, and each id's cell made on demand. Read it at once, before
   * the run moves on.
   */
  withLive(live: Iterable<[string, InstanceState]>): Map<string, StepCells> {
    const liveByStep = new Map<string, Map<string, Cell>>();
    for (const [id, entry] of live) {
      const { step, values } = instanceAxes(id);
      let cells = liveByStep.get(step);
      if (!cells) liveByStep.set(step, (cells = new Map()));
      cells.set(id, cellOf(id, entry, values, this.prices.get(step) ?? null, this.publicBases.get(step)));
    }
    const out = new Map<string, StepCells>();
    for (const step of new Set([...this.#byStep.keys(), ...liveByStep.keys()])) {
      const stored = this.#byStep.get(step) ?? new Map<string, string>();
      const liveCells = liveByStep.get(step) ?? new Map<string, Cell>();
      const unsorted = [...stored.keys()];
      for (const id of liveCells.keys()) if (!stored.has(id) && unsorted.length < this.max) unsorted.push(id);
      const ids = this.order.sort(unsorted);
      const labels = new Map([...(this.#labels.get(step) ?? [])].map(([axis, set]) => [axis, new Set(set)]));
      for (const cell of liveCells.values()) {
        for (const [axis, label] of Object.entries(cell.values)) {
          let set = labels.get(axis);
          if (!set) labels.set(axis, (set = new Set()));
          set.add(label);
        }
      }
      const axes = sortedAxes(labels);
      const cellOfId = (id: string): Cell => liveCells.get(id) ?? unpackCell(id, stored.get(id) as string);
      const packedOf = (id: string): string => {
        const cell = liveCells.get(id);
        return cell ? packCell(cell) : (stored.get(id) as string);
      };
      out.set(step, { ids, axes, cell: cellOfId, packed: packedOf });
    }
    return out;
  }
}

/** A step's cells, sorted, without making them all at once. */
export interface StepCells {
  /** In the views' order (InstanceOrder). */
  ids: string[];
  axes: AxisValues[];
  cell(id: string): Cell;
  /** The cell of `id` as a short JSON text (status first, cost third: PackedCell), without making it. */
  packed(id: string): string;
}

/** The cells of `steps` as lists (a page, a diff: cells of a bounded run, all at once). */
export const cellLists = (steps: ReadonlyMap<string, StepCells>): Map<string, Cell[]> =>
  new Map([...steps].map(([step, s]) => [step, s.ids.map((id) => s.cell(id))]));

type PackedFile = [path: string, kind: CellFile['kind'], url?: string];
/** A cell as GalleryCells keeps it (and StepCells.packed gives it). */
export type PackedCell = [
  status: CellStatus,
  files: PackedFile[],
  costUsd: number | null,
  requestId: string | null,
  error: string | null,
  rerollSeed: number | null,
  answer: string | null,
  unpriced: 1 | null,
];

function packCell(cell: Cell): string {
  const packed: PackedCell = [
    cell.status,
    cell.files.map((f): PackedFile => (f.url === undefined ? [f.path, f.kind] : [f.path, f.kind, f.url])),
    cell.costUsd ?? null,
    cell.requestId ?? null,
    cell.error ?? null,
    cell.rerollSeed ?? null,
    cell.answer ?? null,
    cell.unpriced ? 1 : null,
  ];
  return JSON.stringify(packed);
}

function unpackCell(id: string, text: string): Cell {
  const [status, files, costUsd, requestId, error, rerollSeed, answer, unpriced] = JSON.parse(text) as PackedCell;
  const cell: Cell = {
    id,
    values: Object.fromEntries(instanceAxes(id).values),
    status,
    files: files.map(([path, kind, url]) => fileOf(path, kind, url)),
  };
  if (error !== null) cell.error = error;
  if (costUsd !== null) cell.costUsd = costUsd;
  if (requestId !== null) cell.requestId = requestId;
  if (rerollSeed !== null) cell.rerollSeed = rerollSeed;
  if (answer !== null) cell.answer = answer;
  if (unpriced === 1) cell.unpriced = true;
  return cell;
}

function fileOf(path: string, kind: CellFile['kind'], url?: string): CellFile {
  const file: CellFile =
    kind === 'image'
      ? { path, kind, thumb: thumbPathOf(path) }
      : kind === 'video'
        ? { path, kind, poster: posterPathOf(path) }
        : { path, kind };
  if (url !== undefined) file.url = url;
  return file;
}

function cellOf(id: string, entry: InstanceState, values: [string, string][], priceUsd: number | null, publicBase?: string): Cell {
  const status = instanceStatus(entry);
  const files: CellFile[] = [...(entry.downloads?.entries() ?? [])]
    .sort(([a], [b]) => a - b)
    .map(([output, d]) => {
      // Linked where the team reads it once it is in the bucket with these bytes, never before.
      const uploaded =
        publicBase !== undefined && d.path.startsWith('outputs/') && d.sha256 !== '' && entry.sinkUploads?.get(output)?.sha256 === d.sha256;
      return fileOf(d.path, fileKind(d.path), uploaded ? publicUrl({ publicBaseUrl: publicBase }, d.path) : undefined);
    });
  const answer = entry.final?.result?.answer;
  const cell: Cell = { id, values: Object.fromEntries(values), status, files };
  const error = entry.final?.error ?? entry.failed?.message;
  // Redacted as text, before the page escapes it for HTML and JSON (where its spelling changes).
  if (error !== undefined) cell.error = redactEveryForm(error);
  const cost = instanceCostUsd(entry, priceUsd);
  if (cost !== undefined) cell.costUsd = cost;
  if (instanceUnpriced(entry, priceUsd)) cell.unpriced = true;
  const requestId = requestIdOf(entry);
  if (requestId !== undefined) cell.requestId = requestId;
  if (entry.rerollSeed !== undefined) cell.rerollSeed = entry.rerollSeed;
  if (typeof answer === 'string')
    cell.answer = redactEveryForm(answer.length > MAX_ANSWER_CHARS ? `${answer.slice(0, MAX_ANSWER_CHARS)}…` : answer);
  return cell;
}

const requestIdOf = (entry: InstanceState): string | undefined => (entry.submission ? submissionId(entry.submission) : undefined);
