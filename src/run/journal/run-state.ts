/**
 * The state of a run, rebuilt from its journal. The journal is the source of truth: everything a
 * resumed run decides (skip, re-attach, resubmit with the same key, or report as unknown) comes
 * from here, never from what the service might say.
 */
import type { JournalRecord, JournalRecordOf, RecordedOptions, TerminalStatus } from './journal-records.js';
import { streamJournalBatches, type CorruptLine } from './journal.js';
import { createHash } from 'node:crypto';
import type { Submission } from '../../models/adapter.js';
import { moneyOf, settleAttempt, type EarlierAttempts } from '../attempt/attempt-money.js';
import { jsonUsd } from '../../util/format-usd.js';

export interface InstanceState {
  /** The last intent: a credit-spending POST was about to be sent with this key and body hash. */
  intent?: JournalRecordOf<'intent'> | undefined;
  /** What the service answered to the submit (request id, job set, agent turn). */
  submission?: Submission | undefined;
  submittedAt?: number | undefined;
  final?: JournalRecordOf<'status'> | undefined;
  failed?: JournalRecordOf<'failed'> | undefined;
  /** Downloaded files by output index (created with the first one: most states never need a Map). */
  downloads?: Map<number, JournalRecordOf<'downloaded'>> | undefined;
  /** Outputs copied to the step's storage sink, by output index (created with the first one). */
  sinkUploads?: Map<number, JournalRecordOf<'sink_uploaded'>> | undefined;
  /** Outputs in the sink whose bytes there could not be checked, by output index (sinkUnverified()). */
  sinkUnverified?: Map<number, JournalRecordOf<'sink_unverified'>> | undefined;
  /** Outputs not uploaded because another object is at their key, by output index (sinkConflicts()). */
  sinkConflicts?: Map<number, JournalRecordOf<'sink_conflict'>> | undefined;
  /** Objects replaced under `on_conflict: overwrite`, by output index. */
  sinkOverwrites?: Map<number, JournalRecordOf<'sink_overwrite'>> | undefined;
  /**
   * The objects genpipe itself wrote for this instance, by key: what the last upload there sent
   * (sha256 and the store's ETag). Kept across a re-roll or a retry, which make the files again:
   * the new file may replace these, never another's object.
   */
  sinkWritten?: Map<string, { sha256: string; etag: string }> | undefined;
  /** Multipart uploads begun and not ended, by output index, with their parts landed (number → ETag). */
  sinkMultipart?: Map<number, { record: JournalRecordOf<'sink_multipart'>; parts: Map<number, string> }> | undefined;
  rerolls: number;
  /** The seed the last re-roll sends (journaled), when it was journaled. */
  rerollSeed?: number | undefined;
  /** `--retry` attempts so far: part of the Idempotency-Key, so each attempt has its own. */
  retries: number;
  /** The run whose result this instance reuses (`--reuse`): completed at US$0 in this run. */
  reusedFrom?: string | undefined;
  /** Model and body hash of a reused result, so a later run can reuse it in turn. */
  reusedInput?: { model: string; bodyHash: string } | undefined;
  /** A corrupt journal line, accepted, may have been this instance's: never treat it as fresh. */
  suspect?: boolean | undefined;
  /** What the attempts left behind by re-rolls and retries cost (attempt-money.ts): money is per attempt. */
  earlier?: EarlierAttempts | undefined;
  /** The output a review judged that this instance was last remade for (a model without a seed). */
  remadeJudged?: string | undefined;
  /** The last `--retry` round that started this instance over (a retry, or a rejected result remade). */
  retryRound?: number | undefined;
}

export interface RunState {
  runId: string | undefined;
  planHash: string | undefined;
  instances: Map<string, InstanceState>;
  /** Agent conversation → session id. */
  sessions: Map<string, string>;
  /** Local path → uploaded URL. */
  uploads: Map<string, string>;
  /** A corrupt line, accepted, names no instance: it could have been any instance's. */
  suspectAll: boolean;
  /** The options of the run's last start (its last `run_started` that recorded them). */
  options: RecordedOptions | undefined;
  /** True once a `run_started` record was read: a journal without one is not a run's. */
  started: boolean;
  /** How the run's last start ended, when it ended (a start killed before its `run_finished` leaves this undefined). */
  lastOutcome: JournalRecordOf<'run_finished'>['outcome'];
  /** When the run first started (its first `run_started` record's time), when the journal says. */
  firstStartedAt: number | undefined;
}

