/**
 * What a run read besides its manifest: each CSV axis's rows and each preset axis's presets, kept
 * in its directory as `inputs.json` when it starts, with their SHA-256 in plan.json. `genpipe diff`
 * (and a resume) plan the run again from these, never from today's CSV file or catalog: a row
 * inserted or a headline edited for the next run does not rewrite what this one was given.
 */
import { createHash } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { GenpipeError } from '../../api/errors.js';
import type { Preset } from '../../api/wire.js';
import { csvRowOrigin, type RecordedAxis } from '../../manifest/axes.js';
import type { CsvRow } from '../../manifest/csv.js';
import type { Plan } from '../../plan/plan.js';
import { RUN_FILES } from './run-layout.js';

/** The file in a run directory. */
export const RUN_INPUTS_FILE = RUN_FILES.inputs;

/** plan.json's record of it. */
export interface RunInputsRecord {
  file: string;
  sha256: string;
}

type SavedAxis =
  { kind: 'csv'; columns: string[]; rows: [line: number, values: Record<string, string>][] } | { kind: 'presets'; presets: Preset[] };

interface SavedInputs {
  version: 1;
  /** Step → axis → what it read. */
  steps: Record<string, Record<string, SavedAxis>>;
}

/** The recorded axes of a run, by step and axis (PlanOptions.recorded). */
export type RecordedAxes = (step: string, axis: string) => RecordedAxis | undefined;

/** The CSV rows and presets the plan's axes read, as inputs.json holds them. */
function savedInputsOf(plan: Plan): SavedInputs {
  const steps: SavedInputs['steps'] = {};
  for (const step of plan.steps) {
    const written = step.step.matrix ?? {};
    for (const axis of step.matrix.axes) {
      const spec = written[axis.name];
      if (spec === undefined || Array.isArray(spec) || 'range' in spec) continue;
      let saved: SavedAxis;
      if ('csv' in spec) {
        const rows: [number, Record<string, string>][] = [];
        for (let i = 0; i < axis.length; i++) {
          const values = axis.value(i) as Record<string, string>;
          rows.push([csvRowOrigin(values)?.line ?? i + 2, values]);
        }
        saved = { kind: 'csv', columns: [...(axis.columns ?? [])], rows };
      } else {
        saved = { kind: 'presets', presets: Array.from({ length: axis.length }, (_, i) => axis.value(i) as Preset) };
      }
      (steps[step.id] ??= {})[axis.name] = saved;
    }
  }
  return { version: 1, steps };
}

/**
 * Writes `inputs.json` into a new run directory (never over one) and returns plan.json's record
 * of it. Called by createRunDir before plan.json, which carries the hash.
 */
export async function saveRunInputs(dir: string, plan: Plan): Promise<RunInputsRecord> {
  const text = `${JSON.stringify(savedInputsOf(plan))}\n`;
  await writeFile(join(dir, RUN_INPUTS_FILE), text, { flag: 'wx' });
  return { file: RUN_INPUTS_FILE, sha256: sha256(text) };
}

const sha256 = (text: string): string => createHash('sha256').update(text).digest('hex');

/**
 * The recorded axes of a run, checked against the hash its plan.json holds; undefined for a run
 * made before genpipe kept them (its plan.json has no record). A missing or altered file is
 * refused (invalid_input), since planning from anything else would show inputs the run never had.
 */
export async function readRunInputs(runDir: string, record: RunInputsRecord | undefined): Promise<RecordedAxes | undefined> {
  if (record === undefined) return undefined;
  const path = join(runDir, RUN_INPUTS_FILE);
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw new GenpipeError('invalid_input', `${path} is missing: the run's CSV rows and presets are not known.`, { cause: error });
  }
  if (sha256(text) !== record.sha256)
    throw new GenpipeError(
      'invalid_input',
      `${path} does not match the SHA-256 its run's plan.json recorded: it was changed after the run started.`,
    );
  let saved: SavedInputs;
  try {
    saved = JSON.parse(text) as SavedInputs;
  } catch (error) {
    throw new GenpipeError('invalid_input', `${path} is not valid JSON.`, { cause: error });
  }
  const axes = new Map<string, RecordedAxis>();
  for (const [step, byAxis] of Object.entries(saved.steps ?? {})) {
    for (const [name, axis] of Object.entries(byAxis)) {
      axes.set(
        `${step}\u0000${name}`,
        axis.kind === 'csv'
          ? { kind: 'csv', columns: axis.columns, rows: axis.rows.map(([line, values]): CsvRow => ({ line, values })) }
          : axis,
      );
    }
  }
  return (step, axis) => axes.get(`${step}\u0000${axis}`);
}

/** True when a plan has an axis read from a CSV file or the preset catalog. */
export function readsCsvOrPresets(plan: Plan): boolean {
  return plan.steps.some((s) => Object.values(s.step.matrix ?? {}).some((a) => !Array.isArray(a) && !('range' in a)));
}
