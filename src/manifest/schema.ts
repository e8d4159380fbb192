/**
 * The manifest language: one YAML document describing generation steps and the sweeps over them.
 * This zod schema is the single definition; `schemas/manifest.schema.json` is generated from it
 * (`npm run schemas`) so that editors autocomplete manifests.
 */
import * as z from 'zod';
import { VARIATION_INDEX_MAX } from '../api/wire.js';
import { MODEL_NAMES } from '../models/registry.js';

/** The environment variables genpipe and the AWS SDK read credentials from (api/credentials.ts, sinks). */
export const CREDENTIAL_VARIABLES: ReadonlySet<string> = new Set([
  'HF_KEY',
  'HF_CREDENTIALS',
  'HF_API_KEY',
  'HF_API_SECRET',
  'AWS_SECRET_ACCESS_KEY',
  'AWS_SESSION_TOKEN',
]);

/** Built-in model names (one definition each in src/models/); a step may also name a raw endpoint path such as `/vendor/new-model`. */
export { MODEL_NAMES, type ModelName } from '../models/registry.js';

const identifier = (what: string) =>
  z
    .string()
    .regex(/^[a-z][a-z0-9_-]{0,62}$/, `${what} must start with a lowercase letter and use only a-z, 0-9, - and _ (at most 63 characters)`);

const scalar = z.union([z.string(), z.number(), z.boolean(), z.null()]);

/** An integer range, both ends included: `{range: {from: 1, to: 100, step: 1}}`. */
export const RangeAxis = z.strictObject({
  range: z
    .strictObject({
      from: z.int().min(-VARIATION_INDEX_MAX).max(VARIATION_INDEX_MAX),
      to: z.int().min(-VARIATION_INDEX_MAX).max(VARIATION_INDEX_MAX),
      step: z.int().min(1).max(VARIATION_INDEX_MAX).optional(),
    })
    .refine((r) => r.to >= r.from, { message: 'range.to must be at least range.from' }),
});

/**
 * Rows of a CSV file (header row required), optionally filtered: `{csv: data/rows.csv, where: {region: EU}}`.
 * With `key: sku`, instance ids, file names and idempotency keys use that column instead of the
 * line number, so editing the file never renumbers instances.
 */
