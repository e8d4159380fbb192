/**
 * outputs.csv and outputs.jsonl: one row (record) per downloaded file, or one per instance without
 * files (columns: output-rows.ts), sorted by instance id in natural order, written when the run ends.
 *
 * A finished instance's rows are not kept in memory until then: they are appended to a spill file
 * in the run directory as the instance finishes, so a run of millions of instances holds only the
 * ones in flight. At the end the spill file is read back line by line, sorted with the rows of
 * instances that never finished (external-sort.ts: in memory up to 25,000 instances, beyond that
 * in sorted runs merged from disk, so the end of a run of millions needs no more memory than one
 * of 25,000), written in one pass to temp files renamed into place, and removed. A crash leaves the spill
 * file behind; the next run of the directory starts it afresh (a resume visits every instance again).
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { processAlive } from '../../util/process-alive.js';
import { open, readdir, rename, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { csvRow } from '../../util/csv.js';
import { keyOfLine, sortLines } from '../../util/external-sort.js';
import { naturalCompare } from '../../util/natural-compare.js';
import { streamLinesOfFile } from '../../util/read-lines.js';
import { LEADING_COLUMNS, SINK_COLUMNS, TRAILING_COLUMNS, type OutputRow } from './output-rows.js';
import { redactingReplacer } from '../../util/redact.js';
import { runFile } from './run-layout.js';

/** The header of outputs.csv for these axis columns; `sink`: the run has a storage sink (sink_uri, sink_url, sink_status). */
export const outputsCsvHeader = (axisColumns: readonly string[], sink = false): string =>
  csvRow([...LEADING_COLUMNS, ...axisColumns, ...TRAILING_COLUMNS, ...(sink ? SINK_COLUMNS : [])]);

function csvLine(row: OutputRow, axisColumns: readonly string[], sink: boolean): string {
  const cells = [
    row.instance,
    row.step,
    ...axisColumns.map((c) => row.axes[c] ?? ''),
    row.status,
    row.error ?? '',
    row.request_id ?? '',
    row.job_set_id ?? '',
    row.reroll_seed ?? '',
    row.role ?? '',
    row.file ?? '',
    row.sha256 ?? '',
    row.cost_usd ?? '',
  ];
  if (sink) cells.push(row.sink_uri ?? '', row.sink_url ?? '', row.sink_status ?? '');
  return csvRow(cells);
}

/**
 * The spill file of this process's writer: named per process, so a run taken over (a stale lock,
 * --break-lock) has its new holder write its own, never open or remove the old holder's (with
 * a shared name, the new holder crashed with ENOENT).
 */
const spillName = (): string => `.outputs-rows-${process.pid}-${randomBytes(4).toString('hex')}-${hostTag()}.jsonl`;
/** This host, as a file name may carry it: a pid means something only on its own host. */
const hostTag = (): string =>
  hostname()
    .replace(/[^A-Za-z0-9.-]/g, '_')
    .slice(0, 64);
/** Spilled rows are written in batches of about this many characters. */
const SPILL_BATCH = 64 * 1024;
/** Instances sorted in memory at once (external-sort.ts); beyond, sorted runs are merged from disk. */
const SORT_CHUNK = 25_000;
/** outputs.csv is written in chunks of about this many characters. */
const WRITE_CHUNK = 1024 * 1024;

export class OutputsCsv {
  readonly #runDir: string;
  readonly #spillName: string;
  readonly #spill: FileHandle;
  readonly #columns: readonly string[];
  readonly #sortChunk: number;
  readonly #sink: boolean;
  #buffer = '';
  /** The spill writes, in order; the first failure is kept and reported by `write`. */
  #writing: Promise<void> = Promise.resolve();

  private constructor(runDir: string, name: string, spill: FileHandle, columns: readonly string[], sortChunk: number, sink: boolean) {
    this.#sink = sink;
    this.#spillName = name;
    this.#sortChunk = sortChunk;
    this.#runDir = runDir;
    this.#spill = spill;
    this.#columns = columns;
  }

