/**
 * Expansion of a loaded manifest into a plan: a DAG of steps whose instances are generated lazily
 * (memory stays flat as sweeps grow), each with a stable id, a canonical input and an idempotency
 * key. Building the plan validates every instance against its model's request rules, the
 * character-sheet selection against the live options catalog included, before anything runs.
 */
import { addPrices, stepPrice, type InstancePrices, type PriceEntry, type StepPrice } from './price.js';
import { PriceFormulaError } from './price-rules.js';
import { isAbsolute, resolve } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { GenpipeError, InvalidInputError, type InputIssue } from '../api/errors.js';
import { checkLocalImage } from '../api/local-image.js';
import type { OptionsCatalog } from '../api/wire.js';
import { AxisError, csvRowOrigin, resolveAxis, type PresetSource, type RecordedAxis, type ResolvedAxis } from '../manifest/axes.js';
import { CsvError } from '../manifest/csv.js';
import { ManifestError, type ManifestProblem, type ProblemCode } from '../manifest/errors.js';
import { unreadableFile, type LoadedManifest } from '../manifest/load.js';
import { forEachOnlyOf, forEachStepOf, type Step } from '../manifest/schema.js';
import { TemplateError, type CompiledTemplate, type PathSegment, type Scope, type TemplateRef } from '../manifest/template.js';
import { isWindowsDevice, sanitizeStem, utf8Bytes } from '../util/file-stem.js';
import { nearest, Suggester } from '../util/suggest.js';
import { labelMatcher, type Selection, type Selector } from './selection.js';
import { catalogFieldSet, isRemoteUrl, mapImageFields, modelFor, type ModelSpec } from '../models/registry.js';
import { clip, formatPath } from '../util/zod-issues.js';
import { canonicalJson, downstreamId, idempotencyKey, instanceId, PlanFingerprint } from './instance.js';
import { expandMatrix, MatrixError, productSize, type MatrixSpec } from './matrix.js';
import { sortSkippedRows, type SkippedRow } from './skipped-rows.js';

export interface PlanOptions {
  /** Fetches the options catalog; called only when a character-sheet step has a selection. */
  catalog?: (() => Promise<OptionsCatalog>) | undefined;
  /** Lists visible presets; called only when a step has a preset axis. */
  presets?: PresetSource | undefined;
  /** A run's recorded CSV rows and presets (run/files/run-inputs.ts), by step and axis: planning it again reads these, not today's files. */
  recorded?: ((step: string, axis: string) => RecordedAxis | undefined) | undefined;
  /** Environment for `{{ env.X }}`; only the manifest's allow-listed names are read. */
  env?: NodeJS.ProcessEnv | undefined;
  /**
   * The run the plan is for, read by `{{ run.id }}`, `{{ run.date }}` and `{{ run.started_at }}`.
   * Default: a preview run starting now (`plan` and `validate` show what a run now would send).
   */
  run?: { id: string; startedAt: Date } | undefined;
  /** Most problems reported; the rest are counted. Default 100. */
  maxProblems?: number | undefined;
  /** Largest plan accepted, in instances; a typo in a range should not plan for hours. Default 10,000,000. */
  maxInstances?: number | undefined;
  /**
   * Also fingerprint the plan (`Plan.fingerprint`) in the validation pass, which renders every
   * instance anyway; a run needs it, `plan` and `validate` do not (canonical inputs cost time).
   */
  fingerprint?: boolean | undefined;
  /**
   * Called once the steps and their instance counts are known, before any instance is rendered:
   * checks that need only the counts (money guards) refuse a huge plan without waiting for it.
   */
  beforeInstances?: ((plan: Plan) => void | Promise<void>) | undefined;
  /** Only these instances (`--only`, `--limit`); ids, inputs and keys stay those of the full plan. */
  select?: Selection | undefined;
  /** Ends the validation pass (an `aborted` error) when it fires: Ctrl-C during a huge plan. */
  signal?: AbortSignal | undefined;
  /**
   * Handed every valid instance as the validation pass checks it, in plan order (`genpipe plan
   * --json` spools them, so a plan is rendered once). The plan may still be refused afterwards.
   */
  onInstance?: ((instance: PlannedInstance) => void) | undefined;
  /** Told how many instances have been checked, every `PROGRESS_EVERY` of them. */
  onProgress?: ((checked: number, total: number) => void) | undefined;
  /**
   * Asked, once the steps are resolved, for a helper thread to check the plan's last instances in
   * parallel (parallel-plan.ts); undefined leaves them all to this thread.
   */
  helper?: ((plan: Plan, catalog: OptionsCatalog | undefined) => PlanHelper | undefined) | undefined;
  /**
   * A step that cannot be resolved (an unreadable CSV file, an unset environment variable it reads,
   * a sweep too large) does not stop the others: their instances are checked too, and every
   * problem is thrown together at the end (`genpipe validate`: every problem in one pass).
   * Default false: the first round of problems is thrown before any instance is rendered.
   */
  keepGoing?: boolean | undefined;
  /**
   * Every CSV axis sets its invalid rows aside, as `on_invalid: skip` does for one (`genpipe run
   * --skip-invalid`). A row is set aside only when each of its problems is located in its own cells.
   */
  skipInvalid?: boolean | undefined;
  /** The lines of the rows set aside, by `step\u0000axis` (buildPlan's second pass). */
  skipLines?: ReadonlyMap<string, ReadonlySet<number>> | undefined;
  /** buildPlan's second pass, which hands its instances to onInstance. */
  settled?: boolean | undefined;
}

export const DEFAULT_MAX_INSTANCES = 10_000_000;
/** The validation pass yields to the event loop (signals, timers) and reports progress this often. */
const PROGRESS_EVERY = 20_000;

export interface StepPlan {
  id: string;
  model: string;
  spec: ModelSpec;
  step: Step;
  needs: readonly string[];
  forEach: string | undefined;
  /** `approved`: the step follows only the upstream instances approved in review (review.json). */
  forEachOnly?: 'approved' | undefined;
  matrix: MatrixSpec;
  /** Instances of this step: its own combinations, times the upstream's instances for for_each. */
  count: number;
  /** US$ per instance when every instance costs the same; undefined when unpriced or priced per instance (see `price`). */
  priceUsd: number | undefined;
  /** Where `priceUsd` comes from, and whether the model is token-priced (price.ts). */
  price: StepPrice;
  /** True when the input reads upstream outputs, so the final body (and key) is known only at run time. */
  readsUpstreamOutputs: boolean;
  /** A subset run (`--only`, `--limit`, see selection.ts): which of the step's combinations run, and how many at most. */
  subset?: { accept: (label: string) => boolean; limit: number | undefined } | undefined;
  /** The CSV cells the step's input reads that must not be empty (every column not in `allow_empty`). */
  filledCells?: readonly FilledCell[] | undefined;
}

/** `{{ row.headline }}` in a step's input, on a CSV axis whose `allow_empty` does not list headline. */
export interface FilledCell {
  axis: string;
  column: string;
  /** Where in the step's input the template reads it. */
  at: readonly PathSegment[];
}

