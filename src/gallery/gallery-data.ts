/**
 * What the contact sheet shows, read from a run's state (the journal, replayed or live) and its
 * plan.json: per step, its axes and grid, and per instance one cell that tells the truth about it.
 */
import type { PlanFile } from '../run/run-dir.js';
import { instanceCostUsd, instanceStatus, type InstanceState, type InstanceStatus } from '../run/run-state.js';
import { naturalCompare } from '../util/natural-compare.js';
import { chooseLayout, axesOf, type AxisValues, type GridLayout, type LayoutChoice } from './grid-layout.js';
import { instanceAxes } from './instance-axes.js';

/** `data-status` of a cell. */
export type CellStatus = InstanceStatus;

export interface CellFile {
  /** Relative to the run directory. */
  path: string;
  kind: 'image' | 'video' | 'audio' | 'text' | 'other';
  /** Relative to the run directory, for images. */
  thumb?: string | undefined;
}

export interface Cell {
  id: string;
  /** Axis → label. */
  values: Record<string, string>;
  status: CellStatus;
  error?: string | undefined;
  /** US$ this instance costs: the step's price, the service's reported cost, or 0 when refunded or reused. */
  costUsd?: number | undefined;
  requestId?: string | undefined;
  /** The seed a re-roll actually sent. */
  rerollSeed?: number | undefined;
  files: CellFile[];
  /** An agent's answer, shortened for the page. */
  answer?: string | undefined;
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

export interface GalleryInput {
  plan: Pick<PlanFile, 'pipeline' | 'runId' | 'steps'>;
  /** The cells, by step (see GalleryCells). */
  cells: ReadonlyMap<string, Iterable<Cell>>;
  /** Per step, the manifest's `gallery` choice. */
  layouts?: ReadonlyMap<string, LayoutChoice> | undefined;
  now?: Date | undefined;
}

export function galleryData({ plan, cells, layouts, now }: GalleryInput): GalleryData {
  const steps: GalleryStep[] = plan.steps.map((s) => {
    const list = [...(cells.get(s.id) ?? [])].sort((a, b) => naturalCompare(a.id, b.id));
    const axes = axesOf(list.map((c) => Object.entries(c.values)));
    return { id: s.id, model: s.model, forEach: s.for_each, planned: s.count, axes, layout: chooseLayout(axes, layouts?.get(s.id)), cells: list };
  });
  return { pipeline: plan.pipeline, runId: plan.runId, writtenAt: (now ?? new Date()).toISOString(), steps };
}

/** Most cells a gallery keeps: a contact sheet of more is no longer something to look at. */
export const MAX_GALLERY_CELLS = 100_000;

/**
 * The cells of a run, collected as its instances finish (the runner forgets a finished instance's
 * state; its cell is all the gallery keeps of it), at most MAX_GALLERY_CELLS of them.
 */
export class GalleryCells {
  readonly #byStep = new Map<string, Map<string, Cell>>();
  #count = 0;
  /** Instances left out once the cap was reached. */
  dropped = 0;

  constructor(
    private readonly prices: ReadonlyMap<string, number | null>,
    private readonly max = MAX_GALLERY_CELLS,
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
    cells.set(id, cellOf(id, entry, values, this.prices.get(step) ?? null));
  }

  /** These cells, with those of `live` instances (still in a run's state) laid over them. */
  withLive(live: Iterable<[string, InstanceState]>): Map<string, Cell[]> {
    const out = new Map<string, Map<string, Cell>>();
    for (const [step, cells] of this.#byStep) out.set(step, new Map(cells));
    for (const [id, entry] of live) {
      const { step, values } = instanceAxes(id);
      let cells = out.get(step);
      if (!cells) out.set(step, (cells = new Map()));
      if (cells.size >= this.max) continue;
      cells.set(id, cellOf(id, entry, values, this.prices.get(step) ?? null));
    }
    return new Map([...out].map(([step, cells]) => [step, [...cells.values()]]));
  }
}

function cellOf(id: string, entry: InstanceState, values: [string, string][], priceUsd: number | null): Cell {
  const status = instanceStatus(entry);
  const files: CellFile[] = [...(entry.downloads?.entries() ?? [])]
    .sort(([a], [b]) => a - b)
    .map(([, d]) => {
      const kind = fileKind(d.path);
      return kind === 'image' ? { path: d.path, kind, thumb: thumbPathOf(d.path) } : { path: d.path, kind };
    });
  const answer = entry.final?.result?.answer;
  const cell: Cell = { id, values: Object.fromEntries(values), status, files };
  const error = entry.final?.error ?? entry.failed?.message;
  if (error !== undefined) cell.error = error;
  const cost = instanceCostUsd(entry, priceUsd);
  if (cost !== undefined) cell.costUsd = cost;
  const requestId = requestIdOf(entry);
  if (requestId !== undefined) cell.requestId = requestId;
  if (entry.rerollSeed !== undefined) cell.rerollSeed = entry.rerollSeed;
  if (typeof answer === 'string') cell.answer = answer.length > MAX_ANSWER_CHARS ? `${answer.slice(0, MAX_ANSWER_CHARS)}…` : answer;
  return cell;
}

function requestIdOf(entry: InstanceState): string | undefined {
  const s = entry.submission;
  if (!s) return undefined;
  if (s.kind === 'request') return s.requestId;
  if (s.kind === 'job_set') return s.jobSetId;
  return s.messageId;
}
