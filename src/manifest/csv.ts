/** CSV rows for a sweep axis: a header row, then one record per line, parsed with csv-parse. */
import { readFileSync } from 'node:fs';
import { parse } from 'csv-parse/sync';
import type { SourceLocation } from '../util/yaml-source.js';

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
  ) {
    super(message);
  }
}

/** Largest CSV file accepted, in bytes. */
export const MAX_CSV_BYTES = 64 * 1024 * 1024;

export function readCsv(path: string, displayPath: string = path): { columns: string[]; rows: CsvRow[] } {
  let text: string;
  try {
    const buffer = readFileSync(path);
    if (buffer.length > MAX_CSV_BYTES) throw new CsvError(`the CSV file is larger than ${MAX_CSV_BYTES} bytes`, { file: displayPath, line: 1, col: 1 });
    text = buffer.toString('utf8');
  } catch (error) {
    if (error instanceof CsvError) throw error;
    throw new CsvError(`cannot read the CSV file: ${(error as NodeJS.ErrnoException).code ?? 'unknown error'}`, { file: displayPath, line: 1, col: 1 });
  }
  let columns: string[] = [];
  let records: { record: Record<string, string>; info: { lines: number } }[];
  try {
    records = parse(text, {
      bom: true,
      skip_empty_lines: true,
      info: true,
      columns: (header: string[]) => {
        const seen = new Set<string>();
        header.forEach((name, index) => {
          const trimmed = name.trim();
          if (trimmed === '') throw new CsvError(`column ${index + 1} of the header row has no name`, { file: displayPath, line: 1, col: index + 1 });
          if (seen.has(trimmed)) throw new CsvError(`column ${index + 1} of the header row repeats the name "${trimmed}"`, { file: displayPath, line: 1, col: index + 1 });
          seen.add(trimmed);
        });
        columns = header.map((h) => h.trim());
        return columns;
      },
    }) as { record: Record<string, string>; info: { lines: number } }[];
  } catch (error) {
    if (error instanceof CsvError) throw error;
    const e = error as { message: string; lines?: number; column?: string | number; code?: string };
    const col = typeof e.column === 'string' ? columns.indexOf(e.column) + 1 : typeof e.column === 'number' ? e.column + 1 : 1;
    throw new CsvError(e.message.replace(/ on line \d+$/, ''), { file: displayPath, line: e.lines ?? 1, col: Math.max(1, col) });
  }
  if (columns.length === 0) throw new CsvError('the CSV file has no header row', { file: displayPath, line: 1, col: 1 });
  // info.lines is the line a record ends on; a record spanning lines starts earlier, which is rare
  // enough that the end line is an honest location.
  return { columns, rows: records.map(({ record, info }) => ({ line: info.lines, values: record })) };
}
