/**
 * The records of `journal.jsonl`, the run's source of truth.
 *
 * Every record is a JSON object with a `type` discriminator and an optional `at` (milliseconds since
 * the epoch, stamped by the journal when absent; resume uses it to relearn poll durations).
 * Objects are *loose*: a field added by a newer genpipe survives a read by an older one. Adding a
 * record type means adding one schema to `JournalRecord`; a reader that meets a type it does not
 * know reports that line (it never guesses what it meant).
 */
import * as z from 'zod';

const at = z.number().int().nonnegative().optional();
/** A SHA-256 in lowercase hex: a body hash, a file's digest. */
const SHA256_HEX = /^[0-9a-f]{64}$/;
/** A downloaded file's path: relative, `/`-separated, never `..`. */
function relativeInside(p: string): boolean {
  return !p.startsWith('/') && !p.split('/').includes('..') && !p.includes('\0') && !p.includes('\\');
}
const instance = z.string().min(1);

/**
 * The options a run was started with, recorded at each start, so a resume keeps the budget and limits it was given: a resume inherits
 * them unless a flag changes one, and that change is journaled by the next `run_started`.
 */
export const RecordedOptions = z.looseObject({
  /** US$ for the run's whole life; null: none given (the manifest's, if any, applies). */
  budgetUsd: z.number().nonnegative().nullable(),
  /** `--reuse`: earlier runs' results are linked instead of generated. */
  reuse: z.boolean(),
  /** Transient errors tolerated per process before it stops; null: the default. */
  retryBudget: z.number().int().nonnegative().nullable(),
  /** `--confirm-over` US$, null: the default. */
  confirmOverUsd: z.number().nonnegative().nullable(),
  /** `--retry` selection in force, and its round: an instance is retried at most once per round. */
  retry: z.array(z.enum(['failed', 'canceled', 'nsfw', 'unknown', 'rejected'])),
  retryRound: z.number().int().nonnegative(),
  /** Where instances run: `local`, or `redis` (a fleet). */
  executor: z.string().min(1),
});
export type RecordedOptions = z.infer<typeof RecordedOptions>;

/** A run began (or resumed with the same plan): which pipeline, and a hash of its plan. */
export const RunStartedRecord = z.looseObject({
  type: z.literal('run_started'),
  at,
  runId: z.string().min(1),
  pipeline: z.string(),
  planHash: z.string().min(1),
  /** Absent in journals written by older versions of genpipe. */
  options: RecordedOptions.optional(),
  /**
   * The budget this start enforced: its `--budget`, the last start's, or the manifest's
   * `defaults.budget_usd`; null for none. `options.budgetUsd` records only a flag given, which a
   * resume inherits. Absent in journals written by older versions of genpipe.
   */
  budgetUsd: z.number().nonnegative().nullable().optional(),
});

/** The budget a start enforced, as its run_started record says it (an older journal's: the flag it recorded). */
export function startedBudget(record: z.infer<typeof RunStartedRecord>): number | null {
  return record.budgetUsd !== undefined ? record.budgetUsd : (record.options?.budgetUsd ?? null);
}

/**
 * Written and synced before a credit-spending POST: after a crash, an intent without a
 * `submitted` record is a submit whose fate is unknown and must be reconciled, not resent blindly.
 */
export const IntentRecord = z.looseObject({
  type: z.literal('intent'),
  at,
  instance,
  model: z.string().min(1),
  /** null when the endpoint takes no Idempotency-Key (reliability.md #5). */
  idempotencyKey: z.string().min(1).nullable(),
  /** sha256 hex of the exact request body sent, so a retry can prove it sends the same body. */
  bodyHash: z.string().regex(SHA256_HEX),
  /**
   * The price this attempt was reserved at, in US$ (plan/price.ts attemptPriceUsd); null when it
   * had none (unpriced). Every money fold reads it here, so a price edited between two starts
   * changes nothing already sent. Absent from journals written before prices were journaled: the
   * step's price then stands in.
   */
  priceUsd: z.number().nonnegative().nullable().optional(),
});

/** How a submitted instance is tracked; one shape per kind of handle the service gives back. */
export const SubmissionHandle = z.discriminatedUnion('kind', [
  z.looseObject({ kind: z.literal('request'), requestId: z.string().min(1) }),
  z.looseObject({ kind: z.literal('job_set'), jobSetId: z.string().min(1) }),
  z.looseObject({ kind: z.literal('agent_message'), sessionId: z.string().min(1), messageId: z.string().min(1) }),
  /** An agent turn: the message waited for, the instance's first message, replies used so far. */
  z.looseObject({
    kind: z.literal('agent_turn'),
    sessionId: z.string().min(1),
    messageId: z.string().min(1),
    firstMessageId: z.string().min(1),
    repliesUsed: z.number().int().nonnegative(),
  }),
]);
export type SubmissionHandle = z.infer<typeof SubmissionHandle>;

