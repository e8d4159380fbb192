/**
 * `journal.jsonl`: the append-only journal that is the run's source of truth, so a run resumes after any crash
 * without paying twice.
 *
 * ## Line format
 *
 *     <crc32> <json>\n
 *
 * - `<crc32>`: exactly 8 lowercase hex digits, the CRC-32 (`zlib.crc32`) of the UTF-8 bytes of `<json>`.
 * - one space, then `<json>`: one record (see `journal-records.ts`) as `JSON.stringify` prints it,
 *   which never contains a raw newline.
 * - `\n` ends every record. A record exists only once its newline is on disk.
 *
 * The prefix keeps the record itself plain JSON (`cut -c10- journal.jsonl | jq` works) and lets
 * the checksum cover the exact bytes written, with no canonicalisation to agree on.
 *
 * ## Reading
 *
 * - The **last** line is *torn* when it has no newline (a write cut at any byte offset, or a tail
 *   of zeros left by a crash) or fails its checksum or format. It is dropped and reported as
 *   `tornTail`, not as an error: no caller was ever told it was durable, because a durable append
 *   resolves only after the whole line, newline included, is synced. `Journal.open` truncates it
 *   so the next record starts on a fresh line.
 * - A bad line **in the middle** (bad checksum, bad format, not JSON, a record this version does
 *   not know) is reported in `corrupt`, and reading goes on past it. Why not stop there: every
 *   record carries its own checksum and names its own instance, so a later record does not depend
 *   on the bytes of an earlier one; stopping would throw away every later, verified fact (an
 *   intent, a request id) and make a blind resend, i.e. a double spend, *more* likely.
 * - **Resuming** past such a line is refused (`Journal.open` throws `CorruptJournalError`, exit 2,
 *   before it changes a byte of the file): the lost line may have been an unanswered intent, and
 *   an instance whose intent is lost looks fresh and would be paid for twice (reliability.md #20).
 *   With `acceptCorrupt` the open goes on and each such line is handed to `onCorrupt` with the
 *   instance it belongs to when that can be *proved* (see `damagedLineInstance`), or none, meaning
 *   "could be any instance"; the caller must treat those instances as unknown, never as fresh.
 *   Nothing is written to say the damage was accepted: the bytes are still damaged, so every
 *   resume reads them again and must accept them again, and gets the same unknowns.
 *
 * ## Writing: group commit
 *
 * Appends join the open batch (up to a size cap) and share its promise. One writer takes the
 * batches in order: it writes each with a single `write`, and syncs once if any record in it asked
 * to be durable. Appends that arrive while a write+sync is in flight go to the next batch, so N
 * concurrent durable appends cost far fewer than N syncs, and N appends cost one promise per
 * batch, not N. After a failed write or sync the journal refuses all further appends: once fsync
 * has failed the page cache can no longer be trusted ("fsyncgate").
 *
 * Every registered secret is redacted from a record's JSON text before it is written (in the form
 * JSON gives it inside a string), so a secret never reaches the file.
 */