/** One instance of a step. Its canonical input and key are computed on first use only. */
export class PlannedInstance {
  #canonical: string | undefined;
  #key: string | undefined;

  constructor(
    readonly id: string,
    readonly step: string,
    /** Sweep values, as templates saw them. */
    readonly values: Record<string, unknown>,
    /** The upstream instance, for for_each steps. */
    readonly upstream: string | undefined,
    /** The validated request body; local image paths are kept, to be uploaded at run time. */
    readonly body: unknown,
    private readonly pipeline: string,
    /** False when the body depends on upstream outputs: the key is derived at run time from the real body. */
    private readonly keyed: boolean,
    /** The file-name stem from the step's `output.filename`; undefined names files by the instance id. */
    readonly fileStem?: string | undefined,
    /** A for_each instance: its upstream instance's sweep values (outputs.csv shows them). */
    readonly upstreamValues?: Record<string, unknown> | undefined,
    /** Its price in US$, when its step is priced per instance (a table or a formula), from its body. */
    readonly priceUsd?: number | undefined,
  ) {}

  /** The same instance with another body (an nsfw re-roll), hence another key, and a price its step works out from that body. */
  withBody(body: unknown): PlannedInstance {
    return new PlannedInstance(
      this.id,
      this.step,
      this.values,
      this.upstream,
      body,
      this.pipeline,
      true,
      this.fileStem,
      this.upstreamValues,
    );
  }

  /** The body as JSON with sorted keys. */
  get canonical(): string {
    this.#canonical ??= canonicalJson(this.body);
    return this.#canonical;
  }

  /** The Idempotency-Key, or undefined when the body depends on upstream outputs. */
  get key(): string | undefined {
    if (!this.keyed) return undefined;
    this.#key ??= idempotencyKey(this.pipeline, this.id, this.canonical);
    return this.#key;
  }
}

export interface CostEstimate {
  /** Sum over steps with a known price. */
  knownUsd: number;
  /** Instances whose price is unknown (shown as "unknown", never as $0). */
  unknownInstances: number;
}

export class Plan {
  /** Set by buildPlan when asked (`fingerprint: true`): see PlanFingerprint. */
  fingerprint: string | undefined;
  /** The subset this plan runs (`--only`, `--limit`), when it is one; set by buildPlan. */
  selection: Selection | undefined;
  /** The CSV rows left out as invalid (`on_invalid: skip`), one entry per bad cell; set by buildPlan. */
  skippedRows: SkippedRow[] = [];

  constructor(
    readonly loaded: LoadedManifest,
    readonly steps: readonly StepPlan[],
    private readonly scopeBase: Scope,
  ) {}

  get name(): string {
    return this.loaded.manifest.name;
  }

  get totalInstances(): number {
    return this.steps.reduce((n, s) => n + s.count, 0);
  }

  step(id: string): StepPlan {
    const step = this.steps.find((s) => s.id === id);
    if (!step) throw new Error(`no step ${id} in the plan`);
    return step;
  }

  /**
   * The sum of the instances' prices. A step priced per instance counts the prices its instances
   * were checked at; before the validation pass has priced them (the money guards that need only
   * the counts), a table counts each at its dearest row, and a formula as unknown.
   */
  estimate(): CostEstimate {
    let knownUsd = 0;
    let unknownInstances = 0;
    for (const step of this.steps) {
      const priced = step.price.instances;
      if (step.price.of && priced) {
        knownUsd += priced.sumUsd;
        unknownInstances += Math.max(0, step.count - priced.count);
      } else if (step.price.of && step.price.boundUsd !== undefined) knownUsd += step.price.boundUsd * step.count;
      else if (step.priceUsd === undefined) unknownInstances += step.count;
      else knownUsd += step.priceUsd * step.count;
    }
    return { knownUsd: Math.round(knownUsd * 1e6) / 1e6, unknownInstances };
  }

  /** Every instance of a step, generated lazily; throws InstanceError on an invalid one. */
  *instances(stepId: string, catalog?: OptionsCatalog): Generator<PlannedInstance> {
    for (const entry of this.entries(stepId, catalog)) {
      if (entry instanceof InstanceError) throw entry;
      yield entry;
    }
  }

  /**
   * Every instance of a step, or the error that makes it invalid, generated lazily. A for_each
   * step follows only the valid instances of its upstream (the invalid ones are the upstream's
   * problems).
   */
  *entries(stepId: string, catalog?: OptionsCatalog, window?: StepWindow): Generator<PlannedInstance | InstanceError> {
    const step = this.step(stepId);
    // With placeholder upstream outputs, a body that reads them has no real key yet.
    const make = this.#maker(step, catalog, !step.readsUpstreamOutputs);
    if (step.forEach === undefined) {
      let taken = 0;
      let index = -1;
      for (const combo of expandMatrix(step.matrix)) {
        if (step.subset) {
          if (!step.subset.accept(combo.label)) continue;
          if (step.subset.limit !== undefined && taken++ >= step.subset.limit) return;
        }
        if (window) {
          // Outside the window an instance is counted past, neither rendered nor checked.
          if (++index < window.from) continue;
          if (index >= window.to) return;
        }
        yield make(instanceId(step.id, combo.label), combo.values, scopeOf(this.scopeBase, combo.values));
      }
      return;
    }
    if (window) throw new Error(`step ${stepId} runs for_each: its instances cannot be windowed`);
    const upstreamSpec = this.step(step.forEach).spec;
    for (const up of this.entries(step.forEach, catalog)) {
      if (up instanceof InstanceError) continue;
      yield* this.#downstream(step, make, up, upstreamSpec.placeholderOutputs(up.id));
    }
  }

