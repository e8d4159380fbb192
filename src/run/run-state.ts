/**
 * The state of a run, rebuilt from its journal. The journal is the source of truth: everything a
 * resumed run decides (skip, re-attach, resubmit with the same key, or report as unknown) comes
 * from here, never from what the service might say.
 */
import type { JournalRecord, JournalRecordOf, TerminalStatus } from './journal-records.js';
import { streamJournal } from './journal.js';
import type { Submission } from '../models/adapter.js';

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
  rerolls: number;
}

export interface RunState {
  runId: string | undefined;
  planHash: string | undefined;
  instances: Map<string, InstanceState>;
  /** Agent conversation → session id. */
  sessions: Map<string, string>;
  /** Local path → uploaded URL. */
  uploads: Map<string, string>;
}

export function emptyRunState(): RunState {
  return { runId: undefined, planHash: undefined, instances: new Map(), sessions: new Map(), uploads: new Map() };
}

function instanceOf(state: RunState, id: string): InstanceState {
  let entry = state.instances.get(id);
  if (!entry) {
    entry = { rerolls: 0 };
    state.instances.set(id, entry);
  }
  return entry;
}

/** Applies one record. Terminal states are final: a later record never moves an instance out of one. */
export function applyRecord(state: RunState, record: JournalRecord): void {
  switch (record.type) {
    case 'run_started':
      state.runId ??= record.runId;
      state.planHash ??= record.planHash;
      return;
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
    case 'failed': {
      const entry = instanceOf(state, record.instance);
      if (!entry.final) entry.failed = record;
      return;
    }
    case 'reroll': {
      const entry = instanceOf(state, record.instance);
      // A re-roll starts the instance over with a new body and key; what came before is history.
      entry.rerolls = Math.max(entry.rerolls, record.attempt);
      entry.intent = undefined;
      entry.submission = undefined;
      entry.submittedAt = undefined;
      entry.final = undefined;
      entry.failed = undefined;
      entry.downloads = undefined;
      return;
    }
    case 'agent_session':
      state.sessions.set(record.conversation, record.sessionId);
      return;
    case 'uploaded':
      state.uploads.set(record.path, record.url);
      return;
    case 'run_finished':
      return;
  }
}

export function replay(records: readonly JournalRecord[]): RunState {
  const state = emptyRunState();
  for (const record of records) applyRecord(state, record);
  return state;
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

export function resumeAction(entry: InstanceState | undefined, idempotentSubmit: boolean): ResumeAction {
  if (!entry) return { kind: 'fresh' };
  if (entry.final) return { kind: 'done', status: entry.final.status };
  if (entry.failed) return { kind: 'failed' };
  if (entry.submission) return { kind: 'reattach', submission: entry.submission };
  if (entry.intent) {
    const key = entry.intent.idempotencyKey;
    return idempotentSubmit && key !== null ? { kind: 'resubmit_same_key', key } : { kind: 'unknown' };
  }
  return { kind: 'fresh' };
}

/**
 * Replays a journal file without holding its records: each is applied as it is read. With `lean`,
 * what only a resume needs (output URLs, downloads, template values, body hashes) is dropped as it arrives, so a
 * reader such as the cost report keeps a few hundred bytes per instance.
 */
export async function replayFile(path: string, options: { lean?: boolean } = {}): Promise<RunState> {
  const state = emptyRunState();
  for await (const record of streamJournal(path)) {
    // Which files were downloaded is outputs.csv's business, not a lean reader's.
    if (options.lean && record.type === 'downloaded') continue;
    applyRecord(state, record);
    if (!options.lean) continue;
    if (record.type === 'status') {
      const entry = state.instances.get(record.instance);
      if (entry?.final === record) {
        entry.final = { type: 'status', instance: record.instance, status: record.status, outputs: [], ...(record.actualCostUsd === undefined ? {} : { actualCostUsd: record.actualCostUsd }) };
      }
    } else if (record.type === 'intent') {
      const entry = state.instances.get(record.instance);
      if (entry?.intent === record) entry.intent = { type: 'intent', instance: record.instance, model: record.model, idempotencyKey: record.idempotencyKey, bodyHash: record.bodyHash };
    }
  }
  return state;
}
