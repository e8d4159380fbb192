/**
 * Each instance's outcome, in instance-id order, read from a journal of any size in bounded memory
 * (issue 14, goal 4). The journal streams by; the records of each instance are gathered (reduced to
 * what an outcome needs) for up to CHUNK_INSTANCES instances at a time. A run that fits one chunk
 * is sorted in memory. A larger one spills each chunk, sorted by id, to a temporary file, and the
 * files are merged: an instance whose records sit in several chunks (a resume, a retry much later)
 * gets them back in journal order. So a report of 10,000,000 instances needs no more memory than
 * one of CHUNK_INSTANCES.
 */
import { createReadStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { JournalRecord, JournalRecordOf } from '../run/journal-records.js';
import { streamJournal } from '../run/journal.js';
import { writeLinesFile } from '../util/external-sort.js';
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
      return ['s', record.handle];
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

function recordOf(id: string, fact: Fact): JournalRecord {
  switch (fact[0]) {
    case 'i':
      return { type: 'intent', instance: id, model: fact[1] as string, idempotencyKey: null, bodyHash: '' };
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
 * units, like outputs.csv: the same order on every machine and locale).
 */
export async function* instanceStates(journalPath: string, options: { chunk?: number; gallery?: boolean } = {}): AsyncGenerator<[string, InstanceState]> {
  const limit = options.chunk ?? CHUNK_INSTANCES;
  // A gallery reads downloaded records too, and keeps what its cells show (galleryFactOf).
  const skipTypes = options.gallery ? NOT_OUTCOME.filter((t) => t !== 'downloaded') : NOT_OUTCOME;
  const fact = options.gallery ? galleryFactOf : factOf;
  let chunk = new Map<string, Fact[]>();
  const spills: string[] = [];
  let dir: string | undefined;
  try {
    for await (const record of streamJournal(journalPath, { skipTypes })) {
      const id = (record as { instance?: unknown }).instance;
      if (typeof id !== 'string') continue;
      let list = chunk.get(id);
      if (!list) {
        if (chunk.size >= limit) {
          dir ??= await mkdtemp(join(tmpdir(), 'genpipe-report-'));
          spills.push(await spill(chunk, join(dir, `chunk-${spills.length}.jsonl`)));
          chunk = new Map();
        }
        chunk.set(id, (list = []));
      }
      list.push(fact(record));
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
    if (chunk.size > 0) spills.push(await spill(chunk, join(dir as string, `chunk-${spills.length}.jsonl`)));
    chunk = new Map();
    yield* merge(spills);
  } finally {
    if (dir) await rm(dir, { recursive: true, force: true });
  }
}

/** Writes a chunk sorted by id, one `[id, records]` JSON array per line; returns its path. */
function spill(chunk: ReadonlyMap<string, Fact[]>, path: string): Promise<string> {
  const ids = [...chunk.keys()].sort(byCodeUnits);
  return writeLinesFile(path, ids.map((id) => JSON.stringify([id, chunk.get(id)])));
}

interface Head {
  /** Which spill file: the lower, the earlier in the journal. */
  file: number;
  id: string;
  records: Fact[];
  lines: AsyncIterator<string>;
}

/** A k-way merge of sorted spill files (a binary heap on id, then file), combining an id's records in file order. */
async function* merge(paths: readonly string[]): AsyncGenerator<[string, InstanceState]> {
  const heap: Head[] = [];
  const before = (a: Head, b: Head): boolean => a.id < b.id || (a.id === b.id && a.file < b.file);
  const push = (h: Head): void => {
    heap.push(h);
    for (let i = heap.length - 1; i > 0; ) {
      const p = (i - 1) >> 1;
      if (!before(heap[i] as Head, heap[p] as Head)) break;
      [heap[i], heap[p]] = [heap[p] as Head, heap[i] as Head];
      i = p;
    }
  };
  const pop = (): Head => {
    const top = heap[0] as Head;
    const last = heap.pop() as Head;
    if (heap.length > 0) {
      heap[0] = last;
      for (let i = 0; ; ) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < heap.length && before(heap[l] as Head, heap[m] as Head)) m = l;
        if (r < heap.length && before(heap[r] as Head, heap[m] as Head)) m = r;
        if (m === i) break;
        [heap[i], heap[m]] = [heap[m] as Head, heap[i] as Head];
        i = m;
      }
    }
    return top;
  };
  const advance = async (h: Pick<Head, 'file' | 'lines'>): Promise<void> => {
    const next = await h.lines.next();
    if (next.done) return;
    const [id, records] = JSON.parse(next.value) as [string, Fact[]];
    push({ file: h.file, lines: h.lines, id, records });
  };
  const inputs = paths.map((path) => createReadStream(path));
  const readers = inputs.map((input) => createInterface({ input, crlfDelay: Infinity }));
  // Each iterator at once: a reader emits lines as soon as it is created, and lines emitted before
  // its iterator exists would be lost.
  const iterators = readers.map((reader) => reader[Symbol.asyncIterator]());
  try {
    for (const [file, lines] of iterators.entries()) await advance({ file, lines });
    // Bounded: every step consumes one line of one file.
    while (heap.length > 0) {
      const first = pop();
      const records = first.records;
      await advance(first);
      while (heap.length > 0 && (heap[0] as Head).id === first.id) {
        const more = pop();
        records.push(...more.records);
        await advance(more);
      }
      yield [first.id, stateOf(first.id, records)];
    }
  } finally {
    for (const reader of readers) reader.close();
    // Closing a readline interface leaves its input open.
    for (const input of inputs) input.destroy();
  }
}