  /** Renders and validates one instance of `step`. */
  #maker(step: StepPlan, catalog: OptionsCatalog | undefined, keyed: boolean): Maker {
    const template = this.loaded.templates.get(step.id) as CompiledTemplate;
    const make: Maker = (id, values, scope, upstream) => {
      let rendered: unknown;
      try {
        rendered = template.render(scope);
      } catch (error) {
        if (error instanceof TemplateError)
          return new InstanceError(step.id, id, [{ path: formatPath(error.at), message: error.message }], error.at);
        throw error;
      }
      let body: unknown;
      try {
        body = this.#validate(step, id, rendered, catalog, scope);
      } catch (error) {
        if (error instanceof InstanceError) return error;
        throw error;
      }
      const fileName = this.loaded.fileNames.get(step.id);
      let fileStem: string | undefined;
      if (fileName) {
        const stem = renderFileStem(fileName, scope);
        if (typeof stem !== 'string')
          return new InstanceError(step.id, id, [{ path: '', message: stem.problem }], [], ['output', 'filename'], 'file_name');
        fileStem = stem;
      }
      const upstreamValues = (scope.upstream as { values?: Record<string, unknown> } | undefined)?.values;
      let priceUsd: number | undefined;
      if (step.price.of) {
        const priced = step.price.of(body);
        if ('miss' in priced) return priceMiss(step, id, priced.miss);
        priceUsd = priced.usd;
      }
      return new PlannedInstance(id, step.id, values, upstream, body, this.name, keyed, fileStem, upstreamValues, priceUsd);
    };
    return (id, values, scope, upstream) => {
      const made = make(id, values, scope, upstream);
      // Which sweep values made it, to locate the problem at the value (sweepOrigin).
      if (made instanceof InstanceError) made.values = values;
      return made;
    };
  }

  /**
   * The instances of a for_each step for one finished upstream instance, rendered with the
   * upstream's real outputs (the runner calls this as each upstream instance completes).
   */
  *downstreamOf(
    stepId: string,
    upstream: Pick<PlannedInstance, 'id' | 'values'>,
    outputs: Record<string, unknown>,
    catalog?: OptionsCatalog,
  ): Generator<PlannedInstance | InstanceError> {
    const step = this.step(stepId);
    yield* this.#downstream(step, this.#maker(step, catalog, true), upstream, outputs);
  }

  *#downstream(
    step: StepPlan,
    make: Maker,
    up: Pick<PlannedInstance, 'id' | 'values'>,
    outputs: Record<string, unknown>,
  ): Generator<PlannedInstance | InstanceError> {
    const upstream = { id: up.id, values: up.values, outputs };
    for (const combo of expandMatrix(step.matrix)) {
      if (step.subset && !step.subset.accept(combo.label)) continue;
      yield make(downstreamId(step.id, up.id, combo.label), combo.values, scopeOf(this.scopeBase, combo.values, upstream), up.id);
    }
  }

  #validate(step: StepPlan, id: string, rendered: unknown, catalog: OptionsCatalog | undefined, scope: Scope): unknown {
    const dir = this.loaded.dir;
    const empty: { at: readonly PathSegment[]; message: string }[] = [];
    mapImageFields(rendered, step.spec.imageFields, (v, at) => {
      if (v.trim() === '') empty.push({ at, message: this.#emptyImage(step.id, at, scope) });
      return v;
    });
    const first = empty[0];
    if (first) throw new InstanceError(step.id, id, [{ path: formatPath(first.at), message: first.message }], first.at);
    // An empty prompt or headline from a CSV cell would be sent as "" (an empty image field is named above).
    const cell = step.filledCells === undefined ? undefined : emptyCell(step, step.filledCells, id, scope);
    if (cell) throw cell;
    // Local image paths are checked separately; here they stand as placeholder URLs.
    const forCheck = mapImageFields(rendered, step.spec.imageFields, (v) =>
      isRemoteUrl(v) ? v : `https://local.genpipe.invalid/${encodeURIComponent(resolvePath(dir, v))}`,
    );
    let built: unknown;
    try {
      built = step.spec.build(forCheck, { catalog });
    } catch (error) {
      if (error instanceof InvalidInputError) throw new InstanceError(step.id, id, error.issues);
      throw error;
    }
    // Keep the canonical selection order the builder produced, with the local paths restored.
    return mapImageFields(built, step.spec.imageFields, (v) =>
      v.startsWith('https://local.genpipe.invalid/') ? decodeURIComponent(v.slice('https://local.genpipe.invalid/'.length)) : v,
    );
  }

  /** "is empty", saying which CSV row and column it came from when a template read one. */
  #emptyImage(stepId: string, at: readonly PathSegment[], scope: Scope): string {
    const ref = this.loaded.templates.get(stepId)?.refs.find((r) => isDeepStrictEqual(r.at, at));
    const [axis, column] = ref?.segments ?? [];
    const origin = typeof axis === 'string' ? csvRowOrigin(scope[axis]) : undefined;
    if (!origin || typeof column !== 'string') return 'an image URL or path is empty';
    return `an image URL or path is empty: ${origin.file} has nothing in row ${origin.line}, column ${origin.columns.indexOf(column) + 1} ("${column}")`;
  }
}

/** A step's instances from index `from` (inclusive) to `to` (exclusive), in plan order. */
export interface StepWindow {
  from: number;
  to: number;
}

type Maker = (id: string, values: Record<string, unknown>, scope: Scope, upstream?: string) => PlannedInstance | InstanceError;

/** One instance broke a rule; `at` is where in the step's input (or below `field`), when known. */
export class InstanceError extends Error {
  override readonly name = 'InstanceError';
  /** The sweep values of the instance, set by the plan that made it. */
  values: Record<string, unknown> | undefined;
  constructor(
    readonly step: string,
    readonly instance: string,
    readonly issues: readonly InputIssue[],
    readonly at?: readonly PathSegment[],
    /** The step's field the problem is in. Default `input`. */
    readonly field: readonly PathSegment[] = ['input'],
    /** What kind of problem (`genpipe validate --json`). */
    readonly code: ProblemCode = 'instance',
    /** Where in the manifest, from its top, when the problem is not in the step (the prices table). */
    readonly located?: readonly PathSegment[],
  ) {
    super(`${instance}: ${issues.map((i) => `${i.path ? `${i.path}: ` : ''}${i.message}`).join('; ')}`);
  }
}

/** An instance its step's price table or formula gives no price, located where the price is written. */
function priceMiss(step: StepPlan, id: string, message: string): InstanceError {
  const at = step.price.at ?? ['steps', step.id, 'price_usd'];
  const inStep = at[0] === 'steps' && at[1] === step.id;
  return new InstanceError(
    step.id,
    id,
    [{ path: '', message }],
    [],
    inStep ? at.slice(2) : ['price_usd'],
    'price',
    inStep ? undefined : at,
  );
}

/**
 * The first empty CSV cell an instance's input reads (an empty prompt or headline would be sent as
 * ""), as the instance's problem: its file, row and column, at the template in the manifest.
 */
function emptyCell(step: StepPlan, cells: readonly FilledCell[], id: string, scope: Scope): InstanceError | undefined {
  for (const cell of cells) {
    const row = scope[cell.axis] as Record<string, unknown> | undefined;
    const value = row?.[cell.column];
    if (typeof value !== 'string' || value.trim() !== '') continue;
    const origin = csvRowOrigin(row);
    const where = origin
      ? `${origin.file} row ${origin.line}, column ${origin.columns.indexOf(cell.column) + 1} ("${cell.column}")`
      : `column "${cell.column}"`;
    const message = `the CSV cell ${where} is empty; fill it, or add ${JSON.stringify(cell.column)} to allow_empty on the ${cell.axis} axis to send it empty`;
    return new InstanceError(step.id, id, [{ path: formatPath(cell.at), message }], cell.at, ['input'], 'empty_cell');
  }
  return undefined;
}

/** Longest file-name stem a template may give, in characters (names from ids are bounded alike). */
export const MAX_FILE_STEM = 100;
/** Longest file-name stem a template may give, in UTF-8 bytes (run/files/output-names.ts MAX_STEM_BYTES). */
export const MAX_FILE_STEM_BYTES = 150;

