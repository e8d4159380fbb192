/**
 * `journal.jsonl`: the append-only journal that is the run's source of truth (runner issue #5).
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
 *   not know) is **skipped and reported** in `corrupt`, and reading goes on. Why skip rather than
 *   stop: every record carries its own checksum and names its own instance, so a later record does
 *   not depend on the bytes of an earlier one; stopping would throw away every later, verified
 *   fact (an intent, a request id) and make a blind resend, i.e. a double spend, *more* likely.
 *   Deciding whether a run with `corrupt` lines may resume is the resume layer's call (it should
 *   refuse without an explicit flag, since the lost line may have been an intent).
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
import { GenpipeError } from '../api/errors.js';
import { redactJsonText } from '../util/redact.js';
import { JOURNAL_RECORD_TYPES, JournalRecord } from './journal-records.js';
import { syncDirectory } from './sync-directory.js';

const NEWLINE = 0x0a;
const PREFIX_LENGTH = 9; // 8 hex digits and a space
/** About the largest single write, in characters; a batch is closed before it grows past it. */
const MAX_BATCH_CHARS = 4 * 1024 * 1024;

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

/** Checks one line (without its newline). `integrity` failures are the ones a torn write causes. */
function checkLine(bytes: Buffer): LineCheck {
  if (bytes.length < PREFIX_LENGTH + 2) return { ok: false, integrity: true, reason: 'line too short' };
  const prefix = bytes.toString('latin1', 0, PREFIX_LENGTH);
  if (!/^[0-9a-f]{8} $/.test(prefix)) return { ok: false, integrity: true, reason: 'malformed checksum prefix' };
  const body = bytes.subarray(PREFIX_LENGTH);
  const expected = Number.parseInt(prefix.slice(0, 8), 16);
  if (crc32(body) !== expected) return { ok: false, integrity: true, reason: 'checksum mismatch' };
  let json: unknown;
  try {
    json = JSON.parse(body.toString('utf8'));
  } catch {
    return { ok: false, integrity: false, reason: 'checksum matches but the text is not JSON' };
  }
  const type = (json as { type?: unknown } | null)?.type;
  if (typeof type === 'string' && !JOURNAL_RECORD_TYPES.has(type)) return { ok: false, integrity: false, reason: `unknown record type "${type.slice(0, 40)}"` };
  const parsed = JournalRecord.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return { ok: false, integrity: false, reason: `invalid record: ${issue ? `${issue.path.join('.') || '(record)'}: ${issue.message}` : 'invalid'}` };
  }
  return { ok: true, value: parsed.data };
}

/**
 * Walks the lines of a journal fed to it in chunks, applying the torn-tail and corruption rules of
 * the header comment. `size` is the file's length, so a line knows whether it is the last one before
 * the end is reached. Lines inside a chunk are checked in place; only a line cut by a chunk boundary
 * is copied. Valid records go to `onRecord` as they are read: nothing is kept but the problems.
 */
class JournalScanner {
  readonly #size: number;
  readonly #onRecord: (record: JournalRecord) => void;
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

  constructor(size: number, onRecord: (record: JournalRecord) => void, skip?: (line: Buffer) => boolean) {
    this.#size = size;
    this.#onRecord = onRecord;
    this.#skip = skip;
  }

