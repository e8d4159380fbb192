/**
 * Loads a manifest: safe YAML with locations, the zod schema, then the checks a schema cannot
 * express (references between steps, cycles, template paths, allow-listed environment variables).
 * Every problem is collected, not only the first, each at its `file:line:col`.
 */
import { isUtf8 } from 'node:buffer';
import { closeSync, openSync, readSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { loadYaml, YamlSyntaxError, type SourceLocation, type YamlSource } from '../util/yaml-source.js';
import type * as z from 'zod';
import { clip, formatPath, knownKeysAt } from '../util/zod-issues.js';
import { ManifestError, type ManifestProblem } from './errors.js';
import { forEachStepOf, Manifest, MODEL_NAMES, type Sink, type Step } from './schema.js';
import { Suggester } from '../util/suggest.js';
import { definitionOf, MODEL_DEFINITIONS } from '../models/registry.js';
import { compileTemplate, TemplateError, type CompiledTemplate, type TemplateRef } from './template.js';
import { problemsFromZod } from './zod-locate.js';

/** Largest manifest accepted, in bytes. */
export const MAX_MANIFEST_BYTES = 1024 * 1024;
/** Largest number of YAML aliases resolved (alias bombs). */
export const MAX_ALIASES = 100;

export interface LoadedManifest {
  manifest: Manifest;
  /** The manifest file, as given. */
  file: string;
  /** Its text as read (a run keeps a copy: `genpipe diff` re-plans what the run was given). */
  text: string;
  /** Its folder: relative paths (CSV files, local images) are resolved against it. */
  dir: string;
  source: YamlSource;
  /** Each step's input, compiled once. */
  templates: ReadonlyMap<string, CompiledTemplate>;
  /** The `output.filename` template of each step that has one. */
  fileNames: ReadonlyMap<string, CompiledTemplate>;
  /** Step ids in an order where every step comes after the steps it depends on. */
  order: readonly string[];
}

/** Roots a template may read besides the step's axes. */
const FIXED_ROOTS = ['vars', 'env', 'upstream', 'run'] as const;
/** What `{{ run.X }}` offers: the run's id, its UTC start date (`YYYY-MM-DD`) and start time (ISO 8601). */
export const RUN_VARIABLES = ['id', 'date', 'started_at'] as const;

export function loadManifestFile(file: string): LoadedManifest {
  return loadManifestText(readManifestFile(file), file);
}

/**
 * The manifest's text; a missing or unreadable file is a problem naming the file (never `ENOENT` at
 * 1:1). Read at most MAX_MANIFEST_BYTES + 1 bytes, whatever the file says its size is: a device or
 * a pipe (`/dev/zero`, `/dev/stdin`) says 0 and never ends. Bytes that are not UTF-8 are refused
 * where they are, instead of being read as U+FFFD and sent, and paid for, garbled.
 */
function readManifestFile(file: string): string {
  let bytes: Buffer;
  try {
    const size = statSync(file).size;
    if (size > MAX_MANIFEST_BYTES) throw tooLarge(file, size);
    bytes = readAtMost(file, MAX_MANIFEST_BYTES + 1);
    if (bytes.length > MAX_MANIFEST_BYTES) throw tooLarge(file);
  } catch (error) {
    if (error instanceof ManifestError) throw error;
    throw new ManifestError([unreadableFile(file, 'manifest', error)]);
  }
  const text = bytes.toString('utf8');
  if (!isUtf8(bytes)) {
    const at = text.indexOf('\uFFFD');
    const before = text.slice(0, at).split('\n');
    throw new ManifestError([
      {
        location: { file, line: before.length, col: (before.at(-1)?.length ?? 0) + 1 },
        path: '',
        message: 'these bytes are not UTF-8 text: save the manifest as UTF-8',
        code: 'yaml',
      },
    ]);
  }
  return text;
}

function tooLarge(file: string, size?: number): ManifestError {
  const message =
    size === undefined
      ? `the manifest is over the limit of ${MAX_MANIFEST_BYTES} bytes`
      : `the manifest is ${size} bytes, over the limit of ${MAX_MANIFEST_BYTES}`;
  return new ManifestError([{ location: { file, line: 1, col: 1 }, path: '', message, code: 'too_large' }]);
}

/** Up to `limit` bytes of `file`, read in turn however the file reports its size. */
function readAtMost(file: string, limit: number): Buffer {
  const fd = openSync(file, 'r');
  try {
    const chunks: Buffer[] = [];
    let total = 0;
    // Bounded: each turn reads at least a byte, or ends, and the total stops at `limit`.
    while (total < limit) {
      const chunk = Buffer.allocUnsafe(Math.min(64 * 1024, limit - total));
      const n = readSync(fd, chunk, 0, chunk.length, null);
      if (n === 0) break;
      chunks.push(chunk.subarray(0, n));
      total += n;
    }
    return Buffer.concat(chunks, total);
  } finally {
    closeSync(fd);
  }
}

/**
 * A file that could not be read, as a problem: "does not exist" and where it was looked for, or
 * why it could not be read. At `location` (where the file is named), or about the whole file (line 0).
 */
export function unreadableFile(
  file: string,
  what: string,
  error: unknown,
  location: SourceLocation = { file, line: 0, col: 0 },
): ManifestProblem {
  const code = (error as NodeJS.ErrnoException).code;
  const where = resolve(file);
  // Named once: by the location when the problem is at the file itself, else in the sentence.
  const named = location.file === file ? `the ${what} file` : `the ${what} file ${file}`;
  const looked = where === file ? '' : ` (looked for ${where})`;
  const message =
    code === 'ENOENT' || code === 'ENOTDIR'
      ? `${named} does not exist${looked}`
      : code === 'EACCES' || code === 'EPERM'
        ? `${named} cannot be read: permission denied`
        : code === 'EISDIR'
          ? `${named} is a directory, not a file`
          : `${named} cannot be read (${code ?? (error as Error).message})`;
  return { location, path: '', message, code: code === 'ENOENT' || code === 'ENOTDIR' ? 'missing_file' : 'unreadable_file' };
}

export function loadManifestText(text: string, file: string): LoadedManifest {
  const check = checkManifestText(text, file);
  if (check.problems.length > 0) throw new ManifestError(check.problems);
  return check.loaded as LoadedManifest;
}

/**
 * What checking a manifest found: every problem the loader can see in one pass, and the manifest
 * without its broken steps (nor the for_each steps that follow them), so that `genpipe validate`
 * can go on to plan the rest and list their problems too. `loaded` is undefined when nothing can
 * be planned: a YAML error, a problem outside the steps, or no step left.
 */
export interface ManifestCheck {
  problems: ManifestProblem[];
  loaded: LoadedManifest | undefined;
}

/** checkManifestText of a file; a missing or unreadable file is its one problem. */
export function checkManifestFile(file: string): ManifestCheck {
  let text: string;
  try {
    text = readManifestFile(file);
  } catch (error) {
    if (error instanceof ManifestError) return { problems: [...error.problems], loaded: undefined };
    throw error;
  }
  return checkManifestText(text, file);
}

export function checkManifestText(text: string, file: string): ManifestCheck {
  let source: YamlSource;
  try {
    source = loadYaml(text, file, { maxBytes: MAX_MANIFEST_BYTES, maxAliasCount: MAX_ALIASES });
  } catch (error) {
    if (error instanceof YamlSyntaxError)
      return {
        problems: error.problems.map((p) => ({ location: p.location, path: '', message: p.message, code: 'yaml' })),
        loaded: undefined,
      };
    throw error;
  }
  if (source.value === null || typeof source.value !== 'object' || Array.isArray(source.value)) {
    return {
      problems: [
        { location: source.locate([]), path: '', message: 'a manifest is a mapping with version, name and steps', code: 'schema' },
      ],
      loaded: undefined,
    };
  }
  // One budget for every "did you mean" of this manifest, so that thousands of bad names stay cheap.
  const suggester = new Suggester();
  const problems: ManifestProblem[] = [];
  /** Steps that failed the schema or a check: left out of the plan, but still names others may use. */
  const broken = new Set<string>();
  let parsed = Manifest.safeParse(source.value);
  if (!parsed.success) {
    const models = unknownModels(source, suggester);
    const rest = problemsFromZod(parsed.error, source, Manifest, [], suggester).filter((p) => !models.some((m) => m.path === p.path));
    problems.push(...[...models, ...rest].map((p) => ({ ...p, code: p.code ?? 'schema' })));
    // Structural problems must not hide the rest: the manifest is checked further as if each
    // misspelt key were the key it suggests (or absent), and without each invalid value outside
    // the steps; a step whose own values are invalid is left out, and the other steps are checked.
    const repaired = repairedCopy(source.value, parsed.error, suggester);
    source = aliasedSource(source, repaired.renames);
    parsed = Manifest.safeParse(repaired.value);
    if (!parsed.success) {
      if (!parsed.error.issues.every((i) => i.path[0] === 'steps' && typeof i.path[1] === 'string')) return { problems, loaded: undefined };
      for (const issue of parsed.error.issues) broken.add(issue.path[1] as string);
      const value = repaired.value as { steps: Record<string, unknown> };
      parsed = Manifest.safeParse({ ...value, steps: Object.fromEntries(Object.entries(value.steps).filter(([id]) => !broken.has(id))) });
      if (!parsed.success) return { problems, loaded: undefined };
    }
  }
  const manifest = parsed.data;

  const at = (path: readonly (string | number)[], message: string, atKey = false): void => {
    problems.push({ location: source.locate(path, atKey), path: formatPath(path), message, code: 'reference' });
    // Every problem found here is under steps.<id>: that step is left out of the plan.
    if (path[0] === 'steps' && typeof path[1] === 'string') broken.add(path[1]);
  };
  const stepIds = [...Object.keys(manifest.steps), ...broken];
  const names: Names = {
    stepIds,
    steps: new Set(stepIds),
    vars: Object.keys(manifest.vars ?? {}),
    env: new Set(manifest.env ?? []),
    suggester,
  };
  const templates = new Map<string, CompiledTemplate>();
  const fileNames = new Map<string, CompiledTemplate>();

  for (const [id, step] of Object.entries(manifest.steps)) {
    const base = ['steps', id];
    checkReferences(id, step, names, (path, message) => at([...base, ...path], message));
    checkConversation(step, (path, message) => at([...base, ...path], message));
    // Templates: syntax now, and every root they read must exist.
    const axes = new Set([...Object.keys(step.matrix ?? {}), ...(step.include ?? []).flatMap((e) => Object.keys(e))]);
    try {
      const compiled = compileTemplate(step.input ?? {}, []);
      templates.set(id, compiled);
      for (const ref of compiled.refs) checkRef(ref, step, axes, manifest, names, (message) => at([...base, 'input', ...ref.at], message));
    } catch (error) {
      if (!(error instanceof TemplateError)) throw error;
      at([...base, 'input', ...error.at], error.message);
    }
    if (step.output?.filename !== undefined) {
      const path = [...base, 'output', 'filename'];
      try {
        const compiled = compileTemplate(step.output.filename);
        fileNames.set(id, compiled);
        for (const ref of compiled.refs) {
          if (ref.segments[0] === 'upstream' && ref.segments[1] === 'outputs')
            at(path, `{{ ${clip(ref.expression)} }}: a file name cannot read upstream outputs, which are known only at run time`);
          else checkRef(ref, step, axes, manifest, names, (message) => at(path, message));
        }
      } catch (error) {
        if (!(error instanceof TemplateError)) throw error;
        at(path, error.message);
      }
    }
    if (step.conversation) {
      try {
        for (const ref of compileTemplate(step.conversation).refs)
          checkRef(ref, step, axes, manifest, names, (message) => at([...base, 'conversation'], message));
      } catch (error) {
        if (!(error instanceof TemplateError)) throw error;
        at([...base, 'conversation'], error.message);
      }
    }
  }
  // Sinks: their prefix and public URL may read the run, vars and env, nothing that varies by instance.
  const sinks: [readonly (string | number)[], Sink | undefined][] = [
    [['defaults', 'output', 'sink'], manifest.defaults?.output?.sink],
    ...Object.entries(manifest.steps).map(([id, step]): [readonly (string | number)[], Sink | undefined] => [
      ['steps', id, 'output', 'sink'],
      step.output?.sink,
    ]),
  ];
  for (const [path, sink] of sinks) {
    if (sink === undefined) continue;
    const fields: [readonly (string | number)[], string | undefined][] =
      typeof sink === 'string'
        ? [[path, sink]]
        : [
            [[...path, 'url'], sink.url],
            [[...path, 'public_base_url'], sink.public_base_url],
          ];
    for (const [fieldPath, text] of fields)
      if (text !== undefined) checkSinkTemplate(text, manifest, names, (message) => at(fieldPath, message));
    if (typeof sink !== 'string') {
      // A password in a URL is copied wherever the URL goes (the run's manifest copy, plan.json,
      // outputs.csv): the store's credentials come from the AWS SDK's chain, never the manifest.
      for (const [field, text] of [
        ['endpoint', sink.endpoint],
        ['public_base_url', sink.public_base_url],
      ] as const)
        if (text !== undefined && hasUserInfo(text))
          at(
            [...path, field],
            `the ${field} carries a user name or password; give the store's credentials through the AWS SDK (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile), never in the manifest`,
          );
    }
  }
  const order = topologicalOrder(manifest, (path, message) => at(path, message));
  const loaded = { manifest, file, text, dir: dirname(resolve(file)), source, templates, fileNames, order };
  if (problems.length === 0) return { problems, loaded };
  return { problems, loaded: withoutSteps(loaded, broken) };
}

/** A key renamed in the copy that is checked further: `to` at `parent`, which the file spells `from`. */
interface Rename {
  parent: readonly PropertyKey[];
  from: string;
  to: string;
}

/**
 * A copy of `value` that the schema's structural problems no longer stop: each unknown key renamed
 * to the key it suggests (when that key is not there already) or removed, and each other invalid
 * value outside the steps removed. What stays invalid (a required field, a step's own values) is
 * left for the caller. The manifest itself is never run from this copy: its problems are listed.
 */
function repairedCopy(value: unknown, error: z.ZodError, suggester: Suggester): { value: unknown; renames: Rename[] } {
  const copy = structuredClone(value) as Record<string, unknown>;
  const renames: Rename[] = [];
  const at = (path: readonly PropertyKey[]): Record<PropertyKey, unknown> | undefined => {
    let node: unknown = copy;
    for (const key of path) {
      if (node === null || typeof node !== 'object') return undefined;
      node = (node as Record<PropertyKey, unknown>)[key];
    }
    return node !== null && typeof node === 'object' ? (node as Record<PropertyKey, unknown>) : undefined;
  };
  for (const issue of error.issues) {
    if (issue.code === 'unrecognized_keys') {
      const parent = at(issue.path);
      if (!parent) continue;
      const known = knownKeysAt(Manifest, issue.path);
      for (const key of issue.keys) {
        const suggestion = suggester.nearest(key, known);
        if (suggestion !== undefined && !Object.hasOwn(parent, suggestion)) {
          parent[suggestion] = parent[key];
          renames.push({ parent: issue.path, from: key, to: suggestion });
        }
        delete parent[key];
      }
    } else if (issue.path.length > 0 && issue.path[0] !== 'steps') {
      const parent = at(issue.path.slice(0, -1));
      if (parent && !Array.isArray(parent)) delete parent[issue.path[issue.path.length - 1] as PropertyKey];
    }
  }
  return { value: copy, renames };
}

/** `source`, locating the renamed keys of repairedCopy where the file spells them. */
function aliasedSource(source: YamlSource, renames: readonly Rename[]): YamlSource {
  if (renames.length === 0) return source;
  const spelt = (path: readonly PropertyKey[]): PropertyKey[] => {
    const out = [...path];
    for (const rename of renames) {
      const n = rename.parent.length;
      if (out.length > n && out[n] === rename.to && rename.parent.every((key, i) => out[i] === key)) out[n] = rename.from;
    }
    return out;
  };
  return { file: source.file, value: source.value, locate: (path, atKey) => source.locate(spelt(path), atKey) };
}

/** The manifest without `broken` steps and the for_each steps that follow them; undefined when none is left. */
function withoutSteps(loaded: LoadedManifest, broken: ReadonlySet<string>): LoadedManifest | undefined {
  const dropped = new Set(broken);
  // `order` puts each step after the one it follows, so one walk drops every follower.
  for (const id of loaded.order) {
    const upstream = forEachStepOf(loaded.manifest.steps[id] as Step);
    if (upstream !== undefined && dropped.has(upstream)) dropped.add(id);
  }
  const order = loaded.order.filter((id) => !dropped.has(id));
  if (order.length === 0) return undefined;
  const steps = Object.fromEntries(Object.entries(loaded.manifest.steps).filter(([id]) => !dropped.has(id)));
  const only = <T>(map: ReadonlyMap<string, T>): Map<string, T> => new Map([...map].filter(([id]) => !dropped.has(id)));
  return {
    ...loaded,
    manifest: { ...loaded.manifest, steps },
    templates: only(loaded.templates),
    fileNames: only(loaded.fileNames),
    order,
  };
}

/**
 * A model name that is neither built in nor a raw path (`character_sheet`): named with the nearest
 * built-in one, instead of the raw-path rule it also breaks.
 */
function unknownModels(source: YamlSource, suggester: Suggester): ManifestProblem[] {
  const steps = (source.value as { steps?: unknown }).steps;
  if (steps === null || typeof steps !== 'object' || Array.isArray(steps)) return [];
  const out: ManifestProblem[] = [];
  for (const [id, step] of Object.entries(steps)) {
    const model = (step as { model?: unknown } | null)?.model;
    if (typeof model !== 'string' || model.startsWith('/') || (MODEL_NAMES as readonly string[]).includes(model)) continue;
    const path = ['steps', id, 'model'];
    const suggestion = suggester.nearest(model, MODEL_NAMES);
    const hint = suggestion ? `did you mean "${suggestion}"?` : `the built-in models are ${MODEL_NAMES.join(', ')}`;
    out.push({
      location: source.locate(path),
      path: formatPath(path),
      message: `unknown model ${JSON.stringify(clip(model))}; ${hint} (a raw endpoint path starts with /)`,
    });
  }
  return out;
}

/** The names a manifest defines, listed once (a manifest may hold thousands), and its suggestion budget. */
interface Names {
  stepIds: readonly string[];
  steps: ReadonlySet<string>;
  vars: readonly string[];
  env: ReadonlySet<string>;
  suggester: Suggester;
}

/** The models that speak in conversations, by name. */
const CONVERSATIONAL: readonly string[] = MODEL_DEFINITIONS.filter((m) => m.conversation !== undefined).map((m) => m.name);

/** A conversational model's keys (replies, conversation, its message field) against the step's model. */
function checkConversation(step: Step, report: (path: (string | number)[], message: string) => void): void {
  const conversation = definitionOf(step.model)?.conversation;
  if (conversation === undefined) {
    const models = CONVERSATIONAL.join(' or ');
    if (step.replies) report(['replies'], `replies apply to ${models} steps only`);
    if (step.conversation) report(['conversation'], `conversation applies to ${models} steps only`);
    return;
  }
  if (typeof step.input?.[conversation.messageField] !== 'string')
    report(['input'], `${step.model} steps need input.${conversation.messageField}, the message to send`);
}

function checkReferences(id: string, step: Step, names: Names, report: (path: (string | number)[], message: string) => void): void {
  const check = (target: string, path: (string | number)[]): void => {
    if (target === id) report(path, `step "${clip(id)}" cannot depend on itself`);
    else if (!names.steps.has(target)) {
      const suggestion = names.suggester.nearest(target, names.stepIds);
      report(path, `no step ${JSON.stringify(clip(target))}${suggestion ? `; did you mean "${suggestion}"?` : ''}`);
    }
  };
  step.needs?.forEach((target, i) => check(target, ['needs', i]));
  const upstream = forEachStepOf(step);
  if (upstream) check(upstream, typeof step.for_each === 'string' ? ['for_each'] : ['for_each', 'step']);
}

function checkRef(
  ref: TemplateRef,
  step: Step,
  axes: ReadonlySet<string>,
  manifest: Manifest,
  names: Names,
  report: (message: string) => void,
): void {
  const [root, second] = ref.segments;
  if (typeof root !== 'string') return;
  const expression = `{{ ${clip(ref.expression)} }}`;
  if (root === 'vars') {
    if (typeof second === 'string' && !(manifest.vars && Object.hasOwn(manifest.vars, second))) {
      const suggestion = names.suggester.nearest(second, names.vars);
      report(`${expression}: no var ${JSON.stringify(clip(second))}${suggestion ? `; did you mean "${suggestion}"?` : ''}`);
    }
    return;
  }
  if (root === 'env') {
    if (typeof second !== 'string' || !names.env.has(second)) {
      report(`${expression}: environment variable ${clip(String(second))} is not allow-listed; add it to the manifest's env list`);
    }
    return;
  }
  if (root === 'run') {
    if (typeof second !== 'string' || !(RUN_VARIABLES as readonly string[]).includes(second) || ref.segments.length > 2) {
      report(`${expression}: a run variable is one of ${RUN_VARIABLES.map((v) => `run.${v}`).join(', ')}`);
    }
    return;
  }
  if (root === 'upstream') {
    if (!forEachStepOf(step)) report(`${expression}: upstream is only available in a for_each step`);
    return;
  }
  if (!axes.has(root)) {
    const known = [...axes, ...FIXED_ROOTS];
    const suggestion = names.suggester.nearest(root, known);
    report(
      `${expression}: ${JSON.stringify(clip(root))} is not an axis of this step, vars, env, run or upstream${suggestion ? `; did you mean "${suggestion}"?` : ''}`,
    );
  }
}

/** Roots a sink's URL or public URL may read: the same for every instance of a run. */
const SINK_ROOTS = ['run', 'vars', 'env'];

function checkSinkTemplate(text: string, manifest: Manifest, names: Names, report: (message: string) => void): void {
  let refs: TemplateRef[];
  try {
    refs = compileTemplate(text).refs;
  } catch (error) {
    if (!(error instanceof TemplateError)) throw error;
    report(error.message);
    return;
  }
  const noStep: Step = { model: 'character-sheet' };
  for (const ref of refs) {
    const root = ref.segments[0];
    if (typeof root === 'string' && SINK_ROOTS.includes(root)) checkRef(ref, noStep, new Set(), manifest, names, report);
    else report(`{{ ${clip(ref.expression)} }}: a sink may read only run, vars and env, which are the same for every instance of a run`);
  }
}

/**
 * Orders steps so that dependencies come first; reports each cycle once. Depth-first without
 * recursion: a chain of twenty thousand steps must not overflow the stack.
 */
function topologicalOrder(manifest: Manifest, report: (path: (string | number)[], message: string) => void): string[] {
  const deps = new Map<string, string[]>();
  for (const [id, step] of Object.entries(manifest.steps)) {
    const upstream = forEachStepOf(step);
    const targets = [...(step.needs ?? []), ...(upstream ? [upstream] : [])].filter((t) => t !== id && Object.hasOwn(manifest.steps, t));
    deps.set(id, targets);
  }
  const order: string[] = [];
  const done = new Set<string>();
  /** The path being walked, and where each of its steps sits on it. */
  const path: { id: string; next: number }[] = [];
  const onPath = new Map<string, number>();
  for (const start of deps.keys()) {
    if (done.has(start)) continue;
    path.push({ id: start, next: 0 });
    onPath.set(start, 0);
    while (path.length > 0) {
      const top = path[path.length - 1] as { id: string; next: number };
      const targets = deps.get(top.id) ?? [];
      if (top.next >= targets.length) {
        path.pop();
        onPath.delete(top.id);
        done.add(top.id);
        order.push(top.id);
        continue;
      }
      const target = targets[top.next++] as string;
      if (done.has(target)) continue;
      const from = onPath.get(target);
      if (from !== undefined) {
        report(['steps', target], `dependency cycle: ${formatCycle([...path.slice(from).map((f) => f.id), target])}`);
        continue;
      }
      onPath.set(target, path.length);
      path.push({ id: target, next: 0 });
    }
  }
  return order;
}

/** `a -> b -> a`; a long cycle shows its first steps and how many more there are. */
function formatCycle(ids: readonly string[]): string {
  const shown = ids.length <= 8 ? ids : [...ids.slice(0, 6), `... ${ids.length - 7} more`, ids[ids.length - 1] as string];
  return shown.map((id) => clip(id)).join(' -> ');
}

/** True when an http(s) URL names a user or a password before its host (`https://user:secret@host`). */
function hasUserInfo(text: string): boolean {
  const authority = /^[a-z][a-z0-9+.-]*:\/\/([^/?#]*)/i.exec(text)?.[1];
  return authority !== undefined && authority.includes('@');
}
