/**
 * Each instance's outcome, in instance-id order, read from a journal of any size in bounded memory
 * (issue 14, goal 4). The journal streams by; the records of each instance are gathered (reduced to
 * what an outcome needs) for up to CHUNK_INSTANCES instances at a time. A run that fits one chunk
 * is sorted in memory. A larger one spills each chunk, sorted by id, to a temporary file, and the
 * files are merged: an instance whose records sit in several chunks (a resume, a retry much later)
 * gets them back in journal order. So a report of 10,000,000 instances needs no more memory than
 * one of CHUNK_INSTANCES.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { JournalRecord, JournalRecordOf } from '../run/journal-records.js';
import { streamJournalBatches } from '../run/journal.js';
import { keyOfLine, mergeRuns, writeLinesFile } from '../util/external-sort.js';
import { applyRecord, emptyRunState, type InstanceState } from '../run/run-state.js';

/** Instances gathered in memory before a chunk is spilled to disk. */
export const CHUNK_INSTANCES = 25_000;

/** Records that say nothing about one instance's outcome, passed over unparsed. */
const NOT_OUTCOME = ['run_started', 'run_finished', 'downloaded', 'uploaded', 'agent_session', 'notify'];

/**
 * A record reduced to what an instance's outcome needs, as a short tuple (cheap to keep, to spill
 * as JSON and to read back): no outputs, results, keys or hashes.
 */
type Fact = readonly [code: string, a?: unknown, b?: unknown];

/**
 * What a contact sheet needs besides: each downloaded file's path, a failure's message, a status's
 * error and an agent's answer (gallery-data.ts cellOf). Still no output URLs, results or hashes.
 */
function galleryFactOf(record: JournalRecord): Fact {
  switch (record.type) {
    case 'downloaded':
      return ['x', { type: 'downloaded', output: record.output, path: record.path, sha256: '', size: 0 }];
    case 'failed':
      return ['x', { type: 'failed', code: record.code, message: record.message }];
    case 'status': {
      const answer = record.result?.answer;
      const { instance: _instance, outputs: _outputs, result: _result, ...rest } = record;
      return ['x', { ...rest, outputs: [], ...(answer === undefined ? {} : { result: { answer } }) }];
    }
    default:
      return factOf(record);
  }
}

function factOf(record: JournalRecord): Fact {
  switch (record.type) {
    case 'intent':
      return ['i', record.model];
    case 'submitted':
      // A request's handle is its id (the commonest, and shortest to spill); others are kept whole.
      return record.handle.kind === 'request' && Object.keys(record.handle).length === 2 ? ['r', record.handle.requestId] : ['s', record.handle];
    case 'status':
      return record.actualCostUsd === undefined ? ['S', record.status] : ['S', record.status, record.actualCostUsd];
    case 'failed':
      return ['f', record.code];
    default: {
      // Rare (refused, reroll, retry, reused): kept whole but for what an outcome never reads.
      const { instance: _instance, ...rest } = record as JournalRecord & { instance: string };
      if (rest.type === 'reused') return ['x', { ...rest, outputs: [], result: undefined }];
      return ['x', rest];
    }
  }
}

/** A fact read straight from a line's text (projectFact), with the instance it belongs to. */
class ProjectedFact {
  constructor(
    readonly instance: string,
    readonly fact: Fact,
  ) {}
}

// The layouts genpipe writes its three commonest records in, read by pattern: no JSON parse, no
// schema check for the fields the report never reads (the checksum has vouched for the bytes). An
// id or model is taken only when its JSON text has no escape, so it is the string itself.
const INTENT = /^\{"type":"intent","instance":"([^"\\]+)","model":"([^"\\]+)","idempotencyKey":(?:null|"[^"\\]+"),"bodyHash":"[0-9a-f]{64}"(?:,"at":\d+)?\}$/;
const SUBMITTED = /^\{"type":"submitted","instance":"([^"\\]+)","handle":\{"kind":"request","requestId":"([^"\\]+)"\}(?:,"at":\d+)?\}$/;
const STATUS = /^\{"type":"status","instance":"([^"\\]+)","status":"(completed|failed|nsfw|canceled)",/;

/**
 * The report's fact of an intent, a request's submission or a status without a reported cost, read
 * from the line's JSON text; undefined for anything else, which is then parsed and checked in full
 * (ProjectLine in journal.ts). A status line is most of a journal (its outputs and result), and the
 * report reads only its status: a status that names a cost anywhere goes the full way.
 */
function projectFact(json: Buffer): ProjectedFact | undefined {
  let m: RegExpExecArray | null;
  switch (json[9]) {
    case 0x69: // {"type":"i…
      if ((m = INTENT.exec(json.toString('utf8')))) return new ProjectedFact(m[1] as string, ['i', m[2]]);
      return undefined;
    case 0x73: // {"type":"s…
      if (json[10] === 0x75) {
        if ((m = SUBMITTED.exec(json.toString('utf8')))) return new ProjectedFact(m[1] as string, ['r', m[2]]);
        return undefined;
      }
      // Only the start of a status is decoded: a character cut at its end fails the pattern.
      if (json.includes(OUTPUTS) && !json.includes(COST) && (m = STATUS.exec(json.toString('utf8', 0, 400)))) return new ProjectedFact(m[1] as string, ['S', m[2]]);
      return undefined;
    default:
      return undefined;
  }
}

