/** Run directories: `runs/<pipeline>/<run-id>/` with plan.json, journal.jsonl, outputs/ and outputs.csv. */
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { redact } from '../../util/redact.js';
import { join } from 'node:path';
import * as z from 'zod';
import { GenpipeError } from '../../api/errors.js';
import { PlanFingerprint } from '../../plan/instance.js';
import type { Plan } from '../../plan/plan.js';
import { saveHeadlines } from './run-headlines.js';
import { saveRunInputs, type RunInputsRecord } from './run-inputs.js';
import { clip, formatPath } from '../../util/zod-issues.js';
import type { SkippedRow } from '../../plan/skipped-rows.js';
import { RUN_FILES, runFile } from './run-layout.js';
import type { PriceSource } from '../../plan/price.js';
import { jsonUsd } from '../../util/format-usd.js';

/** A timestamp-based run id that sorts in time order: `20261122T051300Z-3fa2`. */
export function newRunId(now: Date = new Date()): string {
  const stamp = now
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d{3}Z$/, 'Z');
  return `${stamp}-${randomBytes(2).toString('hex')}`;
}

export interface PlanFile {
  pipeline: string;
  runId: string;
  manifest: string;
  planHash: string;
  createdAt: string;
  steps: {
    id: string;
    model: string;
    count: number;
    needs: readonly string[];
    for_each: string | null;
    for_each_only?: 'approved';
    /**
     * US$ per instance: the step's flat price, or, for a step priced per instance (a table, a
     * formula), the price every one of its instances was checked at when they all cost the same;
     * null when unpriced, or when its instances' prices differ (`price_range_usd` gives them).
     */
    price_usd: number | null;
    /** Where the price comes from (price.ts PriceSource); absent in plan.json files written before it was recorded. */
    price_source?: PriceSource;
    /** The model is token-priced: its price is the charge at submit, which the service reconciles later. */
    token_priced?: boolean;
    /** A step priced per instance: the cheapest and dearest of its instances' prices, as the plan checked them. */
    price_range_usd?: { min: number; max: number };
    axes?: Record<string, string[]>;
    gallery?: { rows?: string | undefined; cols?: string | undefined; pages?: string[] | undefined };
    /** Where the step's outputs are copied: the report counts uploaded and pending files, notifications link to them. */
    sink?: StepSinkRecord;
  }[];
  estimate: { known_usd: number; unknown_instances: number };
  /** A subset run (`--only`, `--limit`): the selectors as written; a resume runs the same subset. */
  selection?: { only: string[]; limit: number | null };
  /** The service the run was made against; absent in plan.json files written before it was recorded. */
  service?: RunService;
  /** The CSV rows and presets the run read (run-inputs.ts), hashed; absent in runs made before genpipe kept them. */
  inputs?: RunInputsRecord;
  /** The CSV rows left out as invalid (`on_invalid: skip`, `--skip-invalid`), one entry per bad cell; absent when none was. */
  skipped_rows?: SkippedRow[];
}

/**
 * A step's storage sink as plan.json records it: its bucket and rendered prefix, and where that
 * prefix is public. No endpoint, region or credential: what the report and a notification show.
 */
export interface StepSinkRecord {
  /** `s3://BUCKET/PREFIX` (no trailing `/`; `s3://BUCKET` for the bucket's root). */
  uri: string;
  /** The public URL of the prefix (the sink's `public_base_url`, rendered), when it has one. */
  public_url?: string;
}

/**
 * Where a run sends its requests, so that `genpipe resume` finds its requests again with no flag.
 * Addresses only: credentials are never written to a run directory.
 */
export interface RunService {
  base_url: string;
  platform_url: string;
  cdn_url: string;
  vendor: string;
  /** True when the run used the emulator embedded in its own process (`--emulator`), which ended with it. */
  embedded_emulator: boolean;
}

/**
 * A hash of everything the plan would send (see PlanFingerprint): the one buildPlan made in its
 * validation pass when asked, else computed here in a pass of its own.
 */
export function planHash(plan: Plan): string {
  if (plan.fingerprint !== undefined) return plan.fingerprint;
  const fingerprint = new PlanFingerprint(plan.loaded.manifest);
  for (const step of plan.steps) {
    for (const instance of plan.instances(step.id)) fingerprint.add(instance.id, instance.canonical);
  }
  return fingerprint.digest();
}

/** The steps as plan.json records them, in the manifest's order (the order people wrote and read them in). */
export function planFileSteps(plan: Plan, sinks?: ReadonlyMap<string, StepSinkRecord>): PlanFile['steps'] {
  // By position, not indexOf: a manifest may have thousands of steps.
  const written = new Map(Object.keys(plan.loaded.manifest.steps).map((id, i) => [id, i]));
  const steps = [...plan.steps].sort((a, b) => (written.get(a.id) ?? 0) - (written.get(b.id) ?? 0));
  return steps.map((s) => {
    const axes = axisOrder(s);
    const sink = sinks?.get(s.id);
    return {
      id: s.id,
      model: s.model,
      count: s.count,
      needs: s.needs,
      for_each: s.forEach ?? null,
      ...(s.forEachOnly ? { for_each_only: s.forEachOnly } : {}),
      ...priceRecord(s),
      ...(axes ? { axes } : {}),
      ...(s.step.gallery ? { gallery: s.step.gallery } : {}),
      ...(sink ? { sink } : {}),
    };
  });
}