/**
 * The service's answer to a submit. `adopted: true` (not in the schema's fields: a loose extra)
 * marks one recorded by `resume --adopt`, after the journal of the start that sent it could not.
 */
export const SubmittedRecord = z.looseObject({
  type: z.literal('submitted'),
  at,
  instance,
  handle: SubmissionHandle,
});

/** Terminal statuses only: an instance never leaves one (reliability.md #6). */
export const TERMINAL_STATUSES = ['completed', 'failed', 'nsfw', 'canceled'] as const;
export type TerminalStatus = (typeof TERMINAL_STATUSES)[number];

/** One result the service produced; the URL is where to fetch it, never where to store it. */
export const OutputRef = z.looseObject({
  url: z.string().min(1),
  contentType: z.string().optional(),
  /** The short name genpipe gives the file (`image-0`, `video`). */
  name: z.string().min(1).optional(),
  /** Content types accepted for it. */
  accept: z.array(z.string()).optional(),
});
export type OutputRef = z.infer<typeof OutputRef>;

export const StatusRecord = z.looseObject({
  type: z.literal('status'),
  at,
  instance,
  status: z.enum(TERMINAL_STATUSES),
  outputs: z.array(OutputRef),
  /** What downstream templates read as `upstream.outputs`. */
  result: z.record(z.string(), z.unknown()).optional(),
  error: z.string().optional(),
  /** Cost the service reported (agent llm_cost_usd), in US$. */
  actualCostUsd: z.number().optional(),
  /**
   * How long the request took, as well as tracking could tell (the midpoint between the last poll
   * that missed and the one that saw it end; exact from a webhook), in ms: later runs' poll prior.
   */
  durationMs: z.number().int().nonnegative().optional(),
});

/** A local file uploaded through the media flow, so a resumed run sends the same URL (and body). */
export const UploadedRecord = z.looseObject({
  type: z.literal('uploaded'),
  at,
  /** The local path as the manifest resolved it. */
  path: z.string().min(1),
  url: z.string().min(1),
});

/**
 * An nsfw instance re-rolled: the new body gets a new key. `seed` is the seed the new attempt sends,
 * one no other instance of the plan uses (absent in journals of older genpipe versions, which took
 * the next variation_index or seed).
 */
export const RerollRecord = z.looseObject({
  type: z.literal('reroll'),
  at,
  instance,
  attempt: z.number().int().positive(),
  seed: z.number().int().positive().optional(),
  /** Set when a `--retry rejected` round remade a rejected result (not an nsfw re-roll): that round. */
  round: z.number().int().nonnegative().optional(),
});

/**
 * `genpipe resume --retry`: a new attempt of an instance that ended failed, canceled, nsfw or
 * unknown, with a new Idempotency-Key; what came before is history.
 */
export const RetryRecord = z.looseObject({
  type: z.literal('retry'),
  at,
  instance,
  attempt: z.number().int().positive(),
  /** What the instance was before this attempt. */
  previous: z.enum(['failed', 'canceled', 'nsfw', 'unknown', 'rejected']),
  /** The `--retry` round (RecordedOptions.retryRound) that started it; absent in journals of older versions. */
  round: z.number().int().nonnegative().optional(),
  /**
   * `--resubmit-unknown`: the unknown submit is sent again as the same attempt (its key, and on a
   * fleet its job, stay): the attempt left behind keeps its money, and `attempt` changes no key.
   */
  sameKey: z.boolean().optional(),
  /**
   * A remake of a rejected result (`previous: rejected`): the output the decision judged, so the
   * same decision never remakes it twice, even where the remake's bytes are the same.
   */
  judged: z.string().optional(),
});

/**
 * `genpipe run --reuse`: an earlier run of the pipeline completed the same model and input, so its
 * files were linked into this run and nothing was sent or paid. `downloaded` records follow.
 */
export const ReusedRecord = z.looseObject({
  type: z.literal('reused'),
  at,
  instance,
  model: z.string().min(1),
  /** sha256 hex of the request body the earlier run sent. */
  bodyHash: z.string().regex(SHA256_HEX),
  fromRunId: z.string().min(1),
  outputs: z.array(OutputRef),
  result: z.record(z.string(), z.unknown()).optional(),
});