  push(chunk: Buffer): void {
    let start = 0;
    // Bounded: each turn consumes at least one byte of `chunk`.
    for (let end = chunk.indexOf(NEWLINE, start); end !== -1; end = chunk.indexOf(NEWLINE, start)) {
      const lineStart = this.#rest === undefined ? this.#offset + start : this.#restStart;
      const bytes = this.#rest === undefined ? chunk.subarray(start, end) : Buffer.concat([this.#rest, chunk.subarray(start, end)]);
      this.#rest = undefined;
      this.#check(bytes, lineStart, this.#offset + end === this.#size - 1);
      start = end + 1;
    }
    if (start < chunk.length) {
      const tail = chunk.subarray(start);
      if (this.#rest === undefined) this.#restStart = this.#offset + start;
      this.#rest = this.#rest === undefined ? Buffer.from(tail) : Buffer.concat([this.#rest, tail]);
    }
    this.#offset += chunk.length;
  }

  #check(bytes: Buffer, lineStart: number, isLast: boolean): void {
    this.#line++;
    if (this.#torn || this.#skip?.(bytes)) return;
    const check = checkLine(bytes);
    if (check.ok) this.#onRecord(check.value as JournalRecord);
    else if (isLast && check.integrity) this.#torn = { at: lineStart };
    else this.#corrupt.push({ line: this.#line, reason: check.reason });
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
 * Reads a journal file a chunk at a time, handing each valid record to `onRecord`; returns the torn
 * tail and corrupt lines. A missing file reads as empty. The file must not grow meanwhile (the run
 * lock sees to that).
 */
export async function scanJournal(path: string, onRecord: (record: JournalRecord) => void): Promise<Omit<ReadJournalResult, 'records'>> {
  let handle: FileHandle;
  try {
    handle = await open(path, 'r');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { tornTail: false, corrupt: [], endOffset: 0 };
    throw error;
  }
  try {
    const scanner = new JournalScanner((await handle.stat()).size, onRecord);
    for await (const chunk of handle.createReadStream({ highWaterMark: 256 * 1024, autoClose: false })) scanner.push(chunk as Buffer);
    return scanner.finish();
  } finally {
    await handle.close();
  }
}

/** True for a line whose record is of one of `types`, judged by the start of its JSON alone. */
function lineOfTypes(types: Iterable<string>): (line: Buffer) => boolean {
  // The journal writes `type` first; a line that puts it elsewhere is simply read in full.
  const prefixes = [...types].map((type) => Buffer.from(`{"type":${JSON.stringify(type)},`));
  return (line) => prefixes.some((prefix) => line.length > PREFIX_LENGTH + prefix.length && line.compare(prefix, 0, prefix.length, PREFIX_LENGTH, PREFIX_LENGTH + prefix.length) === 0);
}

/**
 * Yields the valid records of a journal file one at a time, so that a journal of millions of
 * records never sits in memory. Torn and corrupt lines are skipped (scanJournal reports them; a
 * reader that only sums records, like the cost report, does not need to). Records of the types in
 * `skipTypes` are passed over without being checked or parsed.
 */
export async function* streamJournal(path: string, options: { skipTypes?: Iterable<string> } = {}): AsyncGenerator<JournalRecord> {
  let handle: FileHandle;
  try {
    handle = await open(path, 'r');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw error;
  }
  try {
    const batch: JournalRecord[] = [];
    const skip = options.skipTypes === undefined ? undefined : lineOfTypes(options.skipTypes);
    const scanner = new JournalScanner((await handle.stat()).size, (record) => batch.push(record), skip);
    for await (const chunk of handle.createReadStream({ highWaterMark: 256 * 1024, autoClose: false })) {
      scanner.push(chunk as Buffer);
      yield* batch.splice(0);
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
  override readonly name = 'JournalError';
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
   * name survives a crash). An existing journal is read first; a torn last line is cut off.
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
      recovered = options.onRecord ? { records: [], ...(await scanJournal(path, options.onRecord)) } : await readJournal(path);
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
    if (this.#failure !== undefined) throw new JournalError('invalid_file', `The journal ${this.path} failed to write earlier; it accepts no more records.`, { cause: this.#failure });
    if (this.#closing) throw new JournalError('invalid_file', `The journal ${this.path} is closed.`);
  }

  #encode(record: JournalRecord): string {
    const stamped = record.at === undefined ? { ...record, at: this.#now() } : record;
    const parsed = JournalRecord.safeParse(stamped);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new JournalError('invalid_input', `Refusing to journal an invalid ${String((record as { type?: unknown }).type)} record: ${issue ? `${issue.path.join('.') || '(record)'}: ${issue.message}` : 'invalid'}.`);
    }
    let text: string;
    try {
      text = JSON.stringify(stamped);
    } catch (error) {
      throw new JournalError('invalid_input', 'Refusing to journal a record that cannot be written as JSON (a cycle, or nesting too deep).', { cause: error });
    }
    const scrubbed = redactJsonText(text);
    // A secret that only appears across JSON syntax cannot be cut out of it; a redaction must leave valid JSON.
    if (scrubbed === undefined) throw new JournalError('invalid_input', 'Refusing to journal a record whose serialised form contains a secret.');
    if (scrubbed !== text) {
      try {
        JSON.parse(scrubbed);
      } catch {
        throw new JournalError('invalid_input', 'Refusing to journal a record whose serialised form contains a secret.');
      }
    }
    return lineText(scrubbed);
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
    this.#draining ??= this.#drain();
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
        const wrapped = new JournalError('invalid_file', `Could not write the journal ${this.path}.`, { cause: error });
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