/**
 * What plan.json says of a step's price. A step priced per instance records the price its
 * instances share when they all cost the same, so that a reader with no price journaled for an
 * attempt (a journal written before prices were) counts it at that price rather than unpriced.
 */
function priceRecord(
  s: Plan['steps'][number],
): Pick<PlanFile['steps'][number], 'price_usd' | 'price_source' | 'token_priced' | 'price_range_usd'> {
  const seen = s.price.of ? s.price.instances : undefined;
  const range = seen && seen.count > 0 ? { min: jsonUsd(seen.minUsd), max: jsonUsd(seen.maxUsd) } : undefined;
  const shared = seen && seen.count === s.count && range && range.min === range.max ? range.min : undefined;
  return {
    price_usd: s.priceUsd ?? shared ?? null,
    price_source: s.price.source,
    token_priced: s.price.tokenPriced,
    ...(range ? { price_range_usd: range } : {}),
  };
}

/** Axes with at most this many values have their labels recorded in plan.json, in the manifest's order. */
export const MAX_RECORDED_AXIS_VALUES = 1_000;

/**
 * Each axis's labels in the order the manifest gives them (list values as written, CSV rows as in
 * the file), so the gallery shows `tier: [normal, cats]` in that order, not sorted; larger axes
 * (long ranges) are left to natural order, which is theirs anyway.
 */
function axisOrder(step: Plan['steps'][number]): Record<string, string[]> | undefined {
  const out: Record<string, string[]> = {};
  for (const axis of step.matrix.axes) {
    if (axis.length > MAX_RECORDED_AXIS_VALUES) continue;
    out[axis.name] = Array.from({ length: axis.length }, (_, i) => axis.label(i));
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

/** The copy of its manifest a run directory keeps. */
export const MANIFEST_COPY = RUN_FILES.manifest;

export async function createRunDir(
  root: string,
  plan: Plan,
  manifestPath: string,
  hash: string,
  now: Date = new Date(),
  runId: string = newRunId(now),
  service?: RunService,
  sinks?: ReadonlyMap<string, StepSinkRecord>,
): Promise<{ runId: string; dir: string }> {
  const dir = join(root, plan.name, runId);
  await mkdir(runFile(dir, 'outputs'), { recursive: true });
  const estimate = plan.estimate();
  // Before plan.json, which holds its hash: the CSV rows and presets this run was given.
  const inputs = await saveRunInputs(dir, plan);
  const file: PlanFile = {
    pipeline: plan.name,
    runId,
    manifest: manifestPath,
    planHash: hash,
    createdAt: now.toISOString(),
    steps: planFileSteps(plan, sinks),
    estimate: { known_usd: estimate.knownUsd, unknown_instances: estimate.unknownInstances },
    ...(plan.selection ? { selection: { only: (plan.selection.only ?? []).map((s) => s.text), limit: plan.selection.limit ?? null } } : {}),
    ...(service
      ? {
          service: {
            base_url: service.base_url,
            platform_url: service.platform_url,
            cdn_url: service.cdn_url,
            vendor: service.vendor,
            embedded_emulator: service.embedded_emulator,
          },
        }
      : {}),
    inputs,
    ...(plan.skippedRows.length > 0 ? { skipped_rows: plan.skippedRows } : {}),
  };
  await writeFile(runFile(dir, 'plan'), `${JSON.stringify(file, null, 2)}\n`, { flag: 'wx' });
  // The manifest as this run read it: `genpipe diff` re-plans it to show the inputs the run sent,
  // even after the file was edited for the next run. Redacted: a webhook URL written in it stays out.
  await writeFile(join(dir, MANIFEST_COPY), redact(plan.loaded.text), { flag: 'wx' });
  // What each instance is about, for the gallery's cells (a view: a failure here never stops the run).
  await saveHeadlines(dir, plan);
  return { runId, dir };
}

/**
 * What plan.json must hold for a command to read it. A damaged or foreign file (`{}`, `[]`,
 * `"steps": null`, a price written as text) is refused here, naming the file and the field, so
 * that no command meets it half way through (a TypeError there was an "internal error", exit 70).
 * Unknown fields are kept: a newer genpipe may add some.
 */
const RUN_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;
const usd = z
  .number()
  .refine(Number.isFinite, 'expected a finite number')
  .refine((n) => n >= 0, 'expected a number of at least 0');
const PlanFileSchema = z.looseObject({
  pipeline: z.string().min(1),
  runId: z.string().regex(RUN_ID, 'expected a run id (letters, digits, ".", "_" and "-")'),
  manifest: z.string().min(1),
  planHash: z.string(),
  createdAt: z.iso.datetime(),
  steps: z.array(
    z.looseObject({
      id: z.string().min(1),
      model: z.string().min(1),
      count: z.int().min(0),
      needs: z.array(z.string()),
      for_each: z.string().nullable(),
      price_usd: usd.nullable(),
      price_source: z.enum(['step', 'template', 'manifest', 'table', 'list', 'none']).optional(),
      token_priced: z.boolean().optional(),
      price_range_usd: z.looseObject({ min: usd, max: usd }).optional(),
      for_each_only: z.literal('approved').optional(),
      /** Each axis's labels in the manifest's order (the gallery and diff sort by them). */
      axes: z.record(z.string(), z.array(z.string())).optional(),
      gallery: z
        .looseObject({ rows: z.string().optional(), cols: z.string().optional(), pages: z.array(z.string()).optional() })
        .optional(),
      sink: z.looseObject({ uri: z.string().startsWith('s3://'), public_url: z.string().optional() }).optional(),
    }),
  ),
  estimate: z.looseObject({ known_usd: usd, unknown_instances: z.int().min(0) }),
  skipped_rows: z
    .array(
      z.looseObject({
        step: z.string(),
        axis: z.string(),
        file: z.string(),
        row: z.int(),
        key: z.string(),
        column: z.string(),
        col: z.int(),
        reason: z.string(),
      }),
    )
    .optional(),
});

export async function readPlanFile(dir: string): Promise<PlanFile> {
  const path = runFile(dir, 'plan');
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw new GenpipeError('invalid_input', `${dir} is not a run directory (no readable plan.json).`, { cause: error });
  }
  return parsePlanFile(path, text);
}

/**
 * readPlanFile at once, for a list that reads a thousand of them: a file of a few KB is read
 * faster than the thread pool's round trips (four per file) take.
 */
export function readPlanFileSync(dir: string): PlanFile {
  const path = runFile(dir, 'plan');
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new GenpipeError('invalid_input', `${dir} is not a run directory (no readable plan.json).`, { cause: error });
  }
  return parsePlanFile(path, text);
}

