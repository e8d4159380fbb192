/**
 * A manifest's storage sinks (`output: {sink: ...}`), resolved for one run: which bucket, which key
 * prefix (its run variables and vars rendered), which endpoint and addressing. Pure: nothing here
 * loads the AWS SDK or reads a credential, so a run without a sink pays nothing for the feature.
 */
import { GenpipeError } from '../api/errors.js';
import type { LoadedManifest } from '../manifest/load.js';
import type { Sink } from '../manifest/schema.js';
import { compileTemplate, TemplateError, type Scope } from '../manifest/template.js';
import { isLoopbackHost } from '../util/loopback-host.js';
import type { StepSinkRecord } from '../run/files/run-dir.js';

/** Uploads in flight at once per sink when the manifest does not say. */
export const DEFAULT_SINK_CONCURRENCY = 8;
/** Files up to this size are read back when the store's ETag cannot vouch for them (`read_back_max_bytes`). */
export const DEFAULT_READ_BACK_MAX_BYTES = 64 * 1024 * 1024;

/**
 * When an upload is read back and hashed: `when_needed`, only when the store's ETag is not an MD5
 * genpipe can check (SSE-KMS, some S3-compatible stores); `always`, every file (a store whose ETag
 * is not trusted); `never`, such uploads are "unverified".
 */
export type ReadBack = 'never' | 'when_needed' | 'always';

/**
 * What an upload does when another object, with other bytes, is at its key: `fail` (default)
 * leaves it and the upload to do, `skip` leaves it for good, `overwrite` replaces it (journaled).
 */
export type OnConflict = 'fail' | 'skip' | 'overwrite';

export interface SinkConfig {
  bucket: string;
  /** The rendered key prefix, without a leading or trailing `/`; '' puts objects at the bucket's root. */
  prefix: string;
  /** The manifest's endpoint; undefined leaves it to the SDK (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile, else AWS). */
  endpoint: string | undefined;
  /** The manifest's region; undefined leaves it to the SDK's chain (AWS_REGION, the profile), else us-east-1. */
  region: string | undefined;
  /** Path-style addressing: asked for, or implied by a loopback endpoint (no DNS name per bucket there). */
  pathStyle: boolean;
  concurrency: number;
  /** Where the prefix is public (rendered, no trailing `/`): an output's URL is this + `/` + its path under outputs/. */
  publicBaseUrl: string | undefined;
  readBack: ReadBack;
  onConflict: OnConflict;
  /** Files above this size are never read back (unverified when their ETag cannot tell). */
  readBackMaxBytes: number;
}

/** What a sink's templates may read: the run's variables, vars and the allow-listed environment. */
export interface SinkScope {
  run: { id: string; startedAt: Date };
  vars: Readonly<Record<string, unknown>>;
  /** The allow-listed environment variables' values (the manifest's `env`). */
  env: Readonly<Record<string, string>>;
}

/** The run a sink is resolved for: its id and start, which `{{ run.* }}` read (a resume passes the run's own). */
export interface SinkRun {
  id: string;
  startedAt: Date;
}

/**
 * The sink each step uses: its own `output.sink`, else `defaults.output.sink`, else none. Steps
 * with no sink are absent from the map; an empty map means the run has no sink at all.
 */
export function resolveStepSinks(
  loaded: Pick<LoadedManifest, 'manifest'>,
  run: SinkRun,
  processEnv: NodeJS.ProcessEnv = process.env,
): Map<string, SinkConfig> {
  const { manifest } = loaded;
  const env: Record<string, string> = {};
  for (const name of manifest.env ?? []) {
    const value = processEnv[name];
    if (value !== undefined) env[name] = value;
  }
  const scope: SinkScope = { run, vars: manifest.vars ?? {}, env };
  const out = new Map<string, SinkConfig>();
  const fallback = manifest.defaults?.output?.sink;
  // One resolution per distinct sink written in the manifest: steps that share it share the config.
  const resolved = new Map<Sink, SinkConfig>();
  for (const [id, step] of Object.entries(manifest.steps)) {
    const sink = step.output?.sink ?? fallback;
    if (sink === undefined) continue;
    let config = resolved.get(sink);
    if (!config) {
      config = resolveSink(sink, scope, processEnv);
      resolved.set(sink, config);
    }
    out.set(id, config);
  }
  return out;
}

