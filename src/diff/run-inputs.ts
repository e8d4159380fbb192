/**
 * The inputs a run's instances were given, for `genpipe diff`: its manifest as the run read it
 * (the copy in its directory, or, for runs made before genpipe kept one, the file plan.json names,
 * as it is now) planned again with the run's own id and start time, and with the CSV rows and
 * presets the run read (inputs.json, run/files/run-inputs.ts), never today's files. Nothing is sent,
 * except a catalog read for a manifest with selections (or preset axes of a run made before
 * genpipe kept its presets).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseDocument } from 'yaml';
import { loadManifestText } from '../manifest/load.js';
import { buildPlan, type PlanOptions } from '../plan/plan.js';
import { MANIFEST_COPY, type PlanFile } from '../run/files/run-dir.js';
import { formatCount } from '../util/format-usd.js';
import { readRunInputs, readsCsvOrPresets, type RecordedAxes } from '../run/files/run-inputs.js';

/** Larger runs are compared without their inputs (planning them again would take long). */
export const MAX_REPLANNED_INSTANCES = 200_000;

export type RunInputs = { inputs: ReadonlyMap<string, unknown>; note?: string | undefined } | { inputs: undefined; note: string };

export async function runInputs(
  runDir: string,
  plan: PlanFile,
  options: Pick<PlanOptions, 'catalog' | 'presets' | 'env'>,
): Promise<RunInputs> {
  const planned = plan.steps.reduce((n, s) => n + s.count, 0);
  if (planned > MAX_REPLANNED_INSTANCES)
    return {
      inputs: undefined,
      note: `run ${plan.runId} has ${formatCount(planned)} instances, over the ${formatCount(MAX_REPLANNED_INSTANCES)} whose inputs diff compares`,
    };
  let text: string;
  let note: string | undefined;
  try {
    text = await readFile(join(runDir, MANIFEST_COPY), 'utf8');
  } catch {
    try {
      text = await readFile(plan.manifest, 'utf8');
      note = `run ${plan.runId} keeps no copy of its manifest (it was made before genpipe kept one): its inputs are those ${plan.manifest} gives now`;
    } catch {
      return {
        inputs: undefined,
        note: `run ${plan.runId} keeps no copy of its manifest and ${plan.manifest} is gone: its inputs are not compared`,
      };
    }
  }
  let recorded: RecordedAxes | undefined;
  try {
    recorded = await readRunInputs(runDir, plan.inputs);
  } catch (error) {
    return {
      inputs: undefined,
      note: `the inputs of run ${plan.runId} are not compared: ${error instanceof Error ? error.message.replace(/\.$/, '') : String(error)}`,
    };
  }
  try {
    // What a run is told when it ends is no input, and its URLs are kept out of the copy.
    const document = parseDocument(text);
    if (document.has('notify')) {
      document.delete('notify');
      text = document.toString();
    }
    const loaded = loadManifestText(text, plan.manifest);
    const replanned = await buildPlan(loaded, { ...options, recorded, run: { id: plan.runId, startedAt: new Date(plan.createdAt) } });
    if (recorded === undefined && readsCsvOrPresets(replanned)) {
      const old = `run ${plan.runId} keeps no copy of the CSV rows and presets it read (it was made before genpipe kept them): its inputs are those the files and catalog give now`;
      note = note === undefined ? old : `${note}; ${old}`;
    }
    const inputs = new Map<string, unknown>();
    for (const step of replanned.steps) {
      for (const instance of replanned.instances(step.id)) inputs.set(instance.id, instance.body);
    }
    return { inputs, note };
  } catch (error) {
    return {
      inputs: undefined,
      note: `the inputs of run ${plan.runId} could not be planned again: ${error instanceof Error ? error.message : String(error)}`,
    };
  }
}

/** `prompt`, `params.seed`, `input_images[0].image_url`: each leaf of a body with its JSON text. */
export function flattenInput(value: unknown, prefix = '', out = new Map<string, string>()): Map<string, string> {
  if (Array.isArray(value)) {
    if (value.length === 0) out.set(prefix, '[]');
    value.forEach((v, i) => flattenInput(v, `${prefix}[${i}]`, out));
  } else if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>);
    if (entries.length === 0) out.set(prefix, '{}');
    for (const [k, v] of entries) flattenInput(v, prefix ? `${prefix}.${k}` : k, out);
  } else {
    out.set(prefix, value === undefined ? 'undefined' : JSON.stringify(value));
  }
  return out;
}

export interface InputChange {
  field: string;
  /** JSON text; undefined where the field is absent. */
  a: string | undefined;
  b: string | undefined;
}

/** The fields whose values differ between two bodies, in sorted order. */
export function inputChanges(a: unknown, b: unknown): InputChange[] {
  const fa = flattenInput(a);
  const fb = flattenInput(b);
  const fields = [...new Set([...fa.keys(), ...fb.keys()])].sort();
  return fields.filter((f) => fa.get(f) !== fb.get(f)).map((field) => ({ field, a: fa.get(field), b: fb.get(field) }));
}