/** The sanitised stem an `output.filename` template gives in `scope`, or why it gives none. */
function renderFileStem(template: CompiledTemplate, scope: Scope): string | { problem: string } {
  let rendered: unknown;
  try {
    rendered = template.render(scope);
  } catch (error) {
    if (error instanceof TemplateError) return { problem: error.message };
    throw error;
  }
  const text = typeof rendered === 'string' ? rendered : JSON.stringify(rendered);
  let stem = sanitizeStem(text);
  if (stem === '') return { problem: `the file name ${JSON.stringify(clip(text))} has no character a file name can keep` };
  if (stem.length > MAX_FILE_STEM)
    return { problem: `the file name ${JSON.stringify(clip(stem))} is longer than ${MAX_FILE_STEM} characters` };
  if (utf8Bytes(stem) > MAX_FILE_STEM_BYTES)
    return { problem: `the file name ${JSON.stringify(clip(stem))} is longer than ${MAX_FILE_STEM_BYTES} bytes in UTF-8` };
  if (isWindowsDevice(stem)) stem = `_${stem}`;
  return stem;
}

/**
 * What an instance's templates see: the run's names, then the sweep values (and the upstream
 * instance). Object.assign onto a literal, not spread: spreading sweep values into a fresh object
 * cost a plan of a million instances over a second.
 */
function scopeOf(base: Scope, values: Record<string, unknown>, upstream?: unknown): Scope {
  const scope: Record<string, unknown> = Object.assign({ vars: base.vars, env: base.env, run: base.run }, values);
  if (upstream !== undefined) scope.upstream = upstream;
  return scope;
}

/** The input field of a step that needs the live options catalog (models/registry.ts). */
const catalogFieldOf = (s: StepPlan): string | undefined => catalogFieldSet(s.model, s.step.input);

const resolvePath = (dir: string, path: string): string => (isAbsolute(path) ? path : resolve(dir, path));

/** Splits `selection.hair[0]` back into segments, to locate an issue inside the input. */
const segmentsOf = (path: string): PathSegment[] =>
  path
    .split(/\.|\[(\d+)\]/)
    .filter((s) => s !== undefined && s !== '')
    .map((s) => (/^\d+$/.test(s) ? Number(s) : s));

/**
 * Resolves axes, counts instances and validates every one of them. Throws ManifestError listing
 * every problem found (up to maxProblems distinct ones, each with how many instances share it).
 */
export async function buildPlan(loaded: LoadedManifest, options: PlanOptions = {}): Promise<Plan> {
  const { plan, catalog, problems: earlier = [] } = await preparePlan(loaded, options);
  const { manifest, source } = loaded;
  // Validate every instance (a helper thread may take the plan's end: parallel-plan.ts).
  const maxProblems = options.maxProblems ?? 100;
  const skippable = skippableAxes(loaded, options.skipInvalid === true);
  // A fingerprint is of every instance, in order, in this thread: no helper then; nor when rows may be set aside.
  const helper = options.fingerprint || skippable ? undefined : options.helper?.(plan, catalog);
  const own = helper ? { from: 0, to: helper.from } : undefined;
  const fingerprint = options.fingerprint ? new PlanFingerprint(manifest) : undefined;
  // With rows that may be set aside, the instances are handed on by the pass that knows which rows those are.
  const handOn = skippable && !options.settled ? undefined : options.onInstance;
  let check: InstanceCheck;
  try {
    check = await checkInstances(plan, catalog, { ...options, onInstance: handOn, maxProblems, fingerprint, skippable }, own);
  } catch (error) {
    helper?.cancel();
    throw error;
  }
  if (helper) check = mergeChecks(check, await helper.check, maxProblems);
  // The estimate of a step priced per instance is the sum of its instances' prices.
  for (const step of plan.steps) {
    const priced = check.prices?.get(step.id);
    if (step.price.of && priced) step.price.instances = priced;
  }
  const { seen, localFiles } = check;
  const rows = check.rows ?? new Map<string, SkippedCell>();
  for (const [path, where] of localFiles) {
    try {
      await checkLocalImage(resolvePath(loaded.dir, path));
    } catch (error) {
      const location = source.locate(['steps', where.step, 'input']);
      const cause = (error as { cause?: NodeJS.ErrnoException }).cause;
      // A missing image is named with where it was looked for, not as an errno code.
      const missing =
        cause?.code === 'ENOENT' || cause?.code === 'ENOTDIR'
          ? unreadableFile(resolvePath(loaded.dir, path), 'image', cause, location)
          : undefined;
      const message = missing ? missing.message : (error as Error).message.replace(/\.$/, '');
      // From a CSV cell, a value that is neither a URL nor a file is a bad URL in that cell (a
      // typo such as htp:/...), not a file the manifest meant.
      const badUrl = missing === undefined ? undefined : where.cell;
      if (badUrl && skippable?.(where.step, badUrl.axis)) {
        for (const cell of [badUrl, ...(where.more ?? [])]) setAsideBadUrl(rows, where.step, cell);
        continue;
      }
      const problem: ManifestProblem = {
        location,
        path: `steps.${where.step}.input`,
        message: badUrl
          ? `${where.instance}: a bad URL: the CSV cell ${badUrl.where} holds ${JSON.stringify(clip(String(badUrl.value)))}, which is neither a URL (https://...) nor an existing file`
          : `${where.instance}: ${message}`,
        code: badUrl ? 'csv' : missing ? 'missing_file' : 'instance',
      };
      seen.set(`file\u0000${path}`, { problem, count: 1 });
    }
  }
  if (seen.size > 0 || earlier.length > 0) {
    throw new ManifestError([
      ...earlier,
      ...[...seen.values()].map(({ problem, count }) =>
        count <= 1
          ? problem
          : problem.also
            ? { ...problem, also: { ...problem.also, instances: count } }
            : { ...problem, message: `${problem.message} (and ${count - 1} more instances)` },
      ),
      // Refused anyway: the rows that would have been set aside are among the problems.
      ...[...rows.values()].map((cell) => cell.problem),
    ]);
  }
  if (rows.size > 0 || (handOn === undefined && options.onInstance !== undefined)) return planWithout(loaded, options, rows);
  plan.fingerprint = fingerprint?.digest();
  return plan;
}

/** The CSV axes whose invalid rows are set aside: those with `on_invalid: skip`, or all with `skipInvalid`. */
function skippableAxes(loaded: LoadedManifest, all: boolean): Skippable | undefined {
  const csvAxis = (step: string, axis: string): CsvAxisSpec | undefined => {
    const spec = loaded.manifest.steps[step]?.matrix?.[axis];
    return spec !== undefined && !Array.isArray(spec) && 'csv' in spec ? spec : undefined;
  };
  const skips: Skippable = (step, axis) => {
    const spec = csvAxis(step, axis);
    return spec !== undefined && (all || spec.on_invalid === 'skip');
  };
  const any = Object.entries(loaded.manifest.steps).some(([step, s]) => Object.keys(s.matrix ?? {}).some((axis) => skips(step, axis)));
  return any ? skips : undefined;
}

