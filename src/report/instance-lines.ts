/**
 * Each instance's outcome, in instance-id order, read from a journal of any size in bounded memory
 * (a journal of 1,000,000 instances must not need a gigabyte). The journal streams by; the records of each instance are gathered (reduced to
 * what an outcome needs) for up to CHUNK_INSTANCES instances at a time. A run that fits one chunk
 * is sorted in memory. A larger one spills each chunk, sorted, to a temporary file, and the
 * files are merged: an instance whose records sit in several chunks (a resume, a retry much later)
 * gets them back in journal order. So a report of 10,000,000 instances needs no more memory than
 * one of CHUNK_INSTANCES (many files are merged in passes: external-sort.ts MAX_FAN_IN).
 *
 * A journal of PARALLEL_MIN_BYTES or more is read by two threads: this one reads the first half,
 * a worker (report-worker.ts) the second, each spilling its own chunks; the merge takes the first
 * half's files before the second's, so records keep their journal order across the halves.
 *
 * The order is the views' order (plan/instance-order.ts): a spilled line starts with its
 * instance's sort key, which holds the id, so the merge compares keys as strings.
 */
import { mkdtemp, open, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TERMINAL_STATUSES, type JournalRecord, type JournalRecordOf } from '../run/journal/journal-records.js';
import { streamJournalBatches, type CorruptLine, type ReadBound } from '../run/journal/journal.js';
import { keyOfLine, mergeRuns, narrowRuns, sampleRun, writeLinesFile } from '../util/external-sort.js';
import { applyRecord, emptyRunState, markCorrupt, type InstanceState } from '../run/journal/run-state.js';
import { canStartWorker, startTaskWorker, type TaskWorker } from '../util/worker-task.js';
import { bytesAt } from '../util/bytes-at.js';
import { byCodeUnits, idOfSortKey, InstanceOrder, type OrderStep } from '../plan/instance-order.js';

/** Instances gathered in memory before a chunk is spilled to disk. */
export const CHUNK_INSTANCES = 25_000;

/** Records that say nothing about one instance's outcome, passed over unparsed. */
const NOT_OUTCOME = ['run_started', 'run_finished', 'downloaded', 'uploaded', 'agent_session', 'notify', 'sink_uploaded'];

/**
 * A record reduced to what an instance's outcome needs, as a short tuple (cheap to keep, to spill
 * as JSON and to read back): no outputs, results, keys or hashes.
 */
export type Fact = readonly [code: string, a?: unknown, b?: unknown];

/**
 * An instance's facts while gathered, as the JSON text of each, comma-separated, in journal
 * order: what a spill writes as it stands (in brackets), and what the commonest records give
 * straight from their bytes (projectFact), never built as tuples then serialised.
 */
type FactsText = string;

/**
 * What a contact sheet needs besides: each downloaded file's path, a failure's message, a status's
 * error and an agent's answer (gallery-data.ts cellOf). Still no output URLs, results or hashes.
 */
