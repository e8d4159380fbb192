/**
 * CSV rows for a sweep axis: a header row, then one record per line, parsed with csv-parse.
 *
 * The size cap comes before any read: the file is stat'ed and refused when over MAX_CSV_BYTES, so
 * a 300 MB file costs nothing (it was read whole first, 387 MB of memory). Then it is streamed
 * through the parser, never held as one string, and the cap is enforced again on the bytes read
 * in case the file grows between the stat and the read.
 */
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import { CsvError as ParseError, parse } from 'csv-parse';
import type { SourceLocation } from '../util/yaml-source.js';
import { containsSecret } from '../util/redact.js';

/** A CSV record: its columns, plus the line it starts on (for ids and error messages). */
export interface CsvRow {
  readonly line: number;
  readonly values: Readonly<Record<string, string>>;
}

export class CsvError extends Error {
  override readonly name = 'CsvError';
  constructor(
    message: string,
    readonly location: SourceLocation,
    /** The file could not be read at all (missing, say): the error of the read, for the caller to name the file where it is referenced. */
    readonly unreadable?: unknown,
  ) {
    super(message);
  }
}

/** Largest CSV file accepted, in bytes (64 MiB). */
export const MAX_CSV_BYTES = 64 * 1024 * 1024;

export interface ReadCsvOptions {
  /** Largest file accepted, in bytes. Default MAX_CSV_BYTES. */
  maxBytes?: number;
  /** The field separator. Default ",". */
  delimiter?: string | undefined;
}

export async function readCsv(
  path: string,
  displayPath: string = path,
  options: ReadCsvOptions = {},
): Promise<{ columns: string[]; rows: CsvRow[] }> {
  const maxBytes = options.maxBytes ?? MAX_CSV_BYTES;
  const start: SourceLocation = { file: displayPath, line: 1, col: 1 };
  const unreadable = (error: unknown): CsvError =>
    new CsvError(`cannot read the CSV file: ${(error as NodeJS.ErrnoException).code ?? 'unknown error'}`, start, error);
  let size: number;
  try {
    const info = await stat(path);
    if (!info.isFile()) throw new CsvError('the CSV file is not a regular file', start);
    size = info.size;
  } catch (error) {
    throw error instanceof CsvError ? error : unreadable(error);
  }
  if (size > maxBytes) throw new CsvError(`the CSV file is ${size} bytes, over the limit of ${maxBytes}`, start);

  let columns: string[] = [];
  const rows: CsvRow[] = [];
  const parser = parse({
    bom: true,
    delimiter: options.delimiter ?? ',',
    skip_empty_lines: true,
    info: true,
    columns: (header: string[]) => {
      refuseOtherSeparator(header, options.delimiter, start);
      const seen = new Set<string>();
      header.forEach((name, index) => {
        const trimmed = name.trim();
        if (trimmed === '')
          throw new CsvError(`column ${index + 1} of the header row has no name`, { file: displayPath, line: 1, col: index + 1 });
        if (seen.has(trimmed))
          throw new CsvError(`column ${index + 1} of the header row repeats the name "${trimmed}"`, {
            file: displayPath,
            line: 1,
            col: index + 1,
          });
        seen.add(trimmed);
      });
      columns = header.map((h) => h.trim());
      return columns;
    },
  });
  let read = 0;
  try {
    await pipeline(
      // `end` is inclusive: at most maxBytes + 1 bytes are read, enough to see the file grew.
      createReadStream(path, { start: 0, end: maxBytes }),
      async function* capped(chunks: AsyncIterable<Buffer>) {
        for await (const chunk of chunks) {
          read += chunk.length;
          if (read > maxBytes) throw new CsvError(`the CSV file grew past the limit of ${maxBytes} bytes while it was read`, start);
          yield chunk;
        }
      },
      parser,
      async (records: AsyncIterable<{ record: Record<string, string>; info: { lines: number } }>) => {
        // info.lines is the line a record ends on; a record spanning lines starts earlier, which is
        // rare enough that the end line is an honest location.
        for await (const { record, info } of records) {
          // Bytes that are not UTF-8 are read as U+FFFD: refused where they are, never sent garbled.
          const garbled = Object.entries(record).find(([, cell]) => cell.includes('\uFFFD'));
          if (garbled) {
            throw new CsvError(`row ${info.lines}, column "${garbled[0]}" holds bytes that are not UTF-8 text: save the file as UTF-8`, {
              file: displayPath,
              line: info.lines,
              col: columns.indexOf(garbled[0]) + 1,
            });
          }
          rows.push({ line: info.lines, values: record });
        }
      },
    );
  } catch (error) {
    if (error instanceof CsvError) throw error;
    if (!(error instanceof ParseError)) throw unreadable(error);
    const e = error as ParseError & { lines?: number; column?: string | number };
    // A credentials file rarely parses as CSV (a quoted secret), and the parser's message quotes the field.
    if (CREDENTIAL_WORD.test(e.message)) refuseCredentialsAt(displayPath, e.lines ?? 1, 1);
    const col = typeof e.column === 'string' ? columns.indexOf(e.column) + 1 : typeof e.column === 'number' ? e.column + 1 : 1;
    throw new CsvError(e.message.replace(/ on line \d+$/, ''), { file: displayPath, line: e.lines ?? 1, col: Math.max(1, col) });
  }
  if (columns.length === 0) throw new CsvError('the CSV file has no header row', start);
  refuseCredentials(columns, rows, displayPath);
  return { columns, rows };
}

/** A line of a credentials file (config.ts, credentials.ts): `key_secret: ...`, `hf-secret: ...`, `key_id: ...`. */
const CREDENTIAL_LINE = /^\s*["']?(key_secret|key_id|hf[-_]secret|hf[-_]api[-_]key|hf[-_]key)["']?\s*[:=]/i;

const CREDENTIAL_WORD = /(key_secret|key_id|hf[-_]secret|hf[-_]api[-_]key)["']?\s*[:=]/i;

function refuseCredentialsAt(file: string, line: number, col: number): never {
  throw new CsvError(
    'this file holds credentials (a key_secret, key_id or hf-secret line, or a secret genpipe uses); genpipe does not read credentials into a plan: point the CSV axis at a data file',
    { file, line, col },
  );
}

/**
 * A CSV axis pointed at a credentials file (or at any file holding a secret genpipe uses) would
 * copy the secret into every instance, outputs.csv and outputs.jsonl: refused at plan time, at
 * the cell, without quoting it.
 */
function refuseCredentials(columns: readonly string[], rows: readonly CsvRow[], file: string): void {
  const refuse = (line: number, col: number): never => refuseCredentialsAt(file, line, col);
  columns.forEach((name, index) => {
    if (CREDENTIAL_LINE.test(name) || containsSecret(name)) refuse(1, index + 1);
  });
  for (const row of rows) {
    columns.forEach((name, index) => {
      const value = row.values[name] ?? '';
      if (CREDENTIAL_LINE.test(value) || containsSecret(value)) refuse(row.line, index + 1);
    });
  }
}

/** A header of one column holding `;` (or a tab, or `|`) is almost surely a file with another separator. */
function refuseOtherSeparator(header: readonly string[], delimiter: string | undefined, start: SourceLocation): void {
  if (delimiter !== undefined || header.length !== 1) return;
  const other = [';', '\t', '|'].find((d) => (header[0] as string).includes(d));
  if (other === undefined) return;
  const shown = other === '\t' ? '"\\t"' : `"${other}"`;
  throw new CsvError(
    `the header row is a single column holding ${shown}: if the file is separated by ${shown}, add delimiter: ${shown} to the csv axis`,
    start,
  );
}