/** A CSV row's identity across runs: its `key` column's value when the axis has one, else its line. */
export function csvRowKey(spec: unknown, values: unknown, line: number): string {
  const key = spec !== null && typeof spec === 'object' && 'csv' in spec ? (spec as CsvAxisSpec).key : undefined;
  if (key === undefined || values === null || typeof values !== 'object') return String(line);
  return String((values as Record<string, unknown>)[key] ?? '').trim();
}

type CsvAxisSpec = Extract<NonNullable<Step['matrix']>[string], { csv: string }>;

/** A CSV cell naming neither a URL nor an existing file, as a bad cell of its row. */
function setAsideBadUrl(rows: Map<string, SkippedCell>, step: string, cell: LocalFileCell): void {
  const key = `${step}\u0000${cell.axis}\u0000${cell.line}\u0000${cell.col}`;
  if (rows.has(key)) return;
  const reason = `a bad URL: ${JSON.stringify(clip(String(cell.value)))} is neither a URL (https://...) nor an existing file`;
  rows.set(key, {
    step,
    axis: cell.axis,
    file: cell.file,
    row: cell.line,
    key: cell.key,
    column: cell.column,
    col: cell.col,
    reason,
    problem: {
      location: { file: cell.file, line: cell.line, col: Math.max(1, cell.col) },
      path: `steps.${step}.matrix.${cell.axis}`,
      message: `the CSV cell ${cell.where} holds ${JSON.stringify(clip(String(cell.value)))}, which is neither a URL (https://...) nor an existing file`,
      code: 'csv',
    },
  });
}

/**
 * The plan again without the rows set aside: every other instance was valid, so this pass only
 * drops them (the money guards and onInstance saw the first pass already). A step left with no
 * row is refused with the rows' problems.
 */
async function planWithout(loaded: LoadedManifest, options: PlanOptions, rows: ReadonlyMap<string, SkippedCell>): Promise<Plan> {
  const skipLines = new Map<string, Set<number>>();
  for (const [key, lines] of options.skipLines ?? []) skipLines.set(key, new Set(lines));
  for (const cell of rows.values()) {
    const key = `${cell.step}\u0000${cell.axis}`;
    skipLines.set(key, (skipLines.get(key) ?? new Set()).add(cell.row));
  }
  let plan: Plan;
  try {
    plan = await buildPlan(loaded, { ...options, skipLines, beforeInstances: undefined, helper: undefined, settled: true });
  } catch (error) {
    if (error instanceof ManifestError) throw new ManifestError([...[...rows.values()].map((c) => c.problem), ...error.problems]);
    throw error;
  }
  const own = [...rows.values()].map(({ problem: _, ...row }): SkippedRow => row);
  plan.skippedRows = sortSkippedRows([...own, ...plan.skippedRows], loaded.order);
  return plan;
}

/**
 * The plan's steps resolved (axes read, instances counted, limits and env checked: ManifestError
 * otherwise), `beforeInstances` called, and the options catalog fetched when a step needs it; no
 * instance rendered yet.
 */
export async function preparePlan(
  loaded: LoadedManifest,
  options: PlanOptions = {},
): Promise<{ plan: Plan; catalog: OptionsCatalog | undefined; problems?: ManifestProblem[] | undefined }> {
  const { manifest, source } = loaded;
  const problems: ManifestProblem[] = [];
  const report = (
    path: readonly (string | number)[],
    message: string,
    location = source.locate(path),
    code: ProblemCode = 'axis',
  ): void => {
    problems.push({ location, path: formatPath(path), message, code });
  };
  const env: Record<string, string> = {};
  const unset = new Set<string>();
  for (const name of manifest.env ?? []) {
    const value = options.env?.[name];
    if (value === undefined) {
      report(['env'], `environment variable ${name} is allow-listed but not set`, undefined, 'env');
      unset.add(name);
    } else env[name] = value;
  }
  /** Steps that cannot be planned (see keepGoing), and the for_each steps that follow them. */
  const broken = new Set<string>();
  const run = options.run ?? { id: 'preview', startedAt: new Date() };
  const startedAt = run.startedAt.toISOString();
  const scopeBase: Scope = { vars: manifest.vars ?? {}, env, run: { id: run.id, date: startedAt.slice(0, 10), started_at: startedAt } };
  const prices: Record<string, PriceEntry> = { ...manifest.prices };

  const steps: StepPlan[] = [];
  for (const id of loaded.order) {
    const step = manifest.steps[id] as Step;
    const spec = modelFor(step.model);
    const before = problems.length;
    const axes: ResolvedAxis[] = [];
    for (const [name, axis] of Object.entries(step.matrix ?? {})) {
      try {
        axes.push(
          await resolveAxis(name, axis, {
            dir: loaded.dir,
            presets: options.presets,
            recorded: options.recorded?.(id, name),
            skipLines: options.skipLines?.get(`${id}\u0000${name}`),
          }),
        );
      } catch (error) {
        if (error instanceof CsvError && error.unreadable) {
          // Named where the manifest names it: the file itself has no line to point at.
          const path = ['steps', id, 'matrix', name, 'csv'];
          const problem = unreadableFile(error.location.file, 'CSV', error.unreadable, source.locate(path));
          report(path, problem.message, problem.location, problem.code);
        } else if (error instanceof CsvError) report(['steps', id, 'matrix', name], `${error.message}`, error.location, 'csv');
        else if (error instanceof AxisError) report(['steps', id, 'matrix', name], error.message);
        else throw error;
      }
    }
    checkCsvColumns(id, axes, loaded.templates.get(id)?.refs ?? [], report);
    const filledCells = filledCellsOf(axes, loaded.templates.get(id)?.refs ?? []);
    const matrix: MatrixSpec = { axes, zip: step.zip, include: step.include, exclude: step.exclude };
    let combos = 0;
    // An axis that could not be read is the headline: its include, exclude and zip would only
    // add follow-on errors (an exclude naming an axis that is missing because it failed).
    const axisFailed = problems.length > before;
    if (!axisFailed)
      try {
        const product = productSize(matrix);
        // Counting exclude/include means walking the product: only when the product is within bounds.
        combos =
          (step.include || step.exclude) && product <= (options.maxInstances ?? DEFAULT_MAX_INSTANCES)
            ? countOf(expandMatrix(matrix))
            : product;
        // An exclude list that removes every combination is a mistake, refused as a where filter that
        // keeps no CSV row is: a nightly run would otherwise report success having made nothing.
        if (combos === 0 && product > 0 && step.exclude !== undefined && step.exclude.length > 0) {
          report(['steps', id, 'exclude'], `exclude removes every combination of the sweep: step ${id} would make no instance`);
        }
      } catch (error) {
        if (!(error instanceof MatrixError)) throw error;
        report(['steps', id, ...error.at], error.message);
      }
    const forEach = forEachStepOf(step);
    const upstream = forEach ? steps.find((s) => s.id === forEach) : undefined;
    let price: StepPrice;
    try {
      price = stepPrice(step.price_usd, prices, step.model, spec, id);
    } catch (error) {
      if (!(error instanceof PriceFormulaError)) throw error;
      report(['steps', id, 'price_usd'], error.message, undefined, 'price');
      price = { usd: undefined, source: 'none', tokenPriced: spec.tokenPriced === true };
    }
    const priceUsd = price.usd;
    const readsUpstreamOutputs = (loaded.templates.get(id)?.refs ?? []).some(
      (r) => r.segments[0] === 'upstream' && r.segments[1] === 'outputs',
    );
    steps.push({
      id,
      model: step.model,
      spec,
      step,
      needs: step.needs ?? [],
      forEach,
      forEachOnly: forEachOnlyOf(step),
      matrix,
      count: combos * (upstream ? upstream.count : 1),
      priceUsd,
      price,
      readsUpstreamOutputs,
      filledCells,
    });
    const readsUnset = [loaded.templates.get(id), loaded.fileNames.get(id)].some((t) =>
      t?.refs.some((r) => r.segments[0] === 'env' && unset.has(String(r.segments[1]))),
    );
    if (problems.length > before || readsUnset || (forEach !== undefined && broken.has(forEach))) broken.add(id);
  }
  const maxInstances = options.maxInstances ?? DEFAULT_MAX_INSTANCES;
  for (const step of steps) {
    if (step.count > maxInstances) {
      report(
        ['steps', step.id, 'matrix'],
        `step ${step.id} expands to ${step.count} instances, over the limit of ${maxInstances}; split the sweep into several manifests`,
        undefined,
        'too_large',
      );
      broken.add(step.id);
      for (const other of steps) if (other.forEach !== undefined && broken.has(other.forEach)) broken.add(other.id);
    }
  }
  if (problems.length > 0 && !options.keepGoing) throw new ManifestError(problems);
  const planned = broken.size > 0 ? steps.filter((s) => !broken.has(s.id)) : steps;
  if (planned.length === 0) throw new ManifestError(problems);
  if (options.select) selectSubset(planned, options.select);

  const plan = new Plan(loaded, planned, scopeBase);
  plan.selection = options.select;
  await options.beforeInstances?.(plan);
  let catalog: OptionsCatalog | undefined;
  const needing = planned.find((s) => catalogFieldOf(s) !== undefined);
  if (needing) {
    if (!options.catalog) {
      const field = catalogFieldOf(needing) as string;
      throw new ManifestError([
        {
          location: source.locate(['steps', needing.id, 'input', field]),
          path: `steps.${needing.id}.input.${field}`,
          message: 'checking a selection needs the live options catalog: set --base-url (or GENPIPE_BASE_URL), or use --emulator',
        },
      ]);
    }
    catalog = await options.catalog();
  }

  return problems.length > 0 ? { plan, catalog, problems } : { plan, catalog };
}