export function emptyRunState(): RunState {
  return {
    runId: undefined,
    planHash: undefined,
    instances: new Map(),
    sessions: new Map(),
    uploads: new Map(),
    suspectAll: false,
    options: undefined,
    started: false,
    lastOutcome: undefined,
    firstStartedAt: undefined,
  };
}

function instanceOf(state: RunState, id: string): InstanceState {
  let entry = state.instances.get(id);
  if (!entry) {
    entry = { rerolls: 0, retries: 0 };
    state.instances.set(id, entry);
  }
  return entry;
}

/** Attempts sent and not final: what a service that forgot everything leaves unknown (a `forgotten` record each). */
export function sentNotFinal(state: RunState): string[] {
  return [...state.instances]
    .filter(([, e]) => !e.final && !e.failed && e.suspect !== true && (e.submission !== undefined || e.intent !== undefined))
    .map(([id]) => id);
}

/** Applies one record. Terminal states are final: a later record never moves an instance out of one. */
export function applyRecord(state: RunState, record: JournalRecord): void {
  switch (record.type) {
    case 'run_started':
      state.runId ??= record.runId;
      state.planHash ??= record.planHash;
      state.started = true;
      state.firstStartedAt ??= record.at;
      state.lastOutcome = undefined;
      if (record.options) state.options = record.options;
      return;
    case 'forgotten': {
      // The service forgot the attempt: no request is left to follow, so it is unknown (ForgottenRecord).
      const entry = instanceOf(state, record.instance);
      if (entry.final || entry.failed) return;
      entry.submission = undefined;
      entry.suspect = true;
      return;
    }
    case 'intent': {
      const entry = instanceOf(state, record.instance);
      if (entry.final) return;
      entry.intent = record;
      entry.submission = undefined;
      return;
    }
    case 'submitted': {
      const entry = instanceOf(state, record.instance);
      if (entry.final) return;
      entry.submission = record.handle as Submission;
      entry.submittedAt ??= record.at;
      return;
    }
    case 'status': {
      const entry = instanceOf(state, record.instance);
      entry.final ??= record;
      return;
    }
    case 'downloaded': {
      const entry = instanceOf(state, record.instance);
      (entry.downloads ??= new Map()).set(record.output ?? 0, record);
      return;
    }
    case 'sink_uploaded': {
      const entry = instanceOf(state, record.instance);
      (entry.sinkUploads ??= new Map()).set(record.output, record);
      // A skipped upload found the bytes there: whoever wrote them, genpipe did not, this time.
      if (!record.skipped) (entry.sinkWritten ??= new Map()).set(record.key, { sha256: record.sha256, etag: record.etag });
      // An upload's check follows its record: a new upload starts with none.
      entry.sinkUnverified?.delete(record.output);
      entry.sinkConflicts?.delete(record.output);
      entry.sinkMultipart?.delete(record.output);
      return;
    }
    case 'sink_conflict': {
      const entry = instanceOf(state, record.instance);
      (entry.sinkConflicts ??= new Map()).set(record.output, record);
      entry.sinkMultipart?.delete(record.output);
      return;
    }
    case 'sink_multipart': {
      const entry = instanceOf(state, record.instance);
      (entry.sinkMultipart ??= new Map()).set(record.output, { record, parts: new Map() });
      return;
    }
    case 'sink_part': {
      const upload = state.instances.get(record.instance)?.sinkMultipart?.get(record.output);
      if (upload?.record.uploadId === record.uploadId) upload.parts.set(record.part, record.etag);
      return;
    }
    case 'sink_multipart_aborted': {
      const multipart = state.instances.get(record.instance)?.sinkMultipart;
      if (multipart?.get(record.output)?.record.uploadId === record.uploadId) multipart.delete(record.output);
      return;
    }
    case 'sink_overwrite': {
      const entry = instanceOf(state, record.instance);
      (entry.sinkOverwrites ??= new Map()).set(record.output, record);
      return;
    }
    case 'sink_unverified': {
      const entry = instanceOf(state, record.instance);
      (entry.sinkUnverified ??= new Map()).set(record.output, record);
      return;
    }
    case 'failed': {
      const entry = instanceOf(state, record.instance);
      if (!entry.final) entry.failed = record;
      return;
    }
    case 'refused': {
      // Refused before anything was created: the intent is answered, the instance is as if never sent.
      const entry = instanceOf(state, record.instance);
      if (entry.final || entry.submission) return;
      entry.intent = undefined;
      return;
    }
    case 'reroll': {
      const entry = instanceOf(state, record.instance);
      // A re-roll starts the instance over with a new body and key; what came before is history.
      entry.rerolls = Math.max(entry.rerolls, record.attempt);
      if (record.seed !== undefined) entry.rerollSeed = record.seed;
      if (record.round !== undefined) entry.retryRound = record.round;
      startOver(entry);
      return;
    }
    case 'retry': {
      const entry = instanceOf(state, record.instance);
      // Only an outcome --retry may retry is left behind: a completed result is never thrown away,
      // unless the review rejected it (a model without a seed is remade as a new attempt).
      if (entry.final?.status === 'completed' && record.previous !== 'rejected') return;
      if (!record.sameKey) entry.retries = Math.max(entry.retries, record.attempt);
      if (record.round !== undefined) entry.retryRound = record.round;
      if (record.judged !== undefined) entry.remadeJudged = record.judged;
      startOver(entry);
      // The user chose to send it again: a corrupt line it may have had no longer holds it back.
      entry.suspect = false;
      return;
    }
    case 'reused': {
      const entry = instanceOf(state, record.instance);
      if (entry.final) return;
      entry.final = {
        type: 'status',
        instance: record.instance,
        status: 'completed',
        outputs: record.outputs,
        ...(record.result === undefined ? {} : { result: record.result }),
      };
      entry.reusedFrom = record.fromRunId;
      entry.reusedInput = { model: record.model, bodyHash: record.bodyHash };
      return;
    }
    case 'agent_session':
      state.sessions.set(record.conversation, record.sessionId);
      return;
    case 'uploaded':
      state.uploads.set(record.path, record.url);
      return;
    case 'run_finished':
      state.lastOutcome = record.outcome;
      return;
    case 'notify':
      return;
  }
}