/**
 * One warning per sink whose prefix has no `{{ run.id }}` (`run.date` is not per run): which runs
 * write the same keys, and what `on_conflict` then does with the second run's uploads. Said by
 * `plan` and before a run starts.
 */
export function sinkPrefixWarnings(loaded: Pick<LoadedManifest, 'manifest'>): string[] {
  const { manifest } = loaded;
  const sinks = new Set<Sink>();
  if (manifest.defaults?.output?.sink !== undefined) sinks.add(manifest.defaults.output.sink);
  for (const step of Object.values(manifest.steps)) if (step.output?.sink !== undefined) sinks.add(step.output.sink);
  const out: string[] = [];
  for (const sink of sinks) {
    const long = typeof sink === 'string' ? { url: sink } : sink;
    const prefix = long.url.replace(/^s3:\/\/[^/]*/, '');
    if (/\{\{\s*run\.id\s*\}\}/.test(prefix)) continue;
    const collision = /\{\{\s*run\.started_at\s*\}\}/.test(prefix)
      ? 'two runs started in the same second write the same keys'
      : /\{\{\s*run\.date\s*\}\}/.test(prefix)
        ? 'two runs on the same day (a rerun, a schedule tick, another pipeline with the same step names) write the same keys'
        : 'every run (and any pipeline with the same step names) writes the same keys';
    const onConflict = ('on_conflict' in long ? long.on_conflict : undefined) ?? 'fail';
    const outcome =
      onConflict === 'overwrite'
        ? "the later run replaces the earlier run's objects (on_conflict: overwrite)"
        : onConflict === 'skip'
          ? "the later run leaves the earlier run's objects and keeps its own files on disk only (on_conflict: skip)"
          : "the later run's uploads stop as conflicts, nothing overwritten (on_conflict: fail)";
    out.push(`warning: the sink ${clipUrl(long.url)} has no {{ run.id }} in its prefix, so ${collision}: ${outcome}.`);
  }
  return out;
}

const clipUrl = (url: string): string => (url.length > 200 ? `${url.slice(0, 199)}…` : url);

/** True when the manifest names a sink anywhere: the only case where the SDK is ever loaded. */
export const manifestHasSink = (loaded: Pick<LoadedManifest, 'manifest'>): boolean =>
  loaded.manifest.defaults?.output?.sink !== undefined ||
  Object.values(loaded.manifest.steps).some((step) => step.output?.sink !== undefined);

/** One sink as written in the manifest (short or long form), rendered for the run. */
export function resolveSink(sink: Sink, scope: SinkScope, processEnv: NodeJS.ProcessEnv = process.env): SinkConfig {
  const long = typeof sink === 'string' ? { url: sink } : sink;
  const url = render(long.url, scope);
  const match = /^s3:\/\/([^/]+)(?:\/(.*))?$/.exec(url);
  if (!match) throw new GenpipeError('config', `The sink URL ${JSON.stringify(url.slice(0, 200))} is not s3://BUCKET/PREFIX.`);
  const bucket = match[1] as string;
  const prefix = trimSlashes(match[2] ?? '');
  if (prefix.split('/').some((part) => part === '..' || part === '.')) {
    throw new GenpipeError(
      'config',
      `The sink prefix ${JSON.stringify(prefix.slice(0, 200))} has a "." or ".." segment, which some stores resolve and others keep; name the folder plainly.`,
    );
  }
  const endpoint = 'endpoint' in long ? long.endpoint : undefined;
  // The endpoint the SDK will use, to tell whether it is on loopback (the SDK reads these itself).
  const effective = endpoint ?? processEnv.AWS_ENDPOINT_URL_S3 ?? processEnv.AWS_ENDPOINT_URL;
  const loopback = effective !== undefined && isLoopbackUrl(effective);
  const publicBase =
    'public_base_url' in long && long.public_base_url !== undefined
      ? render(long.public_base_url, scope, encodePath).replace(/\/+$/, '')
      : undefined;
  return {
    bucket,
    prefix,
    endpoint,
    region: 'region' in long ? long.region : undefined,
    pathStyle: loopback || ('path_style' in long && long.path_style === true),
    concurrency: ('concurrency' in long ? long.concurrency : undefined) ?? DEFAULT_SINK_CONCURRENCY,
    publicBaseUrl: publicBase,
    readBack: ('read_back' in long ? long.read_back : undefined) ?? 'when_needed',
    onConflict: ('on_conflict' in long ? long.on_conflict : undefined) ?? 'fail',
    readBackMaxBytes: ('read_back_max_bytes' in long ? long.read_back_max_bytes : undefined) ?? DEFAULT_READ_BACK_MAX_BYTES,
  };
}