/**
 * One distinct problem and how many instances share it. `atTemplate` is the same problem located
 * at the template: used instead when instances made from different sweep values share it (the
 * template is then at fault, not one value).
 */
export interface SeenProblem {
  problem: ManifestProblem;
  count: number;
  atTemplate?: ManifestProblem | undefined;
}

/** `a` and `b` counted together; at the template when they were located at different values. */
function joinSeen(a: SeenProblem, b: SeenProblem): SeenProblem {
  const same = isDeepStrictEqual(a.problem.location, b.problem.location);
  return { problem: same ? a.problem : (a.atTemplate ?? a.problem), count: a.count + b.count, atTemplate: a.atTemplate };
}

/**
 * What checking instances found: each distinct problem (up to maxProblems) with how many instances
 * share it, in the order first seen, and the local image files the valid instances name.
 */
export interface InstanceCheck {
  seen: Map<string, SeenProblem>;
  localFiles: Map<string, LocalFile>;
  /** With a Skippable: the bad cells of rows to set aside, by step, axis, line and column. */
  rows?: Map<string, SkippedCell> | undefined;
  /** The prices of the valid instances of each step priced per instance (a table or a formula), by step. */
  prices?: Map<string, InstancePrices> | undefined;
}

/** A local image file an instance names; `cell` is the CSV cell it came from, when one did. */
export interface LocalFile {
  step: string;
  instance: string;
  cell?: LocalFileCell | undefined;
  /** With rows to set aside: the other CSV cells naming the same file. */
  more?: LocalFileCell[] | undefined;
}

/** The CSV cell a local file's name came from. */
export interface LocalFileCell {
  /** The row's identity (csvRowKey). */
  key: string;
  where: string;
  value: unknown;
  axis: string;
  file: string;
  line: number;
  column: string;
  col: number;
}

/** Whether the rows of a step's CSV axis are set aside when invalid, rather than refused. */
export type Skippable = (step: string, axis: string) => boolean;

/** A bad cell of a row to set aside, with the problem it is when the plan is refused anyway. */
export interface SkippedCell extends SkippedRow {
  problem: ManifestProblem;
}

/**
 * Another thread checking the plan's instances from index `from` to the end, while this one checks
 * those before. Its findings are merged after this thread's, so the plan's verdict is the same.
 */
export interface PlanHelper {
  from: number;
  check: Promise<InstanceCheck>;
  cancel(): void;
}

/**
 * Renders and validates the plan's instances in `range` (all by default) in plan order, handing
 * each valid one to `onInstance`. A range is only for plans without for_each steps (their
 * instances follow the upstream's valid ones, known only by checking those).
 */