import { crc32 } from 'node:zlib';
import { open, truncate, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import { GenpipeError } from '../../api/errors.js';
import { mayHoldSecret, redactingReplacer, redactJsonText } from '../../util/redact.js';
import { JOURNAL_RECORD_TYPES, JournalRecord, surelyValidRecord } from './journal-records.js';
import { syncDirectory } from '../files/sync-directory.js';
import { bytesAt } from '../../util/bytes-at.js';

const NEWLINE = 0x0a;
/**
 * How much of a journal a reader reads at a time. A megabyte read half a million-instance
 * journal's bytes (650 MB, split into lines) in 0.21 s where 256 KB took 0.45 s: fewer reads through
 * the thread pool, fewer awaits.
 */
const READ_CHUNK = 1024 * 1024;
const PREFIX_LENGTH = 9; // 8 hex digits and a space
/** About the largest single write, in characters; a batch is closed before it grows past it. */
const MAX_BATCH_CHARS = 4 * 1024 * 1024;

/**
 * The code of a failed journal write: `internal` when the system refused it (ENOSPC, EROFS, EIO...),
 * so that where the error leaves the command a disk's refusal is told as such (exit 6) and any
 * other as the bug it is, whichever append met it, the first or a later one.
 */
function writeFailureCode(error: unknown): 'internal' | 'invalid_file' {
  return typeof (error as NodeJS.ErrnoException | undefined)?.code === 'string' && !(error instanceof GenpipeError)
    ? 'internal'
    : 'invalid_file';
}

/** One JSON text as a journal line (checksum, space, JSON, newline); the checksum covers its UTF-8 bytes. */
function lineText(json: string): string {
  return `${crc32(json).toString(16).padStart(8, '0')} ${json}\n`;
}

/** Encodes one JSON text as a journal line (checksum, space, JSON, newline). */
export function encodeLine(json: string): Buffer {
  return Buffer.from(lineText(json), 'utf8');
}

export interface CorruptLine {
  /** 1-based line number. */
  line: number;
  reason: string;
  /**
   * The instance the line belongs to, when the checksum proves it (see `damagedLineInstance`).
   * Absent: the line could belong to *any* instance.
   */
  instance?: string;
}

export interface ReadJournalResult {
  records: JournalRecord[];
  /** The last line was incomplete or failed its checksum, and was dropped. */
  tornTail: boolean;
  /** Bad lines before the last one, skipped. */
  corrupt: CorruptLine[];
  /** Length in bytes of the file without the torn tail: where the next record must start. */
  endOffset: number;
}

type LineCheck = { ok: true; value: unknown } | { ok: false; integrity: boolean; reason: string };

/** Checks one line's checksum (the line without its newline): the reason it fails, or undefined. */
function checksumProblem(bytes: Buffer): string | undefined {
  if (bytes.length < PREFIX_LENGTH + 2) return 'line too short';
  // Eight lowercase hex digits and a space, read from the bytes (a million lines notice a regex).
  let expected = 0;
  for (let i = 0; i < 8; i++) {
    const c = bytes[i] as number;
    const digit = c >= 0x30 && c <= 0x39 ? c - 0x30 : c >= 0x61 && c <= 0x66 ? c - 0x57 : -1;
    if (digit < 0) return 'malformed checksum prefix';
    expected = expected * 16 + digit;
  }
  if (bytes[8] !== 0x20) return 'malformed checksum prefix';
  if (crc32(bytes.subarray(PREFIX_LENGTH)) !== expected) return 'checksum mismatch';
  return undefined;
}

/** Checks the JSON of a line whose checksum matched. */
function checkBody(body: Buffer): LineCheck {
  let json: unknown;
  try {
    json = JSON.parse(body.toString('utf8'));
  } catch {
    return { ok: false, integrity: false, reason: 'checksum matches but the text is not JSON' };
  }
  const type = (json as { type?: unknown } | null)?.type;
  if (typeof type === 'string' && !JOURNAL_RECORD_TYPES.has(type))
    return { ok: false, integrity: false, reason: `unknown record type "${type.slice(0, 40)}"` };
  if (surelyValidRecord(json)) return { ok: true, value: json };
  const parsed = JournalRecord.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return {
      ok: false,
      integrity: false,
      reason: `invalid record: ${issue ? `${issue.path.join('.') || '(record)'}: ${issue.message}` : 'invalid'}`,
    };
  }
  return { ok: true, value: parsed.data };
}

// ---------------------------------------------------------------------------------------------
// Whose line was it? Naming the instance of a damaged line.
//
// A regex for `"instance":"…"` is not enough: a flipped byte inside the id (`seed=1` → `seed=3`)
// still reads as a plausible id, of *another* instance, and the real one, its intent lost, would
// look fresh and be paid for twice. So an instance is named only when the checksum proves it:
// - the checksum matches (the line is what was written; this version just cannot use it), or
// - exactly one single-byte repair makes the checksum match and the line a valid record: the
//   damaged byte is then found, wherever it is (the id included), and the id read from the repair.
// Anything else (several bytes damaged, a line cut or merged with the next) names no instance.

/** The CRC-32 (reflected 0xEDB88320, as zlib) byte table. */
const CRC_TABLE = new Uint32Array(256);
/** Table entry → the byte that gives it (the table is linear and one-to-one). */
const CRC_BYTE = new Map<number, number>();
/** High byte of a table entry → its index: the high bytes of CRC-32's table are all different. */
const CRC_BY_TOP = new Uint8Array(256);
for (let i = 0; i < 256; i++) {
  let c = i;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  CRC_TABLE[i] = c >>> 0;
  if (i > 0) CRC_BYTE.set(c >>> 0, i);
  CRC_BY_TOP[c >>> 24] = i;
}

/**
 * Every single-byte change `(position, xor)` of `body` that would make its CRC-32 equal `expected`.
 * The CRC is affine: changing byte p by δ changes the CRC by `T[δ]` carried through the n-1-p bytes
 * after it, a step that can be undone; so walk the difference back one byte at a time and look for
 * a table entry. O(n), whatever δ.
 */
export function singleByteRepairs(body: Uint8Array, expected: number): Array<{ position: number; xor: number }> {
  let diff = (crc32(body) ^ expected) >>> 0;
  const repairs: Array<{ position: number; xor: number }> = [];
  if (diff === 0) return repairs;
  for (let position = body.length - 1; position >= 0; position--) {
    const xor = CRC_BYTE.get(diff);
    if (xor !== undefined) repairs.push({ position, xor });
    // Undo one step of `c' = (c >>> 8) ^ T[c & 0xff]` over a byte both versions share.
    const low = CRC_BY_TOP[diff >>> 24]!;
    diff = (((diff ^ CRC_TABLE[low]!) << 8) | low) >>> 0;
  }
  return repairs;
}