function galleryFactOf(record: JournalRecord): Fact {
  switch (record.type) {
    case 'downloaded':
      return [
        'x',
        {
          type: 'downloaded',
          output: record.output,
          path: record.path,
          sha256: '',
          size: 0,
          ...(record.width && record.height ? { width: record.width, height: record.height } : {}),
        },
      ];
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

/**
 * What the report's storage-sink counts need besides (sink-totals.ts): each downloaded file's and
 * each upload's output index, size and sha256. No path, key or URL.
 */
function sinkFactOf(record: JournalRecord, base: (record: JournalRecord) => Fact, withPath: boolean): Fact {
  switch (record.type) {
    case 'downloaded':
      // A contact sheet read with it keeps the file's path (galleryFactOf).
      return ['d', record.output ?? 0, withPath ? [record.size, record.sha256, record.path] : [record.size, record.sha256]];
    case 'sink_uploaded':
      return ['u', record.output, [record.size, record.sha256]];
    default:
      return base(record);
  }
}

function factOf(record: JournalRecord): Fact {
  switch (record.type) {
    case 'intent':
      // Its price, when journaled, is the attempt's money (attempt-money.ts attemptPrice).
      return record.priceUsd === undefined ? ['i', record.model] : ['i', record.model, record.priceUsd];
    case 'submitted':
      // A request's handle is its id (the commonest, and shortest to spill); others are kept whole.
      return record.handle.kind === 'request' && Object.keys(record.handle).length === 2
        ? ['r', record.handle.requestId]
        : ['s', record.handle];
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

/** A fact read straight from a line's bytes (projectFact), as its JSON text, with the instance it belongs to. */
export class ProjectedFact {
  constructor(
    readonly instance: string,
    readonly fact: string,
  ) {}
}

// The layouts genpipe writes its three commonest records in, read byte by byte: no JSON parse, no
// schema check for the fields the report never reads (the checksum has vouched for the bytes). An
// id, model or request id is taken only when its JSON text has no escape, so it is the string
// itself, and its quoted text is its fact's JSON as it stands. Each reader returns where the bytes
// it expects end, or -1.

/** `text` at `at`: where it ends, or -1. */
function literal(json: Buffer, at: number, text: Buffer): number {
  return bytesAt(json, at, text) ? at + text.length : -1;
}

/** A string's characters with no escape, from `at` (past its opening quote) on: where its closing quote is, or -1 (empty too). */
function plain(json: Buffer, at: number): number {
  if (at < 0) return -1;
  // Bounded by the line's length.
  for (let i = at; i < json.length; i++) {
    const c = json[i];
    if (c === 0x22) return i > at ? i : -1;
    if (c === 0x5c) return -1;
  }
  return -1;
}

/** Just past the closing quote at `quote`, or -1. */
const past = (quote: number): number => (quote < 0 ? -1 : quote + 1);

/** `count` lowercase hex digits from `at`: where they end, or -1. */
function hex(json: Buffer, at: number, count: number): number {
  if (at < 0 || json.length < at + count) return -1;
  for (let i = at; i < at + count; i++) {
    const c = json[i] as number;
    if (!((c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66))) return -1;
  }
  return at + count;
}

/** An optional `,"at":<digits>` from `at`, then the record's closing brace as the line's last byte: true when so. */
function endsWithAt(json: Buffer, at: number): boolean {
  let i = literal(json, at, AT);
  if (i < 0) i = at;
  else {
    const first = i;
    while (i < json.length && (json[i] as number) >= 0x30 && (json[i] as number) <= 0x39) i++;
    if (i === first) return false;
  }
  return i === json.length - 1 && json[i] === 0x7d;
}

const INTENT = Buffer.from('{"type":"intent","instance":"');
const MODEL = Buffer.from('","model":"');
const KEY = Buffer.from('","idempotencyKey":');
const NULL = Buffer.from('null');
const BODY_HASH = Buffer.from(',"bodyHash":"');
const PRICE = Buffer.from(',"priceUsd":');
const NUMBER_BYTES = new Set([...'0123456789.eE+-'].map((c) => c.charCodeAt(0)));
const SUBMITTED = Buffer.from('{"type":"submitted","instance":"');
const REQUEST = Buffer.from('","handle":{"kind":"request","requestId":"');
const REQUEST_END = Buffer.from('"}');
const STATUS = Buffer.from('{"type":"status","instance":"');
const STATUS_FIELD = Buffer.from('","status":"');
const AT = Buffer.from(',"at":');
const OUTPUTS = Buffer.from(',"outputs":[');
const COST = Buffer.from('"actualCostUsd"');
const FINAL_STATUSES = new Set<string>(TERMINAL_STATUSES);

/** `{"type":"intent","instance":…,"model":…,"idempotencyKey":null|"…","bodyHash":"<64 hex>"[,"at":n]}` */
function projectIntent(json: Buffer): ProjectedFact | undefined {
  const idEnd = plain(json, literal(json, 0, INTENT));
  const modelStart = literal(json, idEnd, MODEL);
  const modelEnd = plain(json, modelStart);
  const keyStart = literal(json, modelEnd, KEY);
  // The key is null or a string with no escape: past it.
  const keyEnd = keyStart < 0 ? -1 : json[keyStart] === 0x22 ? past(plain(json, keyStart + 1)) : literal(json, keyStart, NULL);
  const hashEnd = hex(json, literal(json, keyEnd, BODY_HASH), 64);
  if (hashEnd < 0 || json[hashEnd] !== 0x22) return undefined;
  // The attempt's price, when journaled: a number or null, copied as its JSON text.
  const priceStart = literal(json, hashEnd + 1, PRICE);
  const priceEnd = priceStart < 0 ? hashEnd + 1 : priceText(json, priceStart);
  if (priceEnd < 0 || !endsWithAt(json, priceEnd)) return undefined;
  const price = priceStart < 0 ? '' : `,${json.toString('latin1', priceStart, priceEnd)}`;
  return new ProjectedFact(
    json.toString('utf8', INTENT.length, idEnd),
    `["i",${json.toString('utf8', modelStart - 1, modelEnd + 1)}${price}]`,
  );
}

/** `null`, or a JSON number at least 0, from `at`: where it ends, or -1. */
function priceText(json: Buffer, at: number): number {
  const afterNull = literal(json, at, NULL);
  if (afterNull >= 0) return afterNull;
  let i = at;
  // Bounded by the line's length: digits, a point and an exponent.
  while (i < json.length && NUMBER_BYTES.has(json[i] as number)) i++;
  const value = Number(json.toString('latin1', at, i));
  return i > at && Number.isFinite(value) && value >= 0 ? i : -1;
}

/** `{"type":"submitted","instance":…,"handle":{"kind":"request","requestId":…}[,"at":n]}` */
function projectSubmitted(json: Buffer): ProjectedFact | undefined {
  const idEnd = plain(json, literal(json, 0, SUBMITTED));
  const requestStart = literal(json, idEnd, REQUEST);
  const requestEnd = plain(json, requestStart);
  const at = literal(json, requestEnd, REQUEST_END);
  if (at < 0 || !endsWithAt(json, at)) return undefined;
  return new ProjectedFact(
    json.toString('utf8', SUBMITTED.length, idEnd),
    `["r",${json.toString('utf8', requestStart - 1, requestEnd + 1)}]`,
  );
}

/** `{"type":"status","instance":…,"status":"<final>",…,"outputs":[…` with no `"actualCostUsd"` anywhere. */
function projectStatus(json: Buffer): ProjectedFact | undefined {
  const idEnd = plain(json, literal(json, 0, STATUS));
  const statusStart = literal(json, idEnd, STATUS_FIELD);
  const statusEnd = plain(json, statusStart);
  if (statusEnd < 0 || json[statusEnd + 1] !== 0x2c || !json.includes(OUTPUTS) || json.includes(COST)) return undefined;
  const status = json.toString('latin1', statusStart, statusEnd);
  if (!FINAL_STATUSES.has(status)) return undefined;
  return new ProjectedFact(json.toString('utf8', STATUS.length, idEnd), `["S","${status}"]`);
}

/**
 * The report's fact of an intent, a request's submission or a status without a reported cost, read
 * from the line's JSON bytes; undefined for anything else, which is then parsed and checked in
 * full (ProjectLine in journal.ts). A status line is most of a journal (its outputs and result), and
 * the report reads only its status: a status that names a cost anywhere goes the full way.
 */
export function projectFact(json: Buffer): ProjectedFact | undefined {
  switch (json[9]) {
    case 0x69: // {"type":"i…
      return projectIntent(json);
    case 0x73: // {"type":"s…
      return json[10] === 0x75 ? projectSubmitted(json) : projectStatus(json);
    default:
      return undefined;
  }
}

/**
 * A damaged line that names its instance (`--accept-corrupt` went past it): the fact `["D"]`, which
 * marks the instance as a resume does (markCorrupt), so every view calls it unknown, never not started.
 * A damaged line that names none yields nothing: it changes no instance's status.
 */
function damagedFact(corrupt: CorruptLine): ProjectedFact | undefined {
  return corrupt.instance === undefined ? undefined : new ProjectedFact(corrupt.instance, DAMAGED_FACT);
}

const DAMAGED_FACT = '["D"]';

function recordOf(id: string, fact: Fact): JournalRecord {
  switch (fact[0]) {
    case 'i':
      return fact[2] === undefined
        ? { type: 'intent', instance: id, model: fact[1] as string, idempotencyKey: null, bodyHash: '' }
        : {
            type: 'intent',
            instance: id,
            model: fact[1] as string,
            idempotencyKey: null,
            bodyHash: '',
            priceUsd: fact[2] as number | null,
          };
    case 'r':
      return { type: 'submitted', instance: id, handle: { kind: 'request', requestId: fact[1] as string } };
    case 's':
      return { type: 'submitted', instance: id, handle: fact[1] as JournalRecordOf<'submitted'>['handle'] };
    case 'S':
      return fact[2] === undefined
        ? { type: 'status', instance: id, status: fact[1] as JournalRecordOf<'status'>['status'], outputs: [] }
        : {
            type: 'status',
            instance: id,
            status: fact[1] as JournalRecordOf<'status'>['status'],
            outputs: [],
            actualCostUsd: fact[2] as number,
          };
    case 'f':
      return { type: 'failed', instance: id, code: fact[1] as string, message: '' };
    case 'd': {
      const [size, sha256, path] = fact[2] as [number, string, string?];
      return { type: 'downloaded', instance: id, output: fact[1] as number, path: path ?? '', size, sha256 };
    }
    case 'u': {
      const [size, sha256] = fact[2] as [number, string];
      return { type: 'sink_uploaded', instance: id, output: fact[1] as number, bucket: '-', key: '-', size, sha256, etag: '' };
    }
    default:
      return { ...(fact[1] as object), instance: id } as JournalRecord;
  }
}

/** One state replayed per instance, reused: an instance's entry is taken out as soon as it is built. */
const scratch = emptyRunState();

/** The state of one instance after its facts, in journal order. */
function stateOf(id: string, facts: readonly Fact[]): InstanceState {
  for (const fact of facts) {
    if (fact[0] === 'D') markCorrupt(scratch, id);
    else applyRecord(scratch, recordOf(id, fact));
  }
  const entry = scratch.instances.get(id) as InstanceState;
  scratch.instances.clear();
  return entry;
}

export interface StatesOptions {
  /** Instances gathered in memory before a chunk is spilled. Default CHUNK_INSTANCES. */
  chunk?: number | undefined;
  /** Keep what a contact sheet shows too (galleryFactOf). */
  gallery?: boolean | undefined;
  /** Keep each download's and upload's size and sha256 too (sinkFactOf): the run has a storage sink. */
  sinks?: boolean | undefined;
  /** Parse and check every line in full (tests compare with the projected reading). */
  fullParse?: boolean | undefined;
  /** The order of the instances (plan/instance-order.ts): plan.json's steps. Default: by id, code unit by code unit. */
  order?: readonly OrderStep[] | undefined;
  /** Journals this big or bigger are read by two threads. Default PARALLEL_MIN_BYTES. */
  parallelMinBytes?: number | undefined;
  /** The second thread's module; default report-worker.js beside this one (tests of the sources name the built one). */
  worker?: URL | undefined;
  /**
   * The second thread reads from the middle byte on, not from half of what is left when it is
   * ready (tests: this thread reads a small journal whole before a second one has started).
   */
  evenSplit?: boolean | undefined;
}

/**
 * Journals of at least this many bytes (about 50,000 instances) have their second half read by a
 * worker thread (report-worker.ts) while this thread reads the first: a thread costs about a
 * tenth of a second to start.
 */
export const PARALLEL_MIN_BYTES = 64 * 2 ** 20;

/** The worker's module: beside this one in the build (dist/report/ or dist/bundle/); absent when running from sources. */
const WORKER = new URL('./report-worker.js', import.meta.url);

/**
 * Yields `[instance id, state]` for every instance the journal names, in `order` (steps, axes and
 * values in manifest order, as outputs.csv and the gallery list them; the same on every machine
 * and locale). `fullParse` parses and
 * checks every line rather than reading the common ones' facts from their text (tests compare).
 *
 * A big journal is read by two threads, each spilling its part's chunks: the first thread's
 * chunks are merged before the second's, so an instance whose records sit in both parts gets them
 * back in journal order, as from one thread.
 */
export async function* instanceStates(journalPath: string, options: StatesOptions = {}): AsyncGenerator<[string, InstanceState]> {
  const runs = await gatherInstanceRuns(journalPath, options);
  try {
    yield* statesOf(runs);
  } finally {
    await runs.dispose();
  }
}

/**
 * A journal's facts, gathered by instance: in memory when they fit one chunk, else in sorted runs
 * (spill files, at most MAX_FAN_IN of them). `helper`: the thread that read the journal's second
 * part, still serving (the report gives it its last lines to write next). `dispose` stops it and
 * removes the files.
 */
export interface InstanceRuns {
  inMemory: Map<string, FactsText>;
  /** Spill files of `sortKey<TAB>facts` lines, sorted by key. */
  runs: readonly string[];
  /** The order the in-memory instances are sorted in (the runs were spilled in it). */
  order?: InstanceOrder | undefined;
  helper: TaskWorker | undefined;
  dispose(): Promise<void>;
}

/** Reads the journal (a big one by two threads: see instanceStates) into InstanceRuns. */
export async function gatherInstanceRuns(journalPath: string, options: StatesOptions = {}): Promise<InstanceRuns> {
  let dir: string | undefined;
  const spillDir = async (): Promise<string> => (dir ??= await mkdtemp(join(tmpdir(), 'genpipe-report-')));
  let helper: TaskWorker | undefined;
  const dispose = async (): Promise<void> => {
    helper?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  };
  let helped: Promise<string[]> | undefined;
  const order = new InstanceOrder(options.order);
  try {
    const size = await twoThreadSize(journalPath, options);
    // Two threads gather a quarter chunk each: each thread has its own heap, and on a million
    // instances half chunks peaked at 290-300 MB, quarter chunks at 220-240 MB, in the same time.
    const chunk = size === undefined ? options.chunk : Math.max(1, Math.floor((options.chunk ?? CHUNK_INSTANCES) / 4));
    // This thread reads from the start until the line the second thread starts at. The second
    // takes half of what is left once it is ready (a thread takes a tenth of a second or more to
    // start), or, with evenSplit, half the journal.
    const bound: ReadBound = { end: size === undefined || !options.evenSplit ? Infinity : Math.floor(size / 2), read: 0 };
    if (size !== undefined) {
      const started = startTaskWorker(options.worker ?? WORKER);
      helper = started;
      const job = async (): Promise<ReaderJob> => {
        if (bound.end === Infinity) bound.end = Math.floor((bound.read + size) / 2);
        return {
          kind: 'read',
          journal: journalPath,
          from: bound.end,
          dir: await spillDir(),
          chunk,
          order: order.steps,
          gallery: options.gallery,
          sinks: options.sinks,
          fullParse: options.fullParse,
        };
      };
      const failed = (why: string): Error => new Error(`Reading the second half of ${journalPath} in another thread failed: ${why}`);
      // The bound is set the moment the thread is ready, before this thread reads on.
      helped = started.ready.then(
        async () => (await started.run<ReaderAnswer>(await job(), failed)).spills,
        (error: Error) => Promise.reject(failed(error.message)),
      );
      helped.catch(() => {});
    }
    const gathered = await gatherRuns(journalPath, {
      ...options,
      chunk,
      order,
      bound,
      spillDir,
      spillAll: size !== undefined,
      prefix: 'a',
    });
    const { spills } = gathered;
    if (helped) spills.push(...(await helped));
    return { inMemory: gathered.chunk, runs: narrowRuns(spills, byCodeUnits, decodeKey), order, helper, dispose };
  } catch (error) {
    // A failed or stopped second thread: its answer no longer matters.
    await helped?.catch(() => {});
    await dispose();
    throw error;
  }
}

/**
 * The states of the gathered instances, in order; with `range`, only those whose sort key is at or
 * after `from` and before `to` (the parts of a report written by two threads: write-report.ts).
 */
export async function* statesOf(
  gathered: Pick<InstanceRuns, 'inMemory' | 'runs' | 'order'>,
  range: { from?: string | undefined; to?: string | undefined } = {},
): AsyncGenerator<[string, InstanceState]> {
  for await (const [id, texts] of factsOf(gathered, range)) yield [id, stateOfTexts(id, texts)];
}

/**
 * An instance whose facts are exactly an intent, a request's submission and a final status
 * without a reported cost, in that order: every instance of a run that went as planned. Its line
 * differs from another's of the same step, model and status only by its id and request id
 * (CostTally.plainLine replays one of them and copies the line).
 */
export class PlainOutcome {
  constructor(
    readonly model: string,
    readonly requestId: string,
    readonly status: JournalRecordOf<'status'>['status'],
    /** The price its intent journaled (null: unpriced); undefined in a journal written before prices were. */
    readonly priceUsd?: number | null | undefined,
  ) {}
}

/** A plain outcome's facts as their JSON text: neither string has an escape, so each is itself. */
const PLAIN = new RegExp(
  `^\\[\\["i","([^"\\\\]+)"(?:,(null|[0-9.eE+-]+))?\\],\\["r","([^"\\\\]+)"\\],\\["S","(${TERMINAL_STATUSES.join('|')})"\\]\\]$`,
);

/** As statesOf, but an instance whose facts are plain comes as a PlainOutcome, not replayed (the report's lines). */
export async function* outcomesOf(
  gathered: Pick<InstanceRuns, 'inMemory' | 'runs' | 'order'>,
  range: { from?: string | undefined; to?: string | undefined } = {},
): AsyncGenerator<[string, InstanceState | PlainOutcome]> {
  for await (const [id, texts] of factsOf(gathered, range)) {
    const m = texts.length === 1 ? PLAIN.exec(texts[0] as string) : null;
    yield [id, m ? plainOutcome(m) : stateOfTexts(id, texts)];
  }
}

/** The plain outcome PLAIN matched: model, price (its JSON text, if journaled), request id and status. */
function plainOutcome(m: RegExpExecArray): PlainOutcome {
  const price = m[2] === undefined ? undefined : (JSON.parse(m[2]) as number | null);
  return new PlainOutcome(m[1] as string, m[3] as string, m[4] as PlainOutcome['status'], price);
}

/** A plain outcome's state, replayed from its facts as any other's. */
export function plainState(id: string, plain: PlainOutcome): InstanceState {
  return stateOf(id, [
    plain.priceUsd === undefined ? ['i', plain.model] : ['i', plain.model, plain.priceUsd],
    ['r', plain.requestId],
    ['S', plain.status],
  ]);
}

/** The state of an instance from its facts' JSON arrays, in journal order. */
function stateOfTexts(id: string, texts: readonly string[]): InstanceState {
  return stateOf(id, texts.length === 1 ? (JSON.parse(texts[0] as string) as Fact[]) : texts.flatMap((text) => JSON.parse(text) as Fact[]));
}

/**
 * The gathered instances' ids, sorted, each with its facts as JSON arrays (one per spilled run
 * that held some, in journal order); `range` as statesOf's.
 */
async function* factsOf(
  gathered: Pick<InstanceRuns, 'inMemory' | 'runs' | 'order'>,
  range: { from?: string | undefined; to?: string | undefined },
): AsyncGenerator<[string, string[]]> {
  const { inMemory } = gathered;
  const inRange = (key: string): boolean => (range.from === undefined || key >= range.from) && (range.to === undefined || key < range.to);
  if (gathered.runs.length === 0) {
    const order = gathered.order ?? new InstanceOrder();
    const keys = [...inMemory.keys()].map((id) => order.sortKey(id)).sort(byCodeUnits);
    for (const key of keys) {
      const id = idOfSortKey(key);
      const facts = inMemory.get(id) as FactsText;
      // Each instance's facts give way to its state as it is yielded.
      inMemory.delete(id);
      if (inRange(key)) yield [id, [`[${facts}]`]];
    }
    return;
  }
  yield* merge(gathered.runs, range);
}

/**
 * A sort key near the middle of the gathered instances (the median of the runs' middle keys), past
 * the first key, so that the instances before it and from it on both hold some; undefined when
 * there is no such key (all in memory, or too few).
 */
export function middleKey(gathered: Pick<InstanceRuns, 'runs'>): string | undefined {
  const middles: string[] = [];
  let first: string | undefined;
  for (const run of gathered.runs) {
    const sample = sampleRun(run, decodeKey);
    if (sample.first !== undefined && (first === undefined || sample.first < first)) first = sample.first;
    if (sample.middle !== undefined) middles.push(sample.middle);
  }
  middles.sort(byCodeUnits);
  const middle = middles[Math.floor(middles.length / 2)];
  return middle !== undefined && first !== undefined && middle > first ? middle : undefined;
}

/** The journal's size when two threads read it (it is big enough, and a second thread can start); else undefined. */
async function twoThreadSize(journalPath: string, options: StatesOptions): Promise<number | undefined> {
  if (!canStartWorker(options.worker ?? WORKER)) return undefined;
  let size: number;
  try {
    ({ size } = await stat(journalPath));
  } catch {
    return undefined;
  }
  return size > 0 && size >= (options.parallelMinBytes ?? PARALLEL_MIN_BYTES) ? size : undefined;
}

/**
 * Where the first line that starts at `at` or after starts (the file's size when none does): past
 * the first newline from the byte before `at` on. The first thread reads the lines that start
 * before `at` (ReadBound), the second from here on: each line is read once.
 */
export async function lineStartFrom(journalPath: string, at: number): Promise<number> {
  if (at <= 0) return 0;
  const handle = await open(journalPath, 'r');
  try {
    const { size } = await handle.stat();
    const probe = Buffer.alloc(Math.min(2 ** 20, Math.max(1, size)));
    // Bounded: each turn reads on by at least a byte, up to the file's end.
    for (let from = at - 1; from < size;) {
      const { bytesRead } = await handle.read(probe, 0, probe.length, from);
      if (bytesRead === 0) break;
      const newline = probe.subarray(0, bytesRead).indexOf(0x0a);
      if (newline !== -1) return from + newline + 1;
      from += bytesRead;
    }
    return size;
  } finally {
    await handle.close();
  }
}

/**
 * What the second thread reads (a task sent to report-worker.ts): the journal's lines from the
 * first that starts at `from` or after (lineStartFrom), its chunks spilled into `dir`.
 */
export interface ReaderJob {
  kind: 'read';
  journal: string;
  from: number;
  dir: string;
  chunk: number | undefined;
  /** plan.json's steps: the spills are sorted in their order (InstanceOrder). */
  order: readonly OrderStep[];
  gallery: boolean | undefined;
  sinks: boolean | undefined;
  fullParse: boolean | undefined;
}

/** The second thread's answer: its spilled chunks, in journal order. */
export interface ReaderAnswer {
  spills: string[];
}

/**
 * Gathers the facts of each instance of the journal's lines from `start` (a line's first byte) to
 * the `bound` (ReadBound) or the end, spilling each full
 * chunk (and with `spillAll` the last one too) into `spillDir()`, its files named after `prefix`.
 * Returns the chunk left in memory and the spilled files, in journal order.
 */
export async function gatherRuns(
  journalPath: string,
  options: Pick<StatesOptions, 'chunk' | 'gallery' | 'sinks' | 'fullParse'> & {
    order: InstanceOrder;
    start?: number | undefined;
    bound?: ReadBound | undefined;
    spillDir: () => Promise<string>;
    spillAll: boolean;
    prefix: string;
  },
): Promise<{ chunk: Map<string, FactsText>; spills: string[] }> {
  const limit = options.chunk ?? CHUNK_INSTANCES;
  // A gallery reads downloaded records too, and keeps what its cells show (galleryFactOf).
  // With sinks, downloads and uploads too, as sizes and hashes (sinkFactOf).
  const kept = new Set([...(options.gallery || options.sinks ? ['downloaded'] : []), ...(options.sinks ? ['sink_uploaded'] : [])]);
  const skipTypes = NOT_OUTCOME.filter((t) => !kept.has(t));
  const base = options.gallery ? galleryFactOf : factOf;
  const withPath = options.gallery === true;
  const fact = options.sinks ? (record: JournalRecord): Fact => sinkFactOf(record, base, withPath) : base;
  let chunk = new Map<string, FactsText>();
  const spills: string[] = [];
  const range = { start: options.start, bound: options.bound };
  // A gallery reads more of each status than projectFact gives: its lines are read in full.
  const batches =
    options.gallery || options.fullParse
      ? streamJournalBatches(journalPath, { skipTypes, damaged: damagedFact, ...range })
      : streamJournalBatches(journalPath, { skipTypes, project: projectFact, damaged: damagedFact, ...range });
  for await (const batch of batches) {
    for (const item of batch) {
      const projected = item instanceof ProjectedFact ? item : undefined;
      const id = projected ? projected.instance : (item as { instance?: unknown }).instance;
      if (typeof id !== 'string') continue;
      const text = projected ? projected.fact : JSON.stringify(fact(item as JournalRecord));
      const before = chunk.get(id);
      if (before !== undefined) chunk.set(id, `${before},${text}`);
      else {
        if (chunk.size >= limit) {
          spills.push(spill(chunk, options.order, join(await options.spillDir(), `${options.prefix}-${spills.length}.jsonl`)));
          chunk = new Map();
        }
        chunk.set(id, text);
      }
    }
  }
  if (chunk.size > 0 && (options.spillAll || spills.length > 0)) {
    spills.push(spill(chunk, options.order, join(await options.spillDir(), `${options.prefix}-${spills.length}.jsonl`)));
    chunk = new Map();
  }
  return { chunk, spills };
}

/**
 * Writes a chunk in `order`, a line per instance: its sort key (JSON; it ends with the id), a tab,
 * its facts (a JSON array); returns its path.
 */
function spill(chunk: ReadonlyMap<string, FactsText>, order: InstanceOrder, path: string): string {
  const keys = [...chunk.keys()].map((id) => order.sortKey(id)).sort(byCodeUnits);
  return writeLinesFile(
    path,
    keys.map((key) => `${JSON.stringify(key)}\t[${chunk.get(idOfSortKey(key))}]`),
  );
}

/** A merge of sorted spill files (external-sort.ts), combining an instance's facts in file order, so in journal order. */
async function* merge(
  paths: readonly string[],
  range: { from?: string | undefined; to?: string | undefined },
): AsyncGenerator<[string, string[]]> {
  let key: string | undefined;
  let texts: string[] = [];
  let count = 0;
  for (const { key: next, line } of mergeRuns(paths, byCodeUnits, decodeKey, { from: range.from })) {
    // The merge reads synchronously: let signals and timers in now and then.
    if (++count % 20_000 === 0) await new Promise<void>((resolve) => setImmediate(resolve));
    if (range.to !== undefined && next >= range.to) break;
    if (key !== undefined && next !== key) yield [idOfSortKey(key), texts];
    if (next !== key) texts = [];
    key = next;
    texts.push(line.slice(keyOfLine(line).length + 1));
  }
  if (key !== undefined) yield [idOfSortKey(key), texts];
}

const decodeKey = (raw: string): string => JSON.parse(raw) as string;