export const DownloadedRecord = z.looseObject({
  type: z.literal('downloaded'),
  at,
  instance,
  /** Index of the output in the `status` record's `outputs`. */
  output: z.number().int().nonnegative().optional(),
  /** Relative to the run directory, with `/` separators; never absolute, never `..`. */
  path: z.string().min(1).refine(relativeInside, 'must be a relative path inside the run directory'),
  sha256: z.string().regex(SHA256_HEX),
  size: z.number().int().nonnegative(),
  /**
   * An image's pixels, read from its first bytes as it was downloaded (absent for other files, and
   * in journals written before): a gallery made from the journal need not open the file to learn it.
   */
  width: z.number().int().positive().optional(),
  height: z.number().int().positive().optional(),
});

/**
 * A downloaded output copied to the step's storage sink: the object's key in the sink's
 * bucket, and what the store holds there. An instance with a sink is finished once each of its
 * downloaded outputs has one of these with the download's sha256; until then its upload is pending
 * and a resume sends it (and nothing to the generation service). Distinct from `uploaded`, which
 * is a local input image sent through the media flow.
 */
export const SinkUploadedRecord = z.looseObject({
  type: z.literal('sink_uploaded'),
  at,
  instance,
  /** Index of the output, as in its `downloaded` record. */
  output: z.number().int().nonnegative(),
  bucket: z.string().min(1),
  key: z.string().min(1),
  size: z.number().int().nonnegative(),
  sha256: z.string().regex(SHA256_HEX),
  /** The store's ETag, without quotes ('' when the store gave none). */
  etag: z.string(),
  /** True when the object was already there with this sha256 and nothing was sent. */
  skipped: z.boolean().optional(),
});

/**
 * An output copied to the sink (its `sink_uploaded` record, written just before) whose bytes in the store
 * genpipe could not check: the store's ETag is not an MD5 of them and the object was not read
 * back. The report says so; the object is not uploaded again for it.
 */
export const SinkUnverifiedRecord = z.looseObject({
  type: z.literal('sink_unverified'),
  at,
  instance,
  output: z.number().int().nonnegative(),
  bucket: z.string().min(1),
  key: z.string().min(1),
  sha256: z.string().regex(SHA256_HEX),
  /** Why, in words (no ETag to check, over the read-back limit). */
  reason: z.string(),
});

/**
 * An output not copied to the sink because another object, with other bytes, is at its key:
 * nothing was overwritten. `action` is the sink's `on_conflict`: `failed` leaves the upload to do
 * (a resume looks again: the object may have been moved), `skipped` settles it (the file stays on
 * disk only). A later `sink_uploaded` for the output replaces it.
 */
export const SinkConflictRecord = z.looseObject({
  type: z.literal('sink_conflict'),
  at,
  instance,
  output: z.number().int().nonnegative(),
  bucket: z.string().min(1),
  key: z.string().min(1),
  /** The file's. */
  sha256: z.string().regex(SHA256_HEX),
  size: z.number().int().nonnegative(),
  action: z.enum(['failed', 'skipped']),
  /** What is at the key: its size, ETag (no quotes) and `x-amz-meta-sha256` when it has one. */
  existingSize: z.number().int(),
  existingEtag: z.string(),
  existingSha256: z.string().optional(),
});

/**
 * Written before an upload that replaces an object at its key: what was there, so that the report
 * can name what was lost. `reason`: `on_conflict` (the sink's `on_conflict: overwrite`, the only
 * setting that replaces another's object) or `remade` (the object genpipe itself wrote for this
 * instance before a re-roll or a retry made the file again).
 */
export const SinkOverwriteRecord = z.looseObject({
  type: z.literal('sink_overwrite'),
  at,
  instance,
  output: z.number().int().nonnegative(),
  bucket: z.string().min(1),
  key: z.string().min(1),
  /** The file's, which replaces the object. */
  sha256: z.string().regex(SHA256_HEX),
  previousSize: z.number().int(),
  previousEtag: z.string(),
  previousSha256: z.string().optional(),
  reason: z.enum(['on_conflict', 'remade']),
});

/**
 * A multipart upload of an output begun, journaled before its first part: a process killed midway
 * leaves the id, from which a resume completes the same upload (or aborts it) rather than leaving
 * its parts in the store for good. Ended by the output's `sink_uploaded` or `sink_conflict`, or a
 * `sink_multipart_aborted` for this id.
 */