/** A step id (manifest `identifier`), alone or followed by a `[label]`. */
const PLAUSIBLE_INSTANCE = /^[a-z][a-z0-9_-]{0,62}(?:\[[^\u0000-\u001f]*\])?$/;
const plausibleInstance = (value: unknown): string | undefined =>
  typeof value === 'string' && value.length <= 4096 && PLAUSIBLE_INSTANCE.test(value) ? value : undefined;

/** The instance a line whose checksum matched names: its `instance` field, or the one `"instance":"…"` in text that is not JSON. */
function writtenInstance(body: Buffer): string | undefined {
  const text = body.toString('utf8');
  try {
    const json: unknown = JSON.parse(text);
    return json !== null && typeof json === 'object' ? plausibleInstance((json as { instance?: unknown }).instance) : undefined;
  } catch {
    const found = new Set<string | undefined>();
    for (const match of text.matchAll(/"instance":("(?:[^"\\\u0000-\u001f]|\\.)*")/g)) {
      try {
        found.add(plausibleInstance(JSON.parse(match[1]!)));
      } catch {
        found.add(undefined);
      }
    }
    return found.size === 1 ? [...found][0] : undefined;
  }
}

/**
 * The instance a corrupt line (without its newline) provably belongs to, or undefined when it could
 * be any (the rules are above). A record type that names no instance also gives undefined.
 */
export function damagedLineInstance(bytes: Buffer): string | undefined {
  if (bytes.length < PREFIX_LENGTH + 2) return undefined;
  const body = bytes.subarray(PREFIX_LENGTH);
  const prefix = bytes.toString('latin1', 0, PREFIX_LENGTH);
  const wellFormed = /^[0-9a-f]{8} $/.test(prefix);
  if (wellFormed && crc32(body) === Number.parseInt(prefix.slice(0, 8), 16)) return writtenInstance(body);
  const candidates: Buffer[] = [];
  // One damaged byte in the prefix: the body's own checksum differs from it in that byte alone.
  const actual = Buffer.from(`${crc32(body).toString(16).padStart(8, '0')} `, 'latin1');
  let differing = 0;
  for (let i = 0; i < PREFIX_LENGTH; i++) if (actual[i] !== bytes[i]) differing++;
  if (differing === 1) candidates.push(body);
  // One damaged byte in the body.
  if (wellFormed) {
    for (const { position, xor } of singleByteRepairs(body, Number.parseInt(prefix.slice(0, 8), 16))) {
      const repaired = Buffer.from(body);
      repaired[position] = repaired[position]! ^ xor;
      candidates.push(repaired);
    }
  }
  const named = new Set<string | undefined>();
  for (const candidate of candidates) {
    const check = checkBody(candidate);
    if (check.ok) named.add(plausibleInstance((check.value as { instance?: unknown }).instance));
  }
  // No repair, or repairs that disagree: it could be any instance.
  return named.size === 1 ? [...named][0] : undefined;
}

/**
 * True when exactly the damage of one flipped byte explains a line: a single-byte repair makes it
 * a valid record. A torn write (cut short, or pages of an unsynced write lost) never looks like
 * that, so a complete last line that one byte repairs is damage, not a torn tail: cutting it off
 * could drop a synced intent and pay twice.
 */
function oneByteDamaged(bytes: Buffer): boolean {
  if (bytes.length < PREFIX_LENGTH + 2) return false;
  const body = bytes.subarray(PREFIX_LENGTH);
  const prefix = bytes.toString('latin1', 0, PREFIX_LENGTH);
  const actual = Buffer.from(`${crc32(body).toString(16).padStart(8, '0')} `, 'latin1');
  let differing = 0;
  for (let i = 0; i < PREFIX_LENGTH; i++) if (actual[i] !== bytes[i]) differing++;
  if (differing === 1 && checkBody(body).ok) return true;
  if (!/^[0-9a-f]{8} $/.test(prefix)) return false;
  return singleByteRepairs(body, Number.parseInt(prefix.slice(0, 8), 16)).some(({ position, xor }) => {
    const repaired = Buffer.from(body);
    repaired[position] = repaired[position]! ^ xor;
    return checkBody(repaired).ok;
  });
}

/**
 * Walks the lines of a journal fed to it in chunks, applying the torn-tail and corruption rules of
 * the header comment. `size` is the file's length, so a line knows whether it is the last one before
 * the end is reached. Lines inside a chunk are checked in place; only a line cut by a chunk boundary
 * is copied. Valid records go to `onRecord` and corrupt lines to `onCorrupt` as they are read:
 * nothing is kept but the problems.
 */
