/**
 * What `genpipe diff RUN_A RUN_B` compares: the instances the two runs share (by instance id), each
 * with the input fields that differ, and each run's status, cost, error and files, read from the
 * runs' journals and plan.json files alone.
 */
import { cellsOfState } from '../gallery/write-gallery.js';
import type { Cell } from '../gallery/gallery-data.js';
import type { PlanFile } from '../run/files/run-dir.js';
import type { RunState } from '../run/journal/run-state.js';
import { formatCount } from '../util/format-usd.js';
import { InstanceOrder } from '../plan/instance-order.js';
import { inputChanges, type InputChange, type RunInputs } from './run-inputs.js';

/** Rows the page lists (every shared instance is counted in the summary). */
export const MAX_DIFF_ROWS = 5_000;

export interface DiffRun {
  plan: PlanFile;
  runDir: string;
  state: RunState;
  inputs: RunInputs;
}

export interface DiffRow {
  id: string;
  step: string;
  values: Record<string, string>;
  /** undefined: planned in that run but never started. */
  a: Cell | undefined;
  b: Cell | undefined;
  /** undefined when either run's inputs are not known. */
  changes: InputChange[] | undefined;
  statusDiffers: boolean;
  costDiffers: boolean;
}

/** One run's side of the comparison: the shared instances' cost, and how many of them are unpriced (not in it). */
export interface DiffSide {
  pipeline: string;
  runId: string;
  runDir: string;
  costUsd: number;
  unpricedInstances: number;
}

export interface DiffData {
  a: DiffSide;
  b: DiffSide;
  shared: number;
  onlyA: number;
  onlyB: number;
  inputsDiffer: number;
  statusDiffers: number;
  rows: DiffRow[];
  notes: string[];
}

const NOT_STARTED = 'not started';

function cellsById(run: DiffRun): Map<string, { step: string; cell: Cell }> {
  const out = new Map<string, { step: string; cell: Cell }>();
  for (const [step, cells] of cellsOfState(run.plan, run.state)) for (const cell of cells) out.set(cell.id, { step, cell });
  return out;
}

/** Every instance id of a run: those it planned (when its inputs are known) and those it started. */
function idsOf(run: DiffRun, cells: ReadonlyMap<string, unknown>): Set<string> {
  const ids = new Set(cells.keys());
  if (run.inputs.inputs) for (const id of run.inputs.inputs.keys()) ids.add(id);
  return ids;
}

const stepOfId = (id: string): string => id.replace(/\[.*$/s, '');

/** A reused result is the completed result of an earlier run: the same outcome, not a difference. */
const sameAs = (status: string): string => (status === 'reused' ? 'completed' : status);

/**
 * In the one order every view lists instances in (InstanceOrder: steps and axes in the manifest's
 * order, list values as written, numbers by value), over B's steps (the run being looked at) and
 * then those only A has.
 */
function inViewOrder(ids: string[], a: DiffRun, b: DiffRun): string[] {
  const named = new Set(b.plan.steps.map((s) => s.id));
  return new InstanceOrder([...b.plan.steps, ...a.plan.steps.filter((s) => !named.has(s.id))]).sort(ids);
}

export function diffData(a: DiffRun, b: DiffRun): DiffData {
  const cellsA = cellsById(a);
  const cellsB = cellsById(b);
  const idsA = idsOf(a, cellsA);
  const idsB = idsOf(b, cellsB);
  const shared = inViewOrder(
    [...idsA].filter((id) => idsB.has(id)),
    a,
    b,
  );
  const rows: DiffRow[] = [];
  let inputsDiffer = 0;
  let statusDiffers = 0;
  let costA = 0;
  let costB = 0;
  let unpricedA = 0;
  let unpricedB = 0;
  for (const id of shared) {
    const ca = cellsA.get(id);
    const cb = cellsB.get(id);
    const inA = a.inputs.inputs?.get(id);
    const inB = b.inputs.inputs?.get(id);
    const changes = a.inputs.inputs && b.inputs.inputs && inA !== undefined && inB !== undefined ? inputChanges(inA, inB) : undefined;
    const statusA = sameAs(ca?.cell.status ?? NOT_STARTED);
    const statusB = sameAs(cb?.cell.status ?? NOT_STARTED);
    const row: DiffRow = {
      id,
      step: ca?.step ?? cb?.step ?? stepOfId(id),
      values: ca?.cell.values ?? cb?.cell.values ?? {},
      a: ca?.cell,
      b: cb?.cell,
      changes,
      statusDiffers: statusA !== statusB,
      // A reused result costs nothing again: its US$0 against the first run's price is no difference either.
      costDiffers: ca?.cell.status !== 'reused' && cb?.cell.status !== 'reused' && (ca?.cell.costUsd ?? 0) !== (cb?.cell.costUsd ?? 0),
    };
    costA += ca?.cell.costUsd ?? 0;
    costB += cb?.cell.costUsd ?? 0;
    if (ca?.cell.unpriced) unpricedA++;
    if (cb?.cell.unpriced) unpricedB++;
    if (changes && changes.length > 0) inputsDiffer++;
    if (row.statusDiffers) statusDiffers++;
    if (rows.length < MAX_DIFF_ROWS) rows.push(row);
  }
  const notes = [a.inputs.note, b.inputs.note].filter((n): n is string => n !== undefined);
  if (a.plan.pipeline !== b.plan.pipeline)
    notes.push(`the runs are of different pipelines (${a.plan.pipeline} and ${b.plan.pipeline}); instances are matched by id`);
  if (shared.length > MAX_DIFF_ROWS)
    notes.push(
      `the page lists the first ${formatCount(MAX_DIFF_ROWS)} of ${formatCount(shared.length)} shared instances; the counts above cover all of them`,
    );
  const side = (run: DiffRun, cost: number, unpricedInstances: number): DiffSide => ({
    pipeline: run.plan.pipeline,
    runId: run.plan.runId,
    runDir: run.runDir,
    costUsd: Math.round(cost * 1e6) / 1e6,
    unpricedInstances,
  });
  return {
    a: side(a, costA, unpricedA),
    b: side(b, costB, unpricedB),
    shared: shared.length,
    onlyA: idsA.size - shared.length,
    onlyB: idsB.size - shared.length,
    inputsDiffer,
    statusDiffers,
    rows,
    notes,
  };
}