const OUTPUTS = Buffer.from(',"outputs":[');
const COST = Buffer.from('"actualCostUsd"');

function recordOf(id: string, fact: Fact): JournalRecord {
  switch (fact[0]) {
    case 'i':
      return { type: 'intent', instance: id, model: fact[1] as string, idempotencyKey: null, bodyHash: '' };
    case 'r':
      return { type: 'submitted', instance: id, handle: { kind: 'request', requestId: fact[1] as string } };
    case 's':
      return { type: 'submitted', instance: id, handle: fact[1] as JournalRecordOf<'submitted'>['handle'] };
    case 'S':
      return fact[2] === undefined
        ? { type: 'status', instance: id, status: fact[1] as JournalRecordOf<'status'>['status'], outputs: [] }
        : { type: 'status', instance: id, status: fact[1] as JournalRecordOf<'status'>['status'], outputs: [], actualCostUsd: fact[2] as number };
    case 'f':
      return { type: 'failed', instance: id, code: fact[1] as string, message: '' };
    default:
      return { ...(fact[1] as object), instance: id } as JournalRecord;
  }
}

/** One state replayed per instance, reused: an instance's entry is taken out as soon as it is built. */
const scratch = emptyRunState();

/** The state of one instance after its facts, in journal order. */
function stateOf(id: string, facts: readonly Fact[]): InstanceState {
  for (const fact of facts) applyRecord(scratch, recordOf(id, fact));
  const entry = scratch.instances.get(id) as InstanceState;
  scratch.instances.clear();
  return entry;
}

const byCodeUnits = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/**
 * Yields `[instance id, state]` for every instance the journal names, sorted by id (UTF-16 code
 * units, like outputs.csv: the same order on every machine and locale). `fullParse` parses and
 * checks every line rather than reading the common ones' facts from their text (tests compare).
 */
export async function* instanceStates(journalPath: string, options: { chunk?: number; gallery?: boolean; fullParse?: boolean } = {}): AsyncGenerator<[string, InstanceState]> {
  const limit = options.chunk ?? CHUNK_INSTANCES;
  // A gallery reads downloaded records too, and keeps what its cells show (galleryFactOf).
  const skipTypes = options.gallery ? NOT_OUTCOME.filter((t) => t !== 'downloaded') : NOT_OUTCOME;
  const fact = options.gallery ? galleryFactOf : factOf;
  let chunk = new Map<string, Fact[]>();
  const spills: string[] = [];
  let dir: string | undefined;
  try {
    // A gallery reads more of each status than projectFact gives: its lines are read in full.
    const batches = options.gallery || options.fullParse ? streamJournalBatches(journalPath, { skipTypes }) : streamJournalBatches(journalPath, { skipTypes, project: projectFact });
    for await (const batch of batches) {
      for (const item of batch) {
        const projected = item instanceof ProjectedFact ? item : undefined;
        const id = projected ? projected.instance : (item as { instance?: unknown }).instance;
        if (typeof id !== 'string') continue;
        let list = chunk.get(id);
        if (!list) {
          if (chunk.size >= limit) {
            dir ??= await mkdtemp(join(tmpdir(), 'genpipe-report-'));
            spills.push(spill(chunk, join(dir, `chunk-${spills.length}.jsonl`)));
            chunk = new Map();
          }
          chunk.set(id, (list = []));
        }
        list.push(projected ? projected.fact : fact(item as JournalRecord));
      }
    }
    if (spills.length === 0) {
      const ids = [...chunk.keys()].sort(byCodeUnits);
      for (const id of ids) {
        const records = chunk.get(id) as Fact[];
        // Each instance's records give way to its state as it is yielded.
        chunk.delete(id);
        yield [id, stateOf(id, records)];
      }
      return;
    }
    if (chunk.size > 0) spills.push(spill(chunk, join(dir as string, `chunk-${spills.length}.jsonl`)));
    chunk = new Map();
    yield* merge(spills);
  } finally {
    if (dir) await rm(dir, { recursive: true, force: true });
  }
}

/** Writes a chunk sorted by id, a line per instance: its id (JSON), a tab, its records (JSON); returns its path. */
function spill(chunk: ReadonlyMap<string, Fact[]>, path: string): string {
  const ids = [...chunk.keys()].sort(byCodeUnits);
  return writeLinesFile(path, ids.map((id) => `${JSON.stringify(id)}\t${JSON.stringify(chunk.get(id))}`));
}

/** A merge of sorted spill files (external-sort.ts), combining an id's records in file order, so in journal order. */
async function* merge(paths: readonly string[]): AsyncGenerator<[string, InstanceState]> {
  let id: string | undefined;
  let records: Fact[] = [];
  let merged = 0;
  for (const { key: next, line } of mergeRuns(paths, byCodeUnits, decodeId)) {
    // The merge reads synchronously: let signals and timers in now and then.
    if (++merged % 20_000 === 0) await new Promise<void>((resolve) => setImmediate(resolve));
    if (id !== undefined && next !== id) yield [id, stateOf(id, records)];
    if (next !== id) records = [];
    id = next;
    records.push(...(JSON.parse(line.slice(keyOfLine(line).length + 1)) as Fact[]));
  }
  if (id !== undefined) yield [id, stateOf(id, records)];
}

const decodeId = (raw: string): string => JSON.parse(raw) as string;