export const CsvAxis = z.strictObject({
  csv: z.string().min(1),
  where: z.record(z.string(), z.union([scalar, z.array(scalar).min(1)])).optional(),
  /** A column whose values name the rows: non-empty and unique among the rows kept. */
  key: z.string().min(1).optional(),
  /**
   * Columns whose empty cells are sent as they are, on purpose. Any other column a step's input
   * reads (`{{ row.headline }}`) must have a value in every row kept: an empty one is refused at
   * plan time with its row and column.
   */
  allow_empty: z.array(z.string().min(1)).min(1).optional(),
  /** The field separator, one character. Default ",". */
  delimiter: z
    .string()
    .length(1, 'delimiter is one character, such as ";" or a tab')
    .refine((d) => !/["\r\n]/.test(d), 'a delimiter cannot be a quote or a line break')
    .optional(),
});

/** Marketing presets resolved live from the preset catalog at plan time: `{presets: {name: "Summer*", limit: 3}}`. */
export const PresetsAxis = z.strictObject({
  presets: z.strictObject({
    name: z.string().min(1).optional(),
    limit: z.int().min(1).max(10_000).optional(),
  }),
});

/** One sweep axis: an explicit list, an integer range, CSV rows or catalog presets. */
export const Axis = z.union([z.array(z.union([scalar, z.record(z.string(), z.unknown())])).min(1), RangeAxis, CsvAxis, PresetsAxis]);
export type Axis = z.infer<typeof Axis>;

const FailurePolicy = z.enum(['continue', 'stop']);
/** nsfw: skip the instance, or re-roll it with the next variation_index (or seed). */
const NsfwPolicy = z.enum(['skip', 'reroll']);

const Polling = z.strictObject({
  /** First backoff delay before any duration is learned, in ms. Default 1,000. */
  initial_ms: z.int().min(100).max(600_000).optional(),
  /** Longest delay between two polls of one request, in ms. Default 15,000. */
  max_ms: z.int().min(100).max(3_600_000).optional(),
  /** Shortest delay between two polls of one request, in ms; protects the service. Default 500. */
  min_ms: z.int().min(10).max(600_000).optional(),
});

/**
 * `s3://BUCKET/PREFIX`: the bucket (S3's naming rules: 3 to 63 characters, lowercase letters,
 * digits, dots and hyphens, a letter or digit at each end), then an optional key prefix, which may
 * use `{{ run.date }}`, `{{ run.id }}`, `{{ run.started_at }}`, `{{ vars.NAME }}` and allow-listed
 * `{{ env.NAME }}`. Each output's object key is PREFIX + "/" + its path under `outputs/`.
 */
export const SINK_URL = /^s3:\/\/[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](\/[^\\\u0000-\u001f]*)?$/;
const SinkUrl = z.string().regex(SINK_URL, 'a sink URL is s3://BUCKET/PREFIX, the bucket 3 to 63 characters of a-z, 0-9, dots and hyphens');
/** An http(s) URL, checked here so that validate refuses a typo at its line rather than the run. */
const HttpUrl = (what: string) => z.string().regex(/^https?:\/\/[^\s/?#]+(\/[^\s]*)?$/, `${what} is an http:// or https:// URL`);

/**
 * Where a step's output files are copied once downloaded: an S3-compatible bucket (AWS S3,
 * Cloudflare R2, MinIO, Backblaze B2...). The short form is the URL alone. Credentials are never
 * in the manifest: they come from the AWS SDK's default chain (environment, shared files, profiles).
 */
export const Sink = z.union([
  SinkUrl,
  z.strictObject({
    url: SinkUrl,
    /** The store's endpoint, for anything but AWS S3 (R2, MinIO...). Default: the SDK's (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else AWS). */
    endpoint: HttpUrl('endpoint').optional(),
    /** Default: the SDK's (AWS_REGION, the profile's), else us-east-1; R2 takes "auto". */
    region: z
      .string()
      .regex(/^[a-z0-9-]{1,40}$/, 'a region is lowercase letters, digits and hyphens, such as us-east-1 or auto')
      .optional(),
    /** Path-style addressing (endpoint/BUCKET/key); always on for a loopback endpoint. */
    path_style: z.boolean().optional(),
    /** Uploads in flight at once. Default 8. */
    concurrency: z.int().min(1).max(64).optional(),
    /**
     * Where the prefix is public, for links: an output's URL is this + "/" + its path under outputs/
     * (`https://cdn.example.com/{{ run.date }}`). It may read what the URL's prefix may.
     */
    public_base_url: z
      .string()
      .regex(
        /^https?:\/\/[^\s/?#{]+(\/([^\s{]|\{\{[^}]*\}\})*)?$/,
        'public_base_url is an http:// or https:// URL (its path may use {{ run.date }}, {{ vars.NAME }}...)',
      )
      .optional(),
    /**
     * When an upload is read back and hashed to check the store kept the file's bytes:
     * `when_needed` (default), when the store's ETag is not an MD5 genpipe can check; `always`; `never`.
     */
    read_back: z.enum(['never', 'when_needed', 'always']).optional(),
    /**
     * Another object already at a key, with other bytes: `fail` (default) keeps it and reports the
     * conflict, `skip` keeps it and goes on, `overwrite` replaces it (journaled per object).
     */
    on_conflict: z.enum(['fail', 'skip', 'overwrite']).optional(),
    /** Files above this many bytes are never read back. Default 67108864 (64 MiB). */
    read_back_max_bytes: z.int().min(0).max(Number.MAX_SAFE_INTEGER).optional(),
  }),
]);
export type Sink = z.infer<typeof Sink>;

export const Step = z.strictObject({
  /** A built-in model, or a raw endpoint path (starting with /) for models the catalog adds later. */
  model: z.union([
    z.enum(MODEL_NAMES),
    z.string().regex(/^\/[A-Za-z0-9._~\-/{}]+$/, 'a raw model path must start with / and contain only URL path characters'),
  ]),
  /** The templated request body (for dop, soul and speak: the `params` object). */
  input: z.record(z.string(), z.unknown()).optional(),
  /** Sweep axes, crossed (cartesian product) unless zipped. */
  matrix: z.record(identifier('an axis name'), Axis).optional(),
  /** Groups of axes that advance together instead of being crossed; each group's axes must have the same length. */
  zip: z.array(z.array(identifier('an axis name')).min(2)).optional(),
  /** GitHub-Actions-like: extend matching combinations, or add new ones. */
  include: z.array(z.record(z.string(), z.unknown())).optional(),
  /** GitHub-Actions-like: drop every combination that matches all of an entry's values. */
  exclude: z
    .array(z.record(z.string(), z.unknown()).refine((e) => Object.keys(e).length > 0, 'an exclude entry needs at least one key'))
    .optional(),
  /** Steps whose every instance must finish before this step starts. */
  needs: z.array(identifier('a step id')).optional(),
  /**
   * One instance per completed instance of that step, crossed with this step's own axes;
   * `{step: sheets, only: approved}` follows only the instances approved in `genpipe review`.
   */
  for_each: z
    .union([identifier('a step id'), z.strictObject({ step: identifier('a step id'), only: z.literal('approved').optional() })])
    .optional(),
  concurrency: z.int().min(1).max(1_000).optional(),
  retries: z.int().min(0).max(20).optional(),
  on_failure: FailurePolicy.optional(),
  on_nsfw: NsfwPolicy.optional(),
  /** Agent steps: scripted replies to the agent's clarifying questions, in order. */
  replies: z.array(z.string().min(1)).optional(),
  /** Agent steps: the logical conversation (templated); instances with the same value share one session. */
  conversation: z.string().min(1).optional(),
  /** Overrides the price table for this step, in US$ per instance. */
  price_usd: z.number().min(0).optional(),
  /**
   * How output files are named: `{filename: "{{ row.sku }}_{{ preset.name }}_{{ seed }}"}` (a
   * template, sanitised; two instances of the step may not get the same name). Default: the instance id.
   * `sink` copies the step's files to a bucket (see Sink), overriding `defaults.output.sink`.
   */
  output: z.strictObject({ filename: z.string().min(1).max(1_000).optional(), sink: Sink.optional() }).optional(),
  /**
   * The contact sheet's grid (gallery.html): which axis runs down the rows, which across, and which
   * make pages. Default: the axis with the most values as rows, the next as columns, the rest pages.
   */
  gallery: z
    .strictObject({
      rows: z.string().min(1).optional(),
      cols: z.string().min(1).optional(),
      pages: z.array(z.string().min(1)).optional(),
    })
    .optional(),
});
export type Step = z.infer<typeof Step>;

export const Defaults = z.strictObject({
  concurrency: z.int().min(1).max(1_000).optional(),
  /** In-flight limit per model (by model name or raw path), shared by every step of that model. */
  model_concurrency: z.record(z.string(), z.int().min(1).max(1_000)).optional(),
  retries: z.int().min(0).max(20).optional(),
  polling: Polling.optional(),
  /** `dir`: where run directories go; `sink`: where every step's outputs are copied, unless a step has its own. */
  output: z.strictObject({ dir: z.string().min(1).optional(), sink: Sink.optional() }).optional(),
  budget_usd: z.number().positive().optional(),
  on_failure: FailurePolicy.optional(),
  on_nsfw: NsfwPolicy.optional(),
  max_failures: z.int().min(1).optional(),
});
export type Defaults = z.infer<typeof Defaults>;

/** When a run's notifications go out: how it ended (notify/notify-message.ts maps a run's outcome to one). */
export const NOTIFY_EVENTS = ['finish', 'failure', 'budget', 'interrupted'] as const;
export const NOTIFY_FORMATS = ['json', 'slack', 'discord'] as const;

/** One place a run's end is posted to: a URL, or the environment variable holding one (a Slack or Discord webhook URL is a secret). */
export const NotifyTarget = z
  .strictObject({
    url: z.string().min(1).optional(),
    url_env: z
      .string()
      .regex(/^[A-Z_][A-Z0-9_]*$/, 'must be an environment variable name in upper case')
      .optional(),
    /** Default: every event. */
    on: z.array(z.enum(NOTIFY_EVENTS)).min(1).optional(),
    /** json (genpipe's summary), slack or discord (their incoming webhooks' message shape). Default json. */
    format: z.enum(NOTIFY_FORMATS).optional(),
  })
  .refine((t) => (t.url === undefined) !== (t.url_env === undefined), 'give exactly one of url and url_env');
export type NotifyTarget = z.infer<typeof NotifyTarget>;

export const Manifest = z.strictObject({
  /** For editors; ignored by genpipe. */
  $schema: z.string().optional(),
  version: z.literal(1),
  name: identifier('the pipeline name'),
  description: z.string().optional(),
  defaults: Defaults.optional(),
  /** Values templates can read as `{{ vars.NAME }}`. */
  vars: z.record(z.string(), z.unknown()).optional(),
  /**
   * Environment variables templates may read as `{{ env.NAME }}`; any other is refused. Never one
   * that holds credentials: a template's value is sent to the service, printed by `plan` and kept
   * in plan.json, where no secret may go.
   */
  env: z
    .array(
      z
        .string()
        .regex(/^[A-Z_][A-Z0-9_]*$/, 'must be an environment variable name in upper case')
        .refine((name) => !CREDENTIAL_VARIABLES.has(name), {
          error: (issue) =>
            `${String(issue.input)} holds credentials, which templates may not read: a template's value is sent, printed and recorded`,
        }),
    )
    .optional(),
  /** US$ per instance, by model name or raw path; character-sheet is US$0.05 unless overridden. At most US$10,000, so no sum overflows. */
  prices: z
    .record(
      // A misspelt model name would price nothing, silently (a run then says it spent US$0.00).
      z.string().refine((key) => key.startsWith('/') || (MODEL_NAMES as readonly string[]).includes(key), {
        error: (issue) => `${String(issue.input)} is not a model: prices are keyed by ${MODEL_NAMES.join(', ')} or a raw model path (/...)`,
      }),
      z.number().min(0).max(10_000),
    )
    .optional(),
  steps: z.record(identifier('a step id'), Step).refine((steps) => Object.keys(steps).length > 0, 'a manifest needs at least one step'),
  /** Where to post a summary when a run ends (at most 10 places). */
  notify: z.array(NotifyTarget).min(1).max(10).optional(),
});
export type Manifest = z.infer<typeof Manifest>;

/** The step a for_each step follows, however it is written. */
export const forEachStepOf = (step: Pick<Step, 'for_each'>): string | undefined =>
  typeof step.for_each === 'string' ? step.for_each : step.for_each?.step;

/** `approved` when a for_each step follows only the upstream instances approved in review. */
export const forEachOnlyOf = (step: Pick<Step, 'for_each'>): 'approved' | undefined =>
  typeof step.for_each === 'object' ? step.for_each.only : undefined;