export async function checkInstances(
  plan: Plan,
  catalog: OptionsCatalog | undefined,
  options: Pick<PlanOptions, 'signal' | 'onInstance' | 'onProgress'> & {
    maxProblems: number;
    fingerprint?: PlanFingerprint | undefined;
    skippable?: Skippable | undefined;
  },
  range?: StepWindow,
): Promise<InstanceCheck> {
  const { source } = plan.loaded;
  const { maxProblems, fingerprint, skippable } = options;
  const seen = new Map<string, SeenProblem>();
  const localFiles = new Map<string, LocalFile>();
  const rows = skippable ? new Map<string, SkippedCell>() : undefined;
  const prices = new Map<string, InstancePrices>();
  const total = plan.totalInstances;
  let checked = 0;
  let offset = 0;
  for (const step of plan.steps) {
    const start = offset;
    offset += step.count;
    let window: StepWindow | undefined;
    if (range) {
      window = { from: Math.max(0, range.from - start), to: Math.min(step.count, range.to - start) };
      if (window.from >= window.to) continue;
    }
    const fileStems = new Map<string, string>();
    for (const entry of plan.entries(step.id, catalog, window)) {
      if (++checked % PROGRESS_EVERY === 0) {
        // A plan of millions takes seconds to check: let Ctrl-C and timers in, and say how far it is.
        await new Promise<void>((resolve) => setImmediate(resolve));
        if (options.signal?.aborted)
          throw new GenpipeError('aborted', 'Interrupted while checking the plan; nothing was sent.', { cause: options.signal.reason });
        options.onProgress?.(checked, total);
      }
      if (entry instanceof InstanceError) {
        const error = entry;
        // A problem of one row's cells only: the row is set aside, not the plan refused.
        if (rows && skippable && setAside(plan, step, error, skippable, rows)) continue;
        for (const issue of error.issues) {
          const signature = `${step.id}\u0000${issue.path}\u0000${issue.message}`;
          const known = seen.get(signature);
          if (known?.atTemplate === undefined && known) known.count++;
          else if (known || seen.size < maxProblems) {
            const at = error.at ?? segmentsOf(issue.path);
            const field = formatPath(error.field);
            const template = error.located
              ? { location: source.locate(error.located), path: formatPath(error.located) }
              : {
                  location: source.locate(['steps', step.id, ...error.field, ...at], issue.atKey === true),
                  path: `steps.${step.id}.${field}${issue.path ? `.${issue.path}` : ''}`,
                };
            const origin = error.field.length === 1 && error.field[0] === 'input' ? sweepOrigin(plan, step, at, error.values) : undefined;
            const atTemplate: ManifestProblem = {
              ...template,
              message: `${error.instance}: ${issue.message}${origin?.kind === 'csv' && !issue.message.includes(origin.file) ? ` (${origin.cell})` : ''}`,
              code: error.code,
            };
            const problem: ManifestProblem =
              origin?.kind === 'list'
                ? {
                    location: source.locate(origin.path),
                    path: formatPath(origin.path),
                    message: `${origin.whole ? `${clip(JSON.stringify(origin.value))} ` : ''}${issue.message}`,
                    code: error.code,
                    also: template,
                  }
                : atTemplate;
            const entry: SeenProblem = { problem, count: 1, atTemplate: origin?.kind === 'list' ? atTemplate : undefined };
            seen.set(signature, known ? joinSeen(known, entry) : entry);
          }
        }
        continue;
      }
      if (entry.fileStem !== undefined) {
        // Case-insensitive file systems (macOS, Windows) would make `A` and `a` one file.
        const name = entry.fileStem.toLowerCase();
        const other = fileStems.get(name);
        if (other === undefined) fileStems.set(name, entry.id);
        else if (seen.size < maxProblems) {
          const path = ['steps', step.id, 'output', 'filename'];
          seen.set(`stem\u0000${name}`, {
            problem: {
              location: source.locate(path),
              path: formatPath(path),
              message: `${other} and ${entry.id} would both be written as ${JSON.stringify(clip(entry.fileStem))}: add an axis that tells them apart to the file name`,
              code: 'file_name',
            },
            count: 1,
          });
        }
      }
      fingerprint?.add(entry.id, entry.canonical);
      if (entry.priceUsd !== undefined) {
        const usd = entry.priceUsd;
        prices.set(step.id, addPrices(prices.get(step.id), { count: 1, sumUsd: usd, minUsd: usd, maxUsd: usd }));
      }
      options.onInstance?.(entry);
      mapImageFields(entry.body, step.spec.imageFields, (v, at) => {
        if (isRemoteUrl(v)) return v;
        const known = localFiles.get(v);
        // Without rows to set aside, the first instance naming a file is enough to name it.
        if (known && !rows) return v;
        const origin = sweepOrigin(plan, step, at, entry.values);
        const cell: LocalFileCell | undefined =
          origin?.kind === 'csv'
            ? {
                key: csvRowKey(step.step.matrix?.[origin.axis], entry.values[origin.axis], origin.line),
                where: origin.cell,
                value: origin.value,
                axis: origin.axis,
                file: origin.file,
                line: origin.line,
                column: origin.column,
                col: origin.col,
              }
            : undefined;
        if (known) {
          if (cell) (known.more ??= []).push(cell);
        } else localFiles.set(v, { step: step.id, instance: entry.id, cell });
        return v;
      });
    }
  }
  return { seen, localFiles, rows, prices };
}

/**
 * Records the bad cells of `error`'s row when every issue of it lies in one cell of a CSV row whose
 * axis sets rows aside (`on_invalid: skip`); true when it did. Anything else (a problem of the
 * template, of another axis, of the file name) stays a problem that refuses the plan.
 */
function setAside(plan: Plan, step: StepPlan, error: InstanceError, skippable: Skippable, rows: Map<string, SkippedCell>): boolean {
  if (error.field.length !== 1 || error.field[0] !== 'input') return false;
  const cells: SkippedCell[] = [];
  for (const issue of error.issues) {
    const origin = sweepOrigin(plan, step, error.at ?? segmentsOf(issue.path), error.values);
    if (origin?.kind !== 'csv' || !skippable(step.id, origin.axis)) return false;
    const reason = error.code === 'empty_cell' ? 'the cell is empty' : issue.message;
    const location = { file: origin.file, line: origin.line, col: Math.max(1, origin.col) };
    cells.push({
      step: step.id,
      axis: origin.axis,
      file: origin.file,
      row: origin.line,
      key: csvRowKey(step.step.matrix?.[origin.axis], error.values?.[origin.axis], origin.line),
      column: origin.column,
      col: origin.col,
      reason,
      problem: {
        location,
        path: `steps.${step.id}.matrix.${origin.axis}`,
        message: `${error.instance}: ${issue.message}`,
        code: error.code,
      },
    });
  }
  if (cells.length === 0) return false;
  for (const cell of cells) {
    const key = `${cell.step}\u0000${cell.axis}\u0000${cell.row}\u0000${cell.col}`;
    if (!rows.has(key)) rows.set(key, cell);
  }
  return true;
}

/**
 * The check of a whole plan from the checks of its first part and the rest: `first`'s findings,
 * then those of `rest` (counts of a problem both saw added), as one pass would have found them.
 */
export function mergeChecks(first: InstanceCheck, rest: InstanceCheck, maxProblems: number): InstanceCheck {
  const seen = new Map(first.seen);
  for (const [signature, entry] of rest.seen) {
    const known = seen.get(signature);
    if (known) seen.set(signature, joinSeen(known, entry));
    else if (seen.size < maxProblems) seen.set(signature, entry);
  }
  const localFiles = new Map(first.localFiles);
  for (const [path, where] of rest.localFiles) if (!localFiles.has(path)) localFiles.set(path, where);
  const rows = first.rows || rest.rows ? new Map([...(first.rows ?? []), ...(rest.rows ?? [])]) : undefined;
  const prices = new Map(first.prices);
  for (const [step, priced] of rest.prices ?? []) prices.set(step, addPrices(prices.get(step), priced));
  return { seen, localFiles, rows, prices };
}

/**
 * Where the value a problem is about came from, when one sweep value made it: the template at
 * `at` (or the one rendering the object `at` is inside) reads exactly one axis. A value of an
 * explicit list is named by its path in the matrix (`steps.sheets.matrix.tier[1]`), one of a CSV
 * row by its file, row and column. `whole`: the template is that value alone, not text around it.
 */