function parsePlanFile(path: string, text: string): PlanFile {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new GenpipeError(
      'invalid_input',
      `${path} is not valid JSON (${clip(error instanceof Error ? error.message : String(error), 80)}); it is not a plan genpipe wrote.`,
    );
  }
  if (json === null || typeof json !== 'object' || Array.isArray(json)) {
    throw new GenpipeError(
      'invalid_input',
      `${path} holds ${json === null ? 'null' : Array.isArray(json) ? 'a list' : `a ${typeof json}`}, not a plan genpipe wrote (an object with pipeline, runId, steps, ...).`,
    );
  }
  const file = json as Record<string, unknown>;
  if (file.service !== undefined && !isRunService(file.service)) {
    throw new GenpipeError(
      'invalid_input',
      `${path} has a malformed service record (base_url, platform_url, cdn_url, vendor, embedded_emulator).`,
    );
  }
  if (file.selection !== undefined && !isSelection(file.selection)) {
    throw new GenpipeError(
      'invalid_input',
      `${path} has a malformed selection record (only: a list of selectors, limit: a whole number or null).`,
    );
  }
  const parsed = PlanFileSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue ? formatPath(issue.path) || 'the top level' : 'the top level';
    const more =
      parsed.error.issues.length > 1
        ? ` (and ${parsed.error.issues.length - 1} more problem${parsed.error.issues.length > 2 ? 's' : ''})`
        : '';
    throw new GenpipeError(
      'invalid_input',
      `${path} is damaged or not a plan genpipe wrote: ${where}: ${issue?.message ?? 'invalid'}${more}.`,
    );
  }
  const plan = parsed.data as unknown as PlanFile;
  const inputs = plan.inputs as unknown;
  if (
    inputs !== undefined &&
    (inputs === null ||
      typeof inputs !== 'object' ||
      typeof (inputs as Record<string, unknown>).file !== 'string' ||
      typeof (inputs as Record<string, unknown>).sha256 !== 'string')
  ) {
    throw new GenpipeError('invalid_input', `${path} has a malformed inputs record (file, sha256).`);
  }
  return plan;
}

function isSelection(value: unknown): value is PlanFile['selection'] {
  if (value === null || typeof value !== 'object') return false;
  const v = value as Record<string, unknown>;
  return (
    Array.isArray(v.only) &&
    v.only.every((s) => typeof s === 'string') &&
    (v.limit === null || (Number.isSafeInteger(v.limit) && (v.limit as number) > 0))
  );
}

function isRunService(value: unknown): value is RunService {
  if (value === null || typeof value !== 'object') return false;
  const v = value as Record<string, unknown>;
  return (
    ['base_url', 'platform_url', 'cdn_url', 'vendor'].every((k) => typeof v[k] === 'string') && typeof v.embedded_emulator === 'boolean'
  );
}