  /**
   * `axisColumns`: the plan's axis columns (output-rows.ts axisColumns); `sortChunk`: instances
   * sorted in memory at once; `sink`: the run has a storage sink, so outputs.csv ends with
   * sink_uri, sink_url and sink_status (outputs.jsonl carries them on the rows that have them either way).
   */
  static async open(
    runDir: string,
    axisColumns: readonly string[] = [],
    options: { sortChunk?: number; sink?: boolean } = {},
  ): Promise<OutputsCsv> {
    await removeDeadSpills(runDir);
    const name = spillName();
    return new OutputsCsv(
      runDir,
      name,
      await open(join(runDir, name), 'w', 0o600),
      axisColumns,
      options.sortChunk ?? SORT_CHUNK,
      options.sink === true,
    );
  }

  /** Closes and removes the spill file without writing outputs.csv (the run could not start). */
  async abandon(): Promise<void> {
    await this.#spill.close().catch(() => undefined);
    await unlink(join(this.#runDir, this.#spillName)).catch(() => undefined);
  }

  /** Sets aside the rows of a finished instance. */
  add(id: string, rows: readonly OutputRow[]): void {
    this.#buffer += spillLine(id, rows);
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
    const spillPath = join(this.#runDir, this.#spillName);
    const unfinishedLines: string[] = [];
    for (const [id, rows] of unfinished) unfinishedLines.push(spillLine(id, rows).slice(0, -1));
    const sorted = sortLines(concat(streamLinesOfFile(spillPath), unfinishedLines), naturalCompare, {
      chunk: this.#sortChunk,
      decode: (raw) => JSON.parse(raw) as string,
    });
    await writeBoth(this.#runDir, outputsCsvHeader(this.#columns, this.#sink), sorted, (row) => csvLine(row, this.#columns, this.#sink));
    await unlink(spillPath).catch(() => undefined);
  }
}

/** A spill line: the id (JSON, so it holds no tab or newline), a tab, the rows (JSON). */
// Redacted here, before the spill file: every value (a service's error text, a CSV cell) is
// written to outputs.csv and outputs.jsonl from these lines.
const spillLine = (id: string, rows: readonly OutputRow[]): string => `${JSON.stringify(id)}\t${JSON.stringify(rows, redactingReplacer)}\n`;

async function* concat<T>(...sources: (AsyncIterable<T> | Iterable<T>)[]): AsyncGenerator<T> {
  for (const source of sources) yield* source;
}

/**
 * Writes outputs.csv (`head`, then every row's line) and outputs.jsonl from the sorted spill lines,
 * in one pass, each to a temp file renamed into place.
 */
async function writeBoth(runDir: string, head: string, lines: AsyncIterable<string>, csv: (row: OutputRow) => string): Promise<void> {
  const csvPath = runFile(runDir, 'outputsCsv');
  const jsonlPath = runFile(runDir, 'outputsJsonl');
  // This writer's own temporary names: a holder displaced as it finished and the one that took over
  // never rename each other's files (on a crash they are left; the next write replaces the outputs).
  const tmp = `${process.pid}-${randomBytes(4).toString('hex')}.tmp`;
  const csvFile = await open(`${csvPath}.${tmp}`, 'w');
  try {
    const jsonlFile = await open(`${jsonlPath}.${tmp}`, 'w');
    try {
      let csvChunk = head;
      let jsonlChunk = '';
      for await (const line of lines) {
        for (const row of JSON.parse(line.slice(keyOfLine(line).length + 1)) as OutputRow[]) {
          csvChunk += csv(row);
          jsonlChunk += `${JSON.stringify(row)}\n`;
        }
        if (csvChunk.length + jsonlChunk.length < WRITE_CHUNK) continue;
        await csvFile.write(csvChunk);
        await jsonlFile.write(jsonlChunk);
        csvChunk = '';
        jsonlChunk = '';
      }
      await csvFile.write(csvChunk);
      await jsonlFile.write(jsonlChunk);
    } finally {
      await jsonlFile.close();
    }
  } finally {
    await csvFile.close();
  }
  await rename(`${csvPath}.${tmp}`, csvPath);
  await rename(`${jsonlPath}.${tmp}`, jsonlPath);
}

/** Spill files a crashed writer left (its process is gone), and the single one of older genpipe. */
async function removeDeadSpills(runDir: string): Promise<void> {
  const names = await readdir(runDir).catch(() => [] as string[]);
  for (const name of names) {
    const match = /^\.outputs-rows-(\d+)-[0-9a-f]+-(.+)\.jsonl$/.exec(name);
    const dead = match !== null && match[2] === hostTag() && !processAlive(Number(match[1]));
    if (name === '.outputs-rows.jsonl' || dead) await unlink(join(runDir, name)).catch(() => undefined);
  }
}