export const SinkMultipartRecord = z.looseObject({
  type: z.literal('sink_multipart'),
  at,
  instance,
  output: z.number().int().nonnegative(),
  bucket: z.string().min(1),
  key: z.string().min(1),
  uploadId: z.string().min(1),
  /** The file's: a resume of other bytes aborts this upload. */
  sha256: z.string().regex(SHA256_HEX),
  partSize: z.number().int().positive(),
  /** The store's x-amz-server-side-encryption for it, when it said (aws:kms: part ETags are no MD5s). */
  encryption: z.string().optional(),
  customerKey: z.boolean().optional(),
});

/** A part of a journaled multipart upload, landed: its number and the store's ETag (no quotes). */
export const SinkPartRecord = z.looseObject({
  type: z.literal('sink_part'),
  at,
  instance,
  output: z.number().int().nonnegative(),
  uploadId: z.string().min(1),
  part: z.number().int().min(1).max(10_000),
  etag: z.string(),
});

/** A journaled multipart upload aborted (or found gone): no resume uses it. */
export const SinkMultipartAbortedRecord = z.looseObject({
  type: z.literal('sink_multipart_aborted'),
  at,
  instance,
  output: z.number().int().nonnegative(),
  uploadId: z.string().min(1),
});

export const FailedRecord = z.looseObject({
  type: z.literal('failed'),
  at,
  instance,
  /** A stable error code (the `code` of a GenpipeError). */
  code: z.string().min(1),
  message: z.string(),
});

/**
 * The service refused a submit before creating anything (401: credentials; 402: balance): nothing
 * was charged, so the intent before it is settled, and a resume sends the instance again as new,
 * even a model without an Idempotency-Key (instead of reporting it as unknown).
 */
export const RefusedRecord = z.looseObject({
  type: z.literal('refused'),
  at,
  instance,
  /**
   * The error code: `unauthorized`, `insufficient_credits`, `rate_limited` or `session_busy` (refusals
   * the run stopped retrying), `not_sent` (no attempt reached the service: connection refused, DNS),
   * `model_access` (the account may not use the model), or `protocol` (a keyed submit's answer was not
   * the service's: resent with its key, it is charged at most once).
   */
  code: z.string().min(1),
});

/**
 * This instance's attempt, sent and not final, can no longer be followed, so it is unknown from here
 * on (up to its price): the service the run used is gone with everything it knew (a run on an
 * embedded emulator, resumed on a fresh one), or it answered about another request when asked
 * about this one (follow-check.ts). Journaled per instance, so the report reads it as the run does,
 * and `--retry unknown` sends it again.
 */
export const ForgottenRecord = z.looseObject({
  type: z.literal('forgotten'),
  at,
  instance,
  /** Why, when it was not the service forgetting everything: the mismatch's sentence. */
  why: z.string().optional(),
});

/** An agent conversation's session, so that a resumed run continues it instead of opening another. */
export const AgentSessionRecord = z.looseObject({
  type: z.literal('agent_session'),
  at,
  conversation: z.string().min(1),
  sessionId: z.string().min(1),
});

export const RunFinishedRecord = z.looseObject({
  type: z.literal('run_finished'),
  at,
  outcome: z.enum(['completed', 'failed', 'aborted', 'budget', 'stopped']).optional(),
});

/**
 * One delivery of a run's end notification (notify/deliver.ts), written after run_finished: the
 * target by its redacted URL only, whether it was delivered, after how many attempts.
 */
export const NotifyRecord = z.looseObject({
  type: z.literal('notify'),
  at,
  event: z.enum(['finish', 'failure', 'budget', 'interrupted']),
  target: z.string().min(1),
  format: z.enum(['json', 'slack', 'discord']),
  delivered: z.boolean(),
  attempts: z.number().int().nonnegative(),
  status: z.number().int().optional(),
  error: z.string().optional(),
});

export const JournalRecord = z.discriminatedUnion('type', [
  RunStartedRecord,
  IntentRecord,
  SubmittedRecord,
  StatusRecord,
  DownloadedRecord,
  FailedRecord,
  AgentSessionRecord,
  RunFinishedRecord,
  UploadedRecord,
  RerollRecord,
  RefusedRecord,
  ForgottenRecord,
  RetryRecord,
  ReusedRecord,
  NotifyRecord,
  SinkUploadedRecord,
  SinkUnverifiedRecord,
  SinkConflictRecord,
  SinkOverwriteRecord,
  SinkMultipartRecord,
  SinkPartRecord,
  SinkMultipartAbortedRecord,
]);
export type JournalRecord = z.infer<typeof JournalRecord>;
export type JournalRecordType = JournalRecord['type'];
export type JournalRecordOf<K extends JournalRecordType> = Extract<JournalRecord, { type: K }>;