/**
 * An output's object key: the prefix, `/`, and its path under `outputs/` (`outputs/sheets/a.png`
 * under prefix `campaign/2026-11-27` is `campaign/2026-11-27/sheets/a.png`).
 */
export function objectKey(config: Pick<SinkConfig, 'prefix'>, runRelativePath: string): string {
  const under = underOutputs(runRelativePath);
  return config.prefix === '' ? under : `${config.prefix}/${under}`;
}

/** `s3://BUCKET/KEY`, as outputs.csv shows it. */
export const sinkUri = (config: Pick<SinkConfig, 'bucket'>, key: string): string => `s3://${config.bucket}/${key}`;

/**
 * The public URL of an output, or undefined without `public_base_url`: the base (its template
 * values already percent-encoded, resolveSink), `/`, and the path under outputs/, each segment
 * percent-encoded. Every public link genpipe writes (outputs.csv, outputs.jsonl, the gallery) is this.
 */
export function publicUrl(config: Pick<SinkConfig, 'publicBaseUrl'>, runRelativePath: string): string | undefined {
  if (config.publicBaseUrl === undefined) return undefined;
  return `${config.publicBaseUrl}/${encodePath(underOutputs(runRelativePath))}`;
}

/**
 * A key's path as a URL's path: each `/`-separated segment percent-encoded, so that a `#`, `?`,
 * `%` or space is part of the object's name, never a fragment, a query or an escape.
 */
const encodePath = (path: string): string => path.split('/').map(encodeURIComponent).join('/');

/** A journaled output path (`outputs/<step>/<file>`, relative to the run directory) without `outputs/`. */
function underOutputs(runRelativePath: string): string {
  if (!runRelativePath.startsWith('outputs/'))
    throw new GenpipeError('internal', `The output path ${JSON.stringify(runRelativePath.slice(0, 200))} is not under outputs/.`);
  return runRelativePath.slice('outputs/'.length);
}

/** Two sinks that reach the same bucket the same way share one client and one preflight. */
export const storeIdentity = (config: SinkConfig): string =>
  JSON.stringify([config.endpoint ?? null, config.region ?? null, config.pathStyle, config.bucket]);

/** `interpolate`: applied to each template value inside the text (a public URL encodes it as a path). */
function render(text: string, scope: SinkScope, interpolate?: (value: string) => string): string {
  const startedAt = scope.run.startedAt.toISOString();
  const templateScope: Scope = {
    vars: scope.vars,
    env: scope.env,
    run: { id: scope.run.id, date: startedAt.slice(0, 10), started_at: startedAt },
  };
  // Load time checked every expression (manifest/load.ts); a value that renders to an object is JSON.
  let value: unknown;
  try {
    value = compileTemplate(text, [], interpolate === undefined ? {} : { interpolate }).render(templateScope);
  } catch (error) {
    if (!(error instanceof TemplateError)) throw error;
    // An allow-listed environment variable that is not set: the one thing load time cannot see.
    throw new GenpipeError('config', `The sink ${JSON.stringify(text.slice(0, 200))} cannot be rendered: ${error.message}.`);
  }
  return typeof value === 'string' ? value : JSON.stringify(value);
}

const trimSlashes = (text: string): string => text.replace(/^\/+|\/+$/g, '');

function isLoopbackUrl(text: string): boolean {
  try {
    return isLoopbackHost(new URL(text).hostname);
  } catch {
    return false;
  }
}

/**
 * What plan.json records of each step's sink (run-dir.ts StepSinkRecord): the bucket and rendered
 * prefix as `s3://…`, and the public URL of the prefix when it has one. No endpoint or credential.
 */
export function stepSinkRecords(
  loaded: Pick<LoadedManifest, 'manifest'>,
  run: SinkRun,
  processEnv: NodeJS.ProcessEnv = process.env,
): Map<string, StepSinkRecord> {
  const out = new Map<string, StepSinkRecord>();
  for (const [step, config] of resolveStepSinks(loaded, run, processEnv)) {
    const uri = config.prefix === '' ? `s3://${config.bucket}` : sinkUri(config, config.prefix);
    out.set(step, config.publicBaseUrl === undefined ? { uri } : { uri, public_url: config.publicBaseUrl });
  }
  return out;
}