/** A re-roll or a retry starts the instance over: a new body or key; what came before is history. */
function startOver(entry: InstanceState): void {
  settleAttempt(entry);
  entry.intent = undefined;
  entry.submission = undefined;
  entry.submittedAt = undefined;
  entry.final = undefined;
  entry.failed = undefined;
  entry.downloads = undefined;
  entry.sinkUploads = undefined;
  entry.sinkUnverified = undefined;
  entry.sinkConflicts = undefined;
  entry.sinkOverwrites = undefined;
}

/**
 * The downloaded outputs of an instance whose step has a sink that are not in it yet: no
 * `sink_uploaded` record for that output, or one for other bytes (the file was made again). An
 * instance is finished when this is empty; a resume uploads these and sends nothing to the service.
 */
export function pendingSinkUploads(
  entry: Pick<InstanceState, 'downloads' | 'sinkUploads'> & Partial<Pick<InstanceState, 'sinkConflicts'>>,
): JournalRecordOf<'downloaded'>[] {
  if (!entry.downloads) return [];
  const out: JournalRecordOf<'downloaded'>[] = [];
  for (const [output, download] of entry.downloads) {
    if (entry.sinkUploads?.get(output)?.sha256 === download.sha256) continue;
    // `on_conflict: skip` settled it: the object at the key stays, the file on disk only.
    const conflict = entry.sinkConflicts?.get(output);
    if (conflict?.action === 'skipped' && conflict.sha256 === download.sha256) continue;
    out.push(download);
  }
  return out.sort((a, b) => (a.output ?? 0) - (b.output ?? 0));
}

/** How a resumed run treats an instance. */
export type ResumeAction =
  | { kind: 'fresh' }
  | { kind: 'done'; status: TerminalStatus }
  | { kind: 'failed' }
  /** Submitted: follow the request id, never submit again. */
  | { kind: 'reattach'; submission: Submission }
  /** An intent with no answer recorded: resend with the same key (idempotent models only). */
  | { kind: 'resubmit_same_key'; key: string }
  /** An intent with no answer and no key: it may or may not exist at the service. */
  | { kind: 'unknown' };

