/**
 * The rows of outputs.csv and outputs.jsonl: one per output file (or one per instance without
 * files), with a column per sweep axis so a spreadsheet can sort and filter by them.
 *
 * - An axis is a column named after it; a CSV axis is a column per CSV column (`row.sku`), a preset
 *   axis its name. A for_each row carries its upstream instance's axes too.
 * - Then status, the error sentence, the request id (`job_set_id` for job sets), the seed a re-roll
 *   actually sent, the output's role (`image-0`, `video`, `answer`…), the file, its sha256 and the cost.
 * - A run with a storage sink adds `sink_uri` (`s3://BUCKET/KEY`, once the file is in the
 *   bucket: its `sink_uploaded` record has the file's sha256) and `sink_url` (its public URL, from
 *   the sink's `public_base_url`, on the same condition), and `sink_status`: `uploaded`,
 *   `unverified: <why>` (uploaded, its bytes in the store unchecked), `conflict: <object>…` (another
 *   object at the key, not overwritten), `skipped: <object>…` (`on_conflict: skip`) or `pending`.
 */
import { csvRowOrigin } from '../../manifest/axes.js';
import { submissionId, submissionIdColumn } from '../../models/submission.js';
import type { Plan, StepPlan } from '../../plan/plan.js';
import { instanceCostUsd, instanceStatus, type InstanceState } from '../journal/run-state.js';

export interface OutputRow {
  instance: string;
  step: string;
  axes: Record<string, string>;
  status: string;
  error?: string | undefined;
  request_id?: string | undefined;
  job_set_id?: string | undefined;
  reroll_seed?: number | undefined;
  role?: string | undefined;
  file?: string | undefined;
  sha256?: string | undefined;
  cost_usd?: number | undefined;
  sink_uri?: string | undefined;
  sink_url?: string | undefined;
  sink_status?: string | undefined;
}

export const LEADING_COLUMNS = ['instance', 'step'] as const;
export const TRAILING_COLUMNS = [
  'status',
  'error',
  'request_id',
  'job_set_id',
  'reroll_seed',
  'role',
  'file',
  'sha256',
  'cost_usd',
] as const;
/** After the trailing columns, in the outputs.csv of a run with a storage sink only. */
export const SINK_COLUMNS = ['sink_uri', 'sink_url', 'sink_status'] as const;

/** The axis columns of a plan, in step and axis order, each once; a for_each step brings its upstream's first. */
export function axisColumns(plan: Plan): string[] {
  const byStep = new Map<string, string[]>();
  const columns = new Set<string>();
  for (const step of plan.steps) {
    const own: string[] = [];
    if (step.forEach) own.push(...(byStep.get(step.forEach) ?? []));
    for (const axis of step.matrix.axes) {
      if (axis.columns) own.push(...axis.columns.map((c) => `${axis.name}.${c}`));
      else own.push(axis.name);
    }
    for (const entry of step.step.include ?? []) for (const key of Object.keys(entry)) if (!own.includes(key)) own.push(key);
    byStep.set(step.id, own);
    for (const c of own) columns.add(c);
  }
  return [...columns];
}

/** An instance's sweep values as column → text: CSV rows spread by column, presets by name. */
export function axisCells(values: Readonly<Record<string, unknown>>, out: Record<string, string> = {}): Record<string, string> {
  for (const [axis, value] of Object.entries(values)) {
    const origin = csvRowOrigin(value);
    if (origin) {
      for (const column of origin.columns) out[`${axis}.${column}`] = String((value as Record<string, unknown>)[column] ?? '');
    } else if (value !== null && typeof value === 'object') {
      const name = (value as { name?: unknown }).name;
      out[axis] = typeof name === 'string' ? name : JSON.stringify(value);
    } else out[axis] = value === null || value === undefined ? '' : String(value);
  }
  return out;
}

/** What the driver knows of an instance besides its journal state. */
export interface InstanceFacts {
  step: StepPlan | undefined;
  /** Its sweep values, and its upstream's for a for_each instance. */
  values: Readonly<Record<string, unknown>>;
  upstreamValues?: Readonly<Record<string, unknown>> | undefined;
  /** The step's storage sink (sink/run-sinks.ts StepSink), for the public URL of an uploaded file. */
  sink?: { url(runRelativePath: string): string | undefined } | undefined;
}

/** The rows of one instance. */
export function outputRows(id: string, entry: InstanceState, facts: InstanceFacts | undefined): OutputRow[] {
  const axes: Record<string, string> = {};
  if (facts?.upstreamValues) axisCells(facts.upstreamValues, axes);
  if (facts) axisCells(facts.values, axes);
  const base: OutputRow = { instance: id, step: facts?.step?.id ?? id.replace(/\[.*$/s, ''), axes, status: instanceStatus(entry) };
  const error = entry.failed?.message ?? entry.final?.error;
  if (error !== undefined) base.error = error;
  const submission = entry.submission;
  if (submission) base[submissionIdColumn(submission)] = submissionId(submission);
  if (entry.rerollSeed !== undefined) base.reroll_seed = entry.rerollSeed;
  const cost = instanceCostUsd(entry, facts?.step?.priceUsd);
  if (cost !== undefined) base.cost_usd = cost;
  if (!entry.downloads?.size) return [base];
  const outputs = entry.final?.outputs ?? [];
  return [...entry.downloads.entries()]
    .sort(([a], [b]) => a - b)
    .map(([index, d], i) => {
      const row: OutputRow = {
        ...base,
        role: outputs[index]?.name ?? (index === outputs.length ? 'answer' : `output-${index}`),
        file: d.path,
        sha256: d.sha256,
        // The instance's cost once, on its first row: a sum over the column is the run's cost.
        ...(i === 0 ? {} : { cost_usd: undefined }),
      };
      // In the sink only once these very bytes are (a file made again is pending until uploaded).
      const uploaded = entry.sinkUploads?.get(index);
      if (uploaded && uploaded.sha256 === d.sha256) {
        row.sink_uri = `s3://${uploaded.bucket}/${uploaded.key}`;
        const url = facts?.sink?.url(d.path);
        if (url !== undefined) row.sink_url = url;
      }
      if (facts?.sink) row.sink_status = sinkStatus(entry, index, d.sha256);
      return row;
    });
}

/** Where an output stands in its sink, in outputs.csv's words (see the file comment). */
function sinkStatus(entry: InstanceState, output: number, sha256: string): string {
  if (entry.sinkUploads?.get(output)?.sha256 === sha256) {
    const unverified = entry.sinkUnverified?.get(output);
    return unverified?.sha256 === sha256 ? `unverified: ${unverified.reason}` : 'uploaded';
  }
  const conflict = entry.sinkConflicts?.get(output);
  if (conflict?.sha256 !== sha256) return 'pending';
  const where = `another object is at s3://${conflict.bucket}/${conflict.key}`;
  return conflict.action === 'skipped' ? `skipped: ${where} (on_conflict: skip)` : `conflict: ${where}, not overwritten`;
}