class JournalScanner {
  readonly #size: number;
  readonly #onRecord: (record: JournalRecord) => void;
  readonly #onCorrupt: ((corrupt: CorruptLine) => void) | undefined;
  /** Lines this reader does not want, told by their start alone: not checked, not parsed. */
  readonly #skip: ((line: Buffer) => boolean) | undefined;
  /** The start of a line the previous chunk cut, and where it starts in the file. */
  #rest: Buffer | undefined;
  #restStart = 0;
  /** Where the next chunk starts in the file. */
  #offset = 0;
  #line = 0;
  readonly #corrupt: CorruptLine[] = [];
  #torn: { at: number } | undefined;

  /** A reader's own parse of the lines whose checksum matched (see ProjectLine). */
  readonly #project: ProjectLine<unknown> | undefined;

  /** Where this reader stops, which may move while it reads (see ReadBound). */
  readonly #bound: ReadBound | undefined;
  /** True once a line starting at or past the bound was met: nothing more is read. */
  stopped = false;

  /** `offset`: where in the file the first chunk starts (a part of it: streamJournalBatches). */
  constructor(
    size: number,
    onRecord: (record: JournalRecord) => void,
    options: {
      skip?: ((line: Buffer) => boolean) | undefined;
      onCorrupt?: ((corrupt: CorruptLine) => void) | undefined;
      project?: ProjectLine<unknown> | undefined;
      offset?: number;
      bound?: ReadBound | undefined;
    } = {},
  ) {
    this.#size = size;
    this.#offset = options.offset ?? 0;
    this.#onRecord = onRecord;
    this.#skip = options.skip;
    this.#onCorrupt = options.onCorrupt;
    this.#project = options.project;
    this.#bound = options.bound;
  }