export const JOURNAL_RECORD_TYPES: ReadonlySet<string> = new Set<JournalRecordType>([
  'run_started',
  'intent',
  'submitted',
  'status',
  'downloaded',
  'failed',
  'agent_session',
  'run_finished',
  'uploaded',
  'reroll',
  'refused',
  'forgotten',
  'retry',
  'reused',
  'notify',
  'sink_uploaded',
  'sink_unverified',
  'sink_conflict',
  'sink_overwrite',
  'sink_multipart',
  'sink_part',
  'sink_multipart_aborted',
]);

/** An intent's price: absent, null (unpriced) or a finite number at least 0. */
const optionalPrice = (v: unknown): boolean => v === undefined || v === null || (typeof v === 'number' && Number.isFinite(v) && v >= 0);

/**
 * True when `record` is certainly valid against JournalRecord; false means "ask the schema", not
 * "invalid". A run writes four records per instance (intent, submitted, status, downloaded), and
 * checking them through zod took about 6% of a 10,000-instance run's CPU at zero latency, for
 * records genpipe built itself; these four shapes are checked here by hand, conservatively (a safe
 * integer where the schema says int, a plain object for a record), and anything else goes to zod,
 * which also words the refusal. test/run/journal/journal-records.test.ts holds the two to each other.
 */
export function surelyValidRecord(record: unknown): boolean {
  if (!plainObject(record)) return false;
  const r = record;
  if (!optionalCount(r.at) || !nonEmpty(r.instance)) return false;
  switch (r.type) {
    case 'intent':
      return (
        nonEmpty(r.model) && (r.idempotencyKey === null || nonEmpty(r.idempotencyKey)) && isHash(r.bodyHash) && optionalPrice(r.priceUsd)
      );
    case 'submitted': {
      const handle = r.handle as Record<string, unknown> | undefined;
      return plainObject(handle) && handle.kind === 'request' && nonEmpty(handle.requestId);
    }
    case 'status':
      return (
        TERMINAL.has(r.status) &&
        Array.isArray(r.outputs) &&
        everyOutput(r.outputs) &&
        (r.result === undefined || plainObject(r.result)) &&
        (r.error === undefined || typeof r.error === 'string') &&
        (r.actualCostUsd === undefined || Number.isFinite(r.actualCostUsd)) &&
        optionalCount(r.durationMs)
      );
    case 'downloaded':
      return surelyValidDownload(r);
    default:
      return false;
  }
}

function surelyValidDownload(r: Record<string, unknown>): boolean {
  return (
    optionalCount(r.output) &&
    nonEmpty(r.path) &&
    relativeInside(r.path) &&
    isHash(r.sha256) &&
    count(r.size) &&
    optionalPositive(r.width) &&
    optionalPositive(r.height)
  );
}

const TERMINAL = new Set<unknown>(TERMINAL_STATUSES);
const nonEmpty = (v: unknown): v is string => typeof v === 'string' && v.length > 0;
const isHash = (v: unknown): boolean => typeof v === 'string' && SHA256_HEX.test(v);
const count = (v: unknown): boolean => Number.isSafeInteger(v) && (v as number) >= 0;
const optionalCount = (v: unknown): boolean => v === undefined || count(v);
const optionalPositive = (v: unknown): boolean => v === undefined || (count(v) && (v as number) > 0);
/** An object literal or JSON.parse's: the prototype Object's, string keys only. */
const plainObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && Object.getPrototypeOf(v) === Object.prototype && Object.getOwnPropertySymbols(v).length === 0;

function everyOutput(outputs: unknown[]): boolean {
  // Indexed, not every(): a hole in the array is an undefined output, which the schema refuses.
  for (let i = 0; i < outputs.length; i++) if (!surelyValidOutput(outputs[i])) return false;
  return true;
}

function surelyValidOutput(o: unknown): boolean {
  if (!plainObject(o) || !nonEmpty(o.url)) return false;
  if (o.contentType !== undefined && typeof o.contentType !== 'string') return false;
  if (o.name !== undefined && !nonEmpty(o.name)) return false;
  return o.accept === undefined || (Array.isArray(o.accept) && o.accept.every((a) => typeof a === 'string'));
}