/**
 * A corrupt journal line was accepted (`--accept-corrupt`): the instance it provably belongs to, or
 * every instance when it names none, may have lost a record (an intent, a re-roll, a retry), so
 * it is unknown until it is known to be submitted or final.
 */
export function markCorrupt(state: RunState, instance: string | undefined): void {
  if (instance === undefined) state.suspectAll = true;
  else instanceOf(state, instance).suspect = true;
}

export function resumeAction(entry: InstanceState | undefined, idempotentSubmit: boolean, suspectAll = false): ResumeAction {
  const suspect = entry ? (entry.suspect ?? (suspectAll && entry.retries === 0)) : suspectAll;
  if (!entry) return suspect ? { kind: 'unknown' } : { kind: 'fresh' };
  if (entry.final) return { kind: 'done', status: entry.final.status };
  if (entry.failed) return { kind: 'failed' };
  if (entry.submission) return { kind: 'reattach', submission: entry.submission };
  if (entry.intent) {
    const key = entry.intent.idempotencyKey;
    return idempotentSubmit && key !== null && !suspect ? { kind: 'resubmit_same_key', key } : { kind: 'unknown' };
  }
  return suspect ? { kind: 'unknown' } : { kind: 'fresh' };
}

/**
 * Replays a journal file without holding its records: each is applied as it is read. With `lean`,
 * only what a reader of outcomes (the cost report, `genpipe runs`) needs is kept: an intent is
 * reduced to its model and price, a final status to the status and the service's cost, downloads are skipped,
 * and the reduced records are shared (frozen) between instances, so a lean state holds little more
 * than each instance's id and request id. A resume needs the whole records: it replays without `lean`.
 */
export async function replayFile(path: string, options: { lean?: boolean } = {}): Promise<RunState> {
  const state = emptyRunState();
  const intents = new Map<string, JournalRecordOf<'intent'>>();
  const finals = new Map<string, JournalRecordOf<'status'>>();
  // A lean reader never looks at downloads: those lines are not even parsed.
  // A damaged line naming its instance (accepted by `--accept-corrupt`) marks it as a resume does.
  const damaged = (corrupt: CorruptLine): string | undefined => corrupt.instance;
  for await (const item of streamRecordsAndDamage(path, options.lean ? { skipTypes: ['downloaded'], damaged } : { damaged })) {
    if (typeof item === 'string') {
      markCorrupt(state, item);
      continue;
    }
    const record = item;
    applyRecord(state, record);
    if (!options.lean) continue;
    if (record.type === 'status') {
      const entry = state.instances.get(record.instance);
      if (entry?.final === record) {
        if (record.actualCostUsd === undefined)
          entry.final = shared(finals, record.status, (): JournalRecordOf<'status'> => ({
            type: 'status',
            instance: '',
            status: record.status,
            outputs: [],
          }));
        else entry.final = { type: 'status', instance: '', status: record.status, outputs: [], actualCostUsd: record.actualCostUsd };
      }
    } else if (record.type === 'intent') {
      const entry = state.instances.get(record.instance);
      if (entry?.intent === record)
        // The price stays: every money fold reads an attempt's price from its intent.
        entry.intent = shared(intents, `${record.model}\n${String(record.priceUsd)}`, (): JournalRecordOf<'intent'> => ({
          type: 'intent',
          instance: '',
          model: record.model,
          idempotencyKey: null,
          bodyHash: '',
          ...(record.priceUsd === undefined ? {} : { priceUsd: record.priceUsd }),
        }));
    }
  }
  return state;
}

/** The journal's records, and the ids of its damaged lines that name one, in file order. */
async function* streamRecordsAndDamage(
  path: string,
  options: { skipTypes?: string[]; damaged: (corrupt: CorruptLine) => string | undefined },
): AsyncGenerator<JournalRecord | string> {
  for await (const batch of streamJournalBatches<string>(path, options)) yield* batch;
}

function shared<T extends object>(cache: Map<string, T>, key: string, make: () => T): T {
  let value = cache.get(key);
  if (!value) {
    value = Object.freeze(make());
    cache.set(key, value);
  }
  return value;
}