  push(chunk: Buffer): void {
    if (this.stopped) return;
    let start = 0;
    const bound = this.#bound?.end ?? Infinity;
    // Bounded: each turn consumes at least one byte of `chunk`.
    for (let end = chunk.indexOf(NEWLINE, start); end !== -1; end = chunk.indexOf(NEWLINE, start)) {
      const lineStart = this.#rest === undefined ? this.#offset + start : this.#restStart;
      if (lineStart >= bound) {
        this.stopped = true;
        return;
      }
      const bytes = this.#rest === undefined ? chunk.subarray(start, end) : Buffer.concat([this.#rest, chunk.subarray(start, end)]);
      this.#rest = undefined;
      this.#check(bytes, lineStart, this.#offset + end === this.#size - 1);
      start = end + 1;
    }
    if (start < chunk.length) {
      if (this.#rest === undefined && this.#offset + start >= bound) {
        this.stopped = true;
        return;
      }
      const tail = chunk.subarray(start);
      if (this.#rest === undefined) this.#restStart = this.#offset + start;
      this.#rest = this.#rest === undefined ? Buffer.from(tail) : Buffer.concat([this.#rest, tail]);
    }
    this.#offset += chunk.length;
    if (this.#bound) this.#bound.read = this.#offset;
  }

  #check(bytes: Buffer, lineStart: number, isLast: boolean): void {
    this.#line++;
    if (this.#torn || this.#skip?.(bytes)) return;
    // The checksum once per line, projected or not. Its failures are `integrity` ones: what a torn write causes.
    const problem = checksumProblem(bytes);
    if (problem === undefined && this.#project) {
      const projected = this.#project(bytes.subarray(PREFIX_LENGTH));
      if (projected !== undefined) return this.#onRecord(projected as JournalRecord);
    }
    const check: LineCheck =
      problem === undefined ? checkBody(bytes.subarray(PREFIX_LENGTH)) : { ok: false, integrity: true, reason: problem };
    if (check.ok) this.#onRecord(check.value as JournalRecord);
    else if (isLast && check.integrity && !oneByteDamaged(bytes)) this.#torn = { at: lineStart };
    else {
      const instance = damagedLineInstance(bytes);
      const corrupt: CorruptLine =
        instance === undefined ? { line: this.#line, reason: check.reason } : { line: this.#line, reason: check.reason, instance };
      this.#corrupt.push(corrupt);
      this.#onCorrupt?.(corrupt);
    }
  }

  /** The outcome once every chunk is in: a line without its newline is a torn tail. */
  finish(): Omit<ReadJournalResult, 'records'> {
    if (this.#rest !== undefined) {
      this.#line++;
      this.#torn ??= { at: this.#restStart };
    }
    return { tornTail: this.#torn !== undefined, corrupt: this.#corrupt, endOffset: this.#torn?.at ?? this.#offset };
  }
}

/** Parses the bytes of a journal (see the header comment for the torn-tail and corruption rules). */
export function parseJournal(data: Buffer): ReadJournalResult {
  const records: JournalRecord[] = [];
  const scanner = new JournalScanner(data.length, (record) => records.push(record));
  scanner.push(data);
  return { records, ...scanner.finish() };
}

/**
 * Opens a journal to read it; undefined when there is none. Something else where the journal
 * should be (a folder, a file genpipe may not read) is refused naming it, exit 2: a damaged run
 * directory is not a bug in genpipe.
 */
async function openForReading(path: string): Promise<FileHandle | undefined> {
  let handle: FileHandle;
  try {
    handle = await open(path, 'r');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return undefined;
    if (code === 'EACCES' || code === 'EPERM' || code === 'ENOTDIR' || code === 'ELOOP')
      throw new GenpipeError('invalid_file', `Cannot read the journal ${path} (${code}); the run directory is damaged.`);
    throw error;
  }
  let isFile = false;
  try {
    isFile = (await handle.stat()).isFile();
  } finally {
    if (!isFile) await handle.close();
  }
  if (!isFile)
    throw new GenpipeError('invalid_file', `${path} is not a file, so not a journal genpipe wrote; the run directory is damaged.`);
  return handle;
}

/**
 * Reads a journal file a chunk at a time, handing each valid record to `onRecord` and each corrupt
 * line to `onCorrupt`, in file order; returns the torn tail and corrupt lines. A missing file reads
 * as empty. The file must not grow meanwhile (the run lock sees to that).
 */
export async function scanJournal(
  path: string,
  onRecord: (record: JournalRecord) => void,
  onCorrupt?: (corrupt: CorruptLine) => void,
): Promise<Omit<ReadJournalResult, 'records'>> {
  const handle = await openForReading(path);
  if (handle === undefined) return { tornTail: false, corrupt: [], endOffset: 0 };
  try {
    const scanner = new JournalScanner((await handle.stat()).size, onRecord, { onCorrupt });
    for await (const chunk of handle.createReadStream({ highWaterMark: READ_CHUNK, autoClose: false })) scanner.push(chunk as Buffer);
    return scanner.finish();
  } finally {
    await handle.close();
  }
}

/** True for a line whose record is of one of `types`, judged by the start of its JSON alone. */
function lineOfTypes(types: Iterable<string>): (line: Buffer) => boolean {
  // The journal writes `type` first; a line that puts it elsewhere is simply read in full. The
  // type is read once per line and looked up, rather than each prefix compared in turn.
  const wanted = new Set([...types].filter((type) => /^[a-z_]+$/.test(type)));
  const start = PREFIX_LENGTH + TYPE_OPENING.length;
  return (line) => {
    if (line.length <= start || !bytesAt(line, PREFIX_LENGTH, TYPE_OPENING)) return false;
    const end = line.indexOf(0x22, start);
    return end > start && end - start <= 40 && line[end + 1] === 0x2c && wanted.has(line.toString('latin1', start, end));
  };
}

/** How every record's JSON starts: its type comes first. */
const TYPE_OPENING = Buffer.from('{"type":"');

/**
 * A reader's own parse of a line, given its JSON's bytes once its checksum matched: what it wants
 * of the record, or undefined to have the line parsed and checked in full like any other. A reader
 * that needs a few fields of its own records' layout (the cost report of millions of instances)
 * reads them without parsing and checking the rest: the checksum vouches for the bytes, and the
 * fields it does not read cannot mislead it. It must give undefined for anything it does not
 * recognise exactly, so what it reads is what the full check would have read.
 */
export type ProjectLine<T> = (json: Buffer) => T | undefined;

/**
 * Yields the valid records of a journal file one at a time, so that a journal of millions of
 * records never sits in memory. Torn and corrupt lines are skipped (scanJournal reports them; a
 * reader that only sums records, like the cost report, does not need to). Records of the types in
 * `skipTypes` are passed over without being checked or parsed.
 */
export async function* streamJournal(path: string, options: { skipTypes?: Iterable<string> } = {}): AsyncGenerator<JournalRecord> {
  for await (const batch of streamJournalBatches(path, options)) yield* batch;
}

/**
 * Where a reader of a journal stops, set while it reads (the cost report's first thread, whose
 * second takes the rest from where it is told once it has started): lines that start at `end` or
 * after are not read. `read` is how far the reader has got: every line it has read, or begun,
 * starts before it, so an `end` at or past `read` splits the journal between two readers exactly.
 */
export interface ReadBound {
  end: number;
  read: number;
}

export interface StreamOptions {
  skipTypes?: Iterable<string> | undefined;
  /**
   * Only the bytes from `start` (a line's first byte) on: a part of a big journal, for one of
   * several threads to read (the cost report's), up to `bound` when one is given.
   */
  start?: number | undefined;
  /** Where reading stops, which may move while reading (ReadBound). */
  bound?: ReadBound | undefined;
}

/**
 * What a reader makes of a damaged line (bad checksum or shape) that streamJournalBatches would
 * otherwise pass over: a value yielded in its place, or undefined for none. Only a journal whose
 * damage was accepted (`--accept-corrupt`) has such lines: any other was refused on resume.
 */
export type DamagedLine<T> = (corrupt: CorruptLine) => T | undefined;

/**
 * streamJournal a read chunk (READ_CHUNK) at a time: one await per chunk rather than per record, which
 * a journal of millions of records notices. With `project`, the lines it projects come as its
 * values, in file order with the records.
 */
export function streamJournalBatches(path: string, options?: StreamOptions): AsyncGenerator<JournalRecord[]>;
export function streamJournalBatches<T>(
  path: string,
  options: StreamOptions & { project?: ProjectLine<T> | undefined; damaged?: DamagedLine<T> | undefined },
): AsyncGenerator<(JournalRecord | T)[]>;
export async function* streamJournalBatches<T>(
  path: string,
  options: StreamOptions & { project?: ProjectLine<T> | undefined; damaged?: DamagedLine<T> | undefined } = {},
): AsyncGenerator<(JournalRecord | T)[]> {
  const handle = await openForReading(path);
  if (handle === undefined) return;
  try {
    let batch: (JournalRecord | T)[] = [];
    const skip = options.skipTypes === undefined ? undefined : lineOfTypes(options.skipTypes);
    const size = (await handle.stat()).size;
    const start = options.start ?? 0;
    if (start >= size) return;
    const damaged = options.damaged;
    const scanner = new JournalScanner(size, (record) => batch.push(record), {
      skip,
      project: options.project,
      // In the batch, in file order with the records: a reader replays them in that order.
      onCorrupt:
        damaged &&
        ((corrupt) => {
          const value = damaged(corrupt);
          if (value !== undefined) batch.push(value);
        }),
      offset: start,
      bound: options.bound,
    });
    for await (const chunk of handle.createReadStream({ start, end: size - 1, highWaterMark: READ_CHUNK, autoClose: false })) {
      scanner.push(chunk as Buffer);
      if (batch.length > 0) {
        const full = batch;
        batch = [];
        yield full;
      }
      if (scanner.stopped) break;
    }
  } finally {
    await handle.close();
  }
}

/** Reads a journal file, records and all. A missing file reads as empty. */
export async function readJournal(path: string): Promise<ReadJournalResult> {
  const records: JournalRecord[] = [];
  const result = await scanJournal(path, (record) => records.push(record));
  return { records, ...result };
}

/** The file operations the writer needs; injectable to count syncs or simulate a failing disk. */
export interface JournalFile {
  /** Appends all of `data`. */
  write(data: Uint8Array): Promise<void>;
  /** Makes every byte written so far durable. */
  sync(): Promise<void>;
  close(): Promise<void>;
}

export interface JournalOptions {
  /** Clock for the `at` stamp, in milliseconds since the epoch. Default `Date.now`. */
  now?: () => number;
  /** Wraps the real file, e.g. to count syncs in a test. */
  wrapFile?: (file: JournalFile) => JournalFile;
  /**
   * Receives each record of an existing journal as it is read, instead of `recovered.records`
   * holding them all: a resume of a million-record run replays without the records in memory.
   */
  onRecord?: (record: JournalRecord) => void;
  /**
   * Open a journal that has corrupt lines other than a torn tail. Default false: `open` throws
   * `CorruptJournalError` and leaves the file as it was. The caller must then treat every instance
   * a corrupt line could belong to (its `instance`, or every instance when that is absent) as
   * unknown, never as fresh (reliability.md #20). Nothing records the acceptance: each open of the
   * same damaged file must accept it again.
   */
  acceptCorrupt?: boolean;
  /** With `acceptCorrupt`: receives each corrupt line as it is read, in file order with `onRecord`. */
  onCorrupt?: (corrupt: CorruptLine) => void;
}

export interface AppendOptions {
  /** Resolve only once the record is synced to disk. Default false: resolve once it is written. */
  durable?: boolean;
}

export interface JournalStats {
  records: number;
  writes: number;
  syncs: number;
}

/** Lines written together by one `write` (and one sync, if any of them asked to be durable). */
interface Batch {
  lines: string[];
  chars: number;
  durable: boolean;
  promise: Promise<void>;
  resolve: () => void;
  reject: (error: unknown) => void;
}

function newBatch(): Batch {
  let resolve!: () => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { lines: [], chars: 0, durable: false, promise, resolve, reject };
}

export class JournalError extends GenpipeError {
  override readonly name: string = 'JournalError';
}

/** How many corrupt lines a refusal names before it says "and N more". */
const NAMED_CORRUPT_LINES = 5;

/** Refusal to resume a journal with corrupt lines other than a torn tail (exit 2, `invalid_input`). */
export class CorruptJournalError extends JournalError {
  override readonly name = 'CorruptJournalError';
  readonly path: string;
  /** Every corrupt line, in file order. */
  readonly corrupt: readonly CorruptLine[];

  constructor(path: string, corrupt: readonly CorruptLine[]) {
    const named = corrupt.slice(0, NAMED_CORRUPT_LINES).map((c) => `${c.line} (${c.reason})`);
    const more = corrupt.length - named.length;
    const lines = `line${corrupt.length === 1 ? '' : 's'} ${named.length === 1 || more > 0 ? named.join(', ') : `${named.slice(0, -1).join(', ')} and ${named.at(-1)}`}${more > 0 ? ` and ${more} more` : ''}`;
    super(
      'invalid_input',
      `The journal ${path} may be damaged: ${lines} ${corrupt.length === 1 ? 'is' : 'are'} corrupt and not a torn last write, and resuming past a lost record could pay twice for its instance, so nothing was resumed; --accept-corrupt resumes anyway, treating every instance a corrupt line could belong to as unknown, never as new.`,
    );
    this.path = path;
    this.corrupt = corrupt;
  }
}

class HandleFile implements JournalFile {
  constructor(private readonly handle: FileHandle) {}
  async write(data: Uint8Array): Promise<void> {
    let offset = 0;
    // Bounded: each turn writes at least one byte, or throws.
    while (offset < data.length) {
      const { bytesWritten } = await this.handle.write(data, offset, data.length - offset);
      if (bytesWritten <= 0) throw new Error('the journal write made no progress');
      offset += bytesWritten;
    }
  }
  // fdatasync: it still flushes the file size, which an append changes; it skips only mtime.
  sync(): Promise<void> {
    return this.handle.datasync();
  }
  close(): Promise<void> {
    return this.handle.close();
  }
}

export class Journal {
  readonly path: string;
  /** What the file held when it was opened (empty for a new journal); resume rebuilds state from it. */
  readonly recovered: ReadJournalResult;
  /** True when `open` created the file. */
  readonly created: boolean;
  readonly #file: JournalFile;
  readonly #now: () => number;
  readonly #stats: JournalStats = { records: 0, writes: 0, syncs: 0 };
  /** Batches waiting for the writer, oldest first; the last one takes new appends. */
  #batches: Batch[] = [];
  #draining: Promise<void> | undefined;
  /** Bytes written but not yet synced. */
  #dirty = false;
  #failure: unknown;
  #closing: Promise<void> | undefined;

  private constructor(path: string, file: JournalFile, recovered: ReadJournalResult, created: boolean, options: JournalOptions) {
    this.path = path;
    this.#file = file;
    this.recovered = recovered;
    this.created = created;
    this.#now = options.now ?? Date.now;
  }

  /**
   * Opens a journal for appending, creating it when missing (and syncing its directory, so the new
   * name survives a crash). An existing journal is read first; a torn last line is cut off. A
   * corrupt line elsewhere throws `CorruptJournalError`, before the file is changed in any way,
   * unless `acceptCorrupt` is set.
   */
  static async open(path: string, options: JournalOptions = {}): Promise<Journal> {
    let handle: FileHandle;
    let created = true;
    let recovered: ReadJournalResult = { records: [], tornTail: false, corrupt: [], endOffset: 0 };
    try {
      handle = await open(path, 'ax', 0o600);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      created = false;
      const onCorrupt = options.acceptCorrupt === true ? options.onCorrupt : undefined;
      if (options.onRecord) {
        recovered = { records: [], ...(await scanJournal(path, options.onRecord, onCorrupt)) };
      } else {
        const records: JournalRecord[] = [];
        recovered = { records, ...(await scanJournal(path, (record) => records.push(record), onCorrupt)) };
      }
      // Refuse before anything changes the file: not even the torn tail is cut.
      if (recovered.corrupt.length > 0 && options.acceptCorrupt !== true) throw new CorruptJournalError(path, recovered.corrupt);
      if (recovered.tornTail) {
        await truncate(path, recovered.endOffset);
      }
      handle = await open(path, 'a');
      // Make the truncation durable before anything is appended after it.
      if (recovered.tornTail) await handle.datasync();
    }
    if (created) {
      try {
        await syncDirectory(dirname(path));
      } catch (error) {
        await handle.close();
        throw error;
      }
    }
    const base = new HandleFile(handle);
    return new Journal(path, options.wrapFile ? options.wrapFile(base) : base, recovered, created, options);
  }

  get stats(): Readonly<JournalStats> {
    return { ...this.#stats };
  }

  /**
   * Appends a record. Records reach the file in the order `append` was called. With `durable`, the
   * promise resolves once the record (and every record before it) is synced; use it for intents.
   */
  append(record: JournalRecord, options: AppendOptions = {}): Promise<void> {
    let line: string;
    try {
      this.#assertWritable();
      line = this.#encode(record);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#enqueue(line, options.durable === true);
  }

  /** Resolves once every record appended so far is synced. */
  flush(): Promise<void> {
    try {
      this.#assertWritable();
    } catch (error) {
      return Promise.reject(error);
    }
    return this.#enqueue(undefined, true);
  }

  /** Syncs what is queued and closes the file. Further appends are refused. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      try {
        if (this.#failure === undefined) await this.#enqueue(undefined, true);
      } finally {
        await this.#file.close();
      }
    })();
    return this.#closing;
  }

  #assertWritable(): void {
    if (this.#failure !== undefined)
      throw new JournalError(
        writeFailureCode(this.#failure),
        `The journal ${this.path} failed to write earlier; it accepts no more records.`,
        {
          cause: this.#failure,
        },
      );
    if (this.#closing) throw new JournalError('invalid_file', `The journal ${this.path} is closed.`);
  }

  #encode(record: JournalRecord): string {
    return encodeJournalRecord(record, this.#now);
  }

  #enqueue(line: string | undefined, durable: boolean): Promise<void> {
    let batch = this.#batches.at(-1);
    if (batch === undefined || (line !== undefined && batch.lines.length > 0 && batch.chars + line.length > MAX_BATCH_CHARS)) {
      batch = newBatch();
      this.#batches.push(batch);
    }
    if (line !== undefined) {
      batch.lines.push(line);
      batch.chars += line.length;
    }
    if (durable) batch.durable = true;
    // One writer at a time: a drain already under way takes this batch in its turn.
    if (this.#draining === undefined) this.#draining = this.#drain();
    return batch.promise;
  }

  async #drain(): Promise<void> {
    // Let appends made in the same tick join the first batch.
    await Promise.resolve();
    // Bounded: each turn removes one batch; new batches arrive only from callers.
    for (let batch = this.#batches.shift(); batch !== undefined; batch = this.#batches.shift()) {
      try {
        if (batch.lines.length > 0) {
          await this.#file.write(Buffer.from(batch.lines.join(''), 'utf8'));
          this.#stats.writes++;
          this.#dirty = true;
        }
        if (batch.durable && this.#dirty) {
          await this.#file.sync();
          this.#stats.syncs++;
          this.#dirty = false;
        }
      } catch (error) {
        this.#failure = error;
        const wrapped = new JournalError(writeFailureCode(error), `Could not write the journal ${this.path}.`, { cause: error });
        batch.reject(wrapped);
        for (const waiting of this.#batches.splice(0)) waiting.reject(wrapped);
        break;
      }
      this.#stats.records += batch.lines.length;
      batch.resolve();
    }
    this.#draining = undefined;
  }
}

/**
 * A record as the journal writes it: stamped with `at`, checked against its schema, every
 * registered secret redacted, one line. Throws a JournalError for a record it must not write.
 */
export function encodeJournalRecord(record: JournalRecord, now: () => number = Date.now): string {
  const stamped = record.at === undefined ? { ...record, at: now() } : record;
  // The records a run writes most are checked by hand; the schema decides (and words) the rest.
  const parsed = surelyValidRecord(stamped) ? undefined : JournalRecord.safeParse(stamped);
  if (parsed?.success === false) {
    const issue = parsed.error.issues[0];
    throw new JournalError(
      'invalid_input',
      `Refusing to journal an invalid ${String((record as { type?: unknown }).type)} record: ${issue ? `${issue.path.join('.') || '(record)'}: ${issue.message}` : 'invalid'}.`,
    );
  }
  let text: string;
  try {
    text = JSON.stringify(stamped);
    // A secret inside a string in an escaped form of its own (an error quoting JSON that quotes it)
    // is not found in the JSON text: each string is redacted before encoding then.
    if (mayHoldSecret(text)) text = JSON.stringify(stamped, redactingReplacer);
  } catch (error) {
    throw new JournalError('invalid_input', 'Refusing to journal a record that cannot be written as JSON (a cycle, or nesting too deep).', {
      cause: error,
    });
  }
  const scrubbed = redactJsonText(text);
  // A secret that only appears across JSON syntax cannot be cut out of it; a redaction must leave valid JSON.
  if (scrubbed === undefined)
    throw new JournalError('invalid_input', 'Refusing to journal a record whose serialised form contains a secret.');
  if (scrubbed !== text) {
    try {
      JSON.parse(scrubbed);
    } catch {
      throw new JournalError('invalid_input', 'Refusing to journal a record whose serialised form contains a secret.');
    }
  }
  return lineText(scrubbed);
}

/**
 * Appends records to the journal of a run that has ended (its Journal closed, so its last line is
 * whole): one write in append mode, then synced. For what happens after run_finished, such as the
 * deliveries of its notifications.
 */
export async function appendToClosedJournal(path: string, records: readonly JournalRecord[]): Promise<void> {
  if (records.length === 0) return;
  const text = records.map((r) => encodeJournalRecord(r)).join('');
  const handle = await open(path, 'a');
  try {
    await handle.write(text);
    await handle.datasync();
  } finally {
    await handle.close();
  }
}