export function sweepOrigin(
  plan: Plan,
  step: StepPlan,
  at: readonly PathSegment[],
  values: Record<string, unknown> | undefined,
):
  | { kind: 'list'; path: (string | number)[]; value: unknown; whole: boolean }
  | { kind: 'csv'; cell: string; line: number; column: string; col: number; file: string; axis: string; value: unknown }
  | undefined {
  if (values === undefined) return undefined;
  const refs = plan.loaded.templates.get(step.id)?.refs ?? [];
  const within = (ref: TemplateRef): boolean => ref.at.length <= at.length && ref.at.every((segment, i) => segment === at[i]);
  const candidates = refs.filter(within);
  const deepest = Math.max(-1, ...candidates.map((r) => r.at.length));
  const reading = candidates.filter((r) => r.at.length === deepest);
  const axisRefs = reading.filter((r) => typeof r.segments[0] === 'string' && Object.hasOwn(values, r.segments[0]));
  const ref = axisRefs[0];
  if (!ref || axisRefs.length !== 1) return undefined;
  const axis = ref.segments[0] as string;
  const value = values[axis];
  const origin = csvRowOrigin(value);
  if (origin) {
    const column = ref.segments[1];
    if (typeof column !== 'string') return undefined;
    return {
      kind: 'csv',
      cell: `${origin.file} row ${origin.line}, column ${origin.columns.indexOf(column) + 1} ("${column}")`,
      line: origin.line,
      column,
      col: origin.columns.indexOf(column) + 1,
      file: origin.file,
      axis,
      value: (value as Record<string, unknown>)[column],
    };
  }
  const list = step.step.matrix?.[axis];
  if (!Array.isArray(list)) return undefined;
  const index = list.findIndex((v) => isDeepStrictEqual(v, value));
  if (index < 0) return undefined;
  const rest = ref.segments.slice(1);
  const template = step.step.input === undefined ? undefined : valueAtPath(step.step.input, ref.at);
  const whole = typeof template === 'string' && /^\{\{[^{}]*\}\}$/.test(template.trim());
  return {
    kind: 'list',
    path: ['steps', step.id, 'matrix', axis, index, ...rest],
    value: rest.length === 0 ? value : valueAtPath(value, rest),
    whole,
  };
}

const valueAtPath = (value: unknown, path: readonly PathSegment[]): unknown => {
  let current = value;
  for (const segment of path) {
    if (current === null || typeof current !== 'object') return undefined;
    current = (current as Record<PathSegment, unknown>)[segment];
  }
  return current;
};

/** The CSV cells a step's input reads that must have a value: each `{{ axis.column }}` of a CSV axis, unless `allow_empty` lists the column. */
function filledCellsOf(axes: readonly ResolvedAxis[], refs: readonly TemplateRef[]): FilledCell[] | undefined {
  const cells: FilledCell[] = [];
  for (const ref of refs) {
    const [root, column] = ref.segments;
    const axis = axes.find((a) => a.name === root);
    if (!axis?.columns || typeof column !== 'string' || !axis.columns.includes(column) || axis.allowEmpty?.includes(column)) continue;
    cells.push({ axis: axis.name, column, at: ref.at });
  }
  return cells.length > 0 ? cells : undefined;
}

/** `{{ row.headlne }}` on a CSV axis without that column: refused at the template, with the nearest column. */
function checkCsvColumns(
  id: string,
  axes: readonly ResolvedAxis[],
  refs: readonly TemplateRef[],
  report: (path: readonly (string | number)[], message: string) => void,
): void {
  const suggester = new Suggester();
  for (const ref of refs) {
    const [root, column] = ref.segments;
    const columns = axes.find((a) => a.name === root)?.columns;
    if (!columns || typeof column !== 'string' || columns.includes(column)) continue;
    const suggestion = suggester.nearest(column, columns);
    report(
      ['steps', id, 'input', ...ref.at],
      `{{ ${ref.expression} }}: the CSV file has no column "${column}"; ${suggestion ? `did you mean "${suggestion}"?` : `its columns are ${columns.join(', ')}`}`,
    );
  }
}

/**
 * Applies `--only` and `--limit` (selection.ts) to the steps: each step's subset and its count.
 * Refuses (exit 2) a selector naming no step or no axis of its step, one that matches nothing,
 * and a selected step whose `needs` or `for_each` step is left out.
 */
function selectSubset(steps: StepPlan[], select: Selection): void {
  const ids = steps.map((s) => s.id);
  const bySteps = new Map<string, Selector[]>();
  for (const selector of select.only ?? []) {
    const step = steps.find((s) => s.id === selector.step);
    if (!step) {
      const suggestion = nearest(selector.step, ids);
      throw new GenpipeError(
        'invalid_input',
        `--only ${JSON.stringify(clip(selector.text))} names no step of the manifest${suggestion ? `; did you mean "${suggestion}"?` : ` (steps: ${ids.join(', ')}).`}`,
      );
    }
    const axes = [...step.matrix.axes.map((a) => a.name), ...(step.step.include ?? []).flatMap((e) => Object.keys(e))];
    for (const [axis] of selector.where) {
      if (!axes.includes(axis))
        throw new GenpipeError(
          'invalid_input',
          `--only ${JSON.stringify(clip(selector.text))}: "${clip(axis)}" is not an axis of step ${step.id}${axes.length > 0 ? ` (axes: ${[...new Set(axes)].join(', ')})` : ''}.`,
        );
    }
    bySteps.set(step.id, [...(bySteps.get(step.id) ?? []), selector]);
  }
  const chosen = (id: string): boolean => select.only === undefined || select.only.length === 0 || bySteps.has(id);
  for (const step of steps) {
    if (!chosen(step.id)) {
      step.subset = { accept: () => false, limit: 0 };
      step.count = 0;
      continue;
    }
    for (const upstream of [...step.needs, ...(step.forEach ? [step.forEach] : [])]) {
      if (!chosen(upstream))
        throw new GenpipeError(
          'invalid_input',
          `--only selects step ${step.id}, which ${step.forEach === upstream ? 'runs for_each' : 'needs'} ${upstream}: select ${upstream} too (--only ${upstream}).`,
        );
    }
    const selectors = bySteps.get(step.id);
    const accept = selectors ? labelMatcher(selectors) : () => true;
    const limit = step.forEach === undefined ? select.limit : undefined;
    let own = 0;
    for (const combo of expandMatrix(step.matrix)) {
      if (accept(combo.label)) own++;
      if (limit !== undefined && own >= limit) break;
    }
    if (own === 0 && step.matrix.axes.length + (step.step.include?.length ?? 0) > 0) {
      throw new GenpipeError(
        'invalid_input',
        `--only ${selectors?.map((s) => JSON.stringify(clip(s.text))).join(' --only ') ?? step.id} matches no instance of step ${step.id}.`,
      );
    }
    const upstream = step.forEach ? steps.find((s) => s.id === step.forEach) : undefined;
    step.subset = { accept, limit };
    step.count = own * (upstream ? upstream.count : 1);
  }
}

function countOf(iterator: Iterable<unknown>): number {
  let n = 0;
  for (const _ of iterator) n++;
  return n;
}