/**
 * What an instance is, as the journal tells it: the one reading outputs.csv, the gallery and the
 * report show (the report's statusOf in run-fold.ts is this, `pending` named `not_started`).
 */
export type InstanceStatus = TerminalStatus | 'reused' | 'unknown' | 'in_flight' | 'pending';

export function instanceStatus(entry: InstanceState): InstanceStatus {
  if (entry.reusedFrom !== undefined) return 'reused';
  // The service's final status, whatever the run recorded around it (terminal states are final):
  // a completed instance whose files could not be fetched is completed, and paid for; the run says
  // its missing files apart (the summary, exit 1) and a resume fetches them, as `--retry failed`
  // never sends a completed instance again.
  if (entry.final) return entry.final.status;
  if (entry.failed) return 'failed';
  if (entry.submission) return 'in_flight';
  // A damaged line of its own (`--accept-corrupt`) may have been an intent whose submit spent
  // money: a resume never sends it again, so it is unknown here too, never "not started".
  return entry.intent || entry.suspect === true ? 'unknown' : 'pending';
}

/**
 * What an instance costs as far as the journal knows, for a gallery cell and outputs.csv: its net
 * over every attempt, the very figure the report sums (attempt-money.ts moneyOf), so the gallery's
 * header and the report's net agree. Undefined when nothing known was charged (never sent, or its
 * end unknown: the report shows that apart) or when an attempt has no price (unpriced, never US$0).
 */
export function instanceCostUsd(entry: InstanceState, priceUsd: number | null | undefined): number | undefined {
  if (entry.reusedFrom !== undefined) return 0;
  const money = moneyOf(entry, priceUsd);
  if (money.unpricedAttempts > 0) return undefined;
  if (!entry.final && money.chargedUsd === 0) return undefined;
  return jsonUsd(money.chargedUsd);
}

/** An attempt of the instance was sent with no known price (the report's unpriced count). */
export function instanceUnpriced(entry: InstanceState, priceUsd: number | null | undefined): boolean {
  return entry.reusedFrom === undefined && moneyOf(entry, priceUsd).unpricedAttempts > 0;
}

/**
 * What identifies an instance's current outputs: the SHA-256 of its first file, or of several files'
 * digests joined by newlines, in output order; undefined before any is downloaded. A review decision
 * records it, so that it judges that output and not a later remake: a repeated `--retry rejected` pays for nothing new.
 */
export function outputsDigest(entry: Pick<InstanceState, 'downloads'>): string | undefined {
  const downloads = entry.downloads;
  if (!downloads || downloads.size === 0) return undefined;
  const digests = [...downloads.entries()].sort(([a], [b]) => a - b).map(([, d]) => d.sha256);
  return digests.length === 1 ? digests[0] : createHash('sha256').update(digests.join('\n')).digest('hex');
}

/**
 * The outputs of an instance in the sink whose bytes there genpipe could not check: a
 * `sink_unverified` record for the bytes its `sink_uploaded` record names.
 */
export function sinkUnverified(entry: Pick<InstanceState, 'sinkUploads' | 'sinkUnverified'>): JournalRecordOf<'sink_unverified'>[] {
  const out: JournalRecordOf<'sink_unverified'>[] = [];
  for (const [output, record] of entry.sinkUnverified ?? []) {
    if (entry.sinkUploads?.get(output)?.sha256 === record.sha256) out.push(record);
  }
  return out.sort((a, b) => a.output - b.output);
}

/**
 * The outputs of an instance that another object at their key kept out of the sink (the last
 * `sink_conflict` of each output for the downloaded bytes, with no upload since): `failed` ones
 * make the instance "completed, upload conflict"; `skipped` ones were left so on purpose.
 */
export function sinkConflicts(
  entry: Pick<InstanceState, 'downloads' | 'sinkUploads' | 'sinkConflicts'>,
): JournalRecordOf<'sink_conflict'>[] {
  const out: JournalRecordOf<'sink_conflict'>[] = [];
  for (const [output, record] of entry.sinkConflicts ?? []) {
    if (entry.downloads?.get(output)?.sha256 !== record.sha256) continue;
    if (entry.sinkUploads?.get(output)?.sha256 === record.sha256) continue;
    out.push(record);
  }
  return out.sort((a, b) => a.output - b.output);
}
