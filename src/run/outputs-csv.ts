/**
 * outputs.csv and outputs.jsonl: one row (record) per downloaded file, or one per instance without
 * files (columns: output-rows.ts), sorted by instance id in natural order, written when the run ends.
 *
 * A finished instance's rows are not kept in memory until then: they are appended to a spill file
 * in the run directory as the instance finishes, so a run of millions of instances holds only the
 * ones in flight. At the end the spill file is read back, sorted with the rows of instances that
 * never finished, written to a temp file renamed into place, and removed. A crash leaves the spill
 * file behind; the next run of the directory starts it afresh (a resume visits every instance again).
 */
import { createReadStream } from 'node:fs';
import { open, rename, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { csvRow } from '../util/csv.js';
import { naturalCompare } from '../util/natural-compare.js';
import { LEADING_COLUMNS, TRAILING_COLUMNS, type OutputRow } from './output-rows.js';

/** The header of outputs.csv for these axis columns. */
export const outputsCsvHeader = (axisColumns: readonly string[]): string => csvRow([...LEADING_COLUMNS, ...axisColumns, ...TRAILING_COLUMNS]);

function csvLine(row: OutputRow, axisColumns: readonly string[]): string {
  return csvRow([row.instance, row.step, ...axisColumns.map((c) => row.axes[c] ?? ''), row.status, row.error ?? '', row.request_id ?? '', row.job_set_id ?? '', row.reroll_seed ?? '', row.role ?? '', row.file ?? '', row.sha256 ?? '', row.cost_usd ?? '']);
}

const SPILL_NAME = '.outputs-rows.jsonl';
/** Spilled rows are written in batches of about this many characters. */
const SPILL_BATCH = 64 * 1024;
/** outputs.csv is written in chunks of about this many characters. */
const WRITE_CHUNK = 1024 * 1024;

export class OutputsCsv {
  readonly #runDir: string;
  readonly #spill: FileHandle;
  readonly #columns: readonly string[];
  #buffer = '';
  /** The spill writes, in order; the first failure is kept and reported by `write`. */
  #writing: Promise<void> = Promise.resolve();

  private constructor(runDir: string, spill: FileHandle, columns: readonly string[]) {
    this.#runDir = runDir;
    this.#spill = spill;
    this.#columns = columns;
  }

  /** `axisColumns`: the plan's axis columns (output-rows.ts axisColumns). */
  static async open(runDir: string, axisColumns: readonly string[] = []): Promise<OutputsCsv> {
    return new OutputsCsv(runDir, await open(join(runDir, SPILL_NAME), 'w', 0o600), axisColumns);
  }

  /** Closes and removes the spill file without writing outputs.csv (the run could not start). */
  async abandon(): Promise<void> {
    await this.#spill.close().catch(() => undefined);
    await unlink(join(this.#runDir, SPILL_NAME)).catch(() => undefined);
  }

  /** Sets aside the rows of a finished instance. */
  add(id: string, rows: readonly OutputRow[]): void {
    this.#buffer += `${JSON.stringify([id, rows])}\n`;
    if (this.#buffer.length >= SPILL_BATCH) this.#flush();
  }

  #flush(): void {
    const chunk = this.#buffer;
    this.#buffer = '';
    if (chunk.length === 0) return;
    this.#writing = this.#writing.then(async () => {
      await this.#spill.write(chunk);
    });
  }

  /**
   * Writes outputs.csv and outputs.jsonl from the spilled rows and `unfinished` (instances still in
   * the run's state), sorted by id in natural order, then removes the spill file.
   */
  async write(unfinished: Iterable<[string, readonly OutputRow[]]>): Promise<void> {
    this.#flush();
    try {
      await this.#writing;
    } finally {
      await this.#spill.close();
    }
    const spillPath = join(this.#runDir, SPILL_NAME);
    const entries: [string, readonly OutputRow[]][] = [];
    for await (const entry of readSpill(spillPath)) entries.push(entry);
    for (const entry of unfinished) entries.push(entry);
    entries.sort(([a], [b]) => naturalCompare(a, b));
    await writeChunked(join(this.#runDir, 'outputs.csv'), outputsCsvHeader(this.#columns), entries, (row) => csvLine(row, this.#columns));
    await writeChunked(join(this.#runDir, 'outputs.jsonl'), '', entries, (row) => `${JSON.stringify(row)}\n`);
    await unlink(spillPath).catch(() => undefined);
  }
}

/** Writes `head` then every row's line to a temp file, in chunks, and renames it into place. */
async function writeChunked(path: string, head: string, entries: readonly [string, readonly OutputRow[]][], line: (row: OutputRow) => string): Promise<void> {
  const handle = await open(`${path}.tmp`, 'w');
  try {
    let chunk = head;
    for (const [, rows] of entries) {
      for (const row of rows) chunk += line(row);
      if (chunk.length > WRITE_CHUNK) {
        await handle.write(chunk);
        chunk = '';
      }
    }
    await handle.write(chunk);
  } finally {
    await handle.close();
  }
  await rename(`${path}.tmp`, path);
}

/** The spilled [id, rows] pairs, read a chunk at a time. */
async function* readSpill(path: string): AsyncGenerator<[string, OutputRow[]]> {
  let rest = '';
  for await (const chunk of createReadStream(path, { encoding: 'utf8', highWaterMark: 1024 * 1024 })) {
    const lines = (rest + (chunk as string)).split('\n');
    rest = lines.pop() ?? '';
    for (const line of lines) if (line.length > 0) yield JSON.parse(line) as [string, OutputRow[]];
  }
  if (rest.length > 0) yield JSON.parse(rest) as [string, OutputRow[]];
}
