/**
 * outputs.csv: one row per downloaded file (or one per instance without files), sorted by instance
 * id, written when the run ends.
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

/** `reroll_seed` is the seed an nsfw re-roll actually sent, when the instance was re-rolled. */
export const OUTPUTS_CSV_HEADER = csvRow(['instance', 'step', 'axes', 'request_id', 'status', 'file', 'sha256', 'reroll_seed']);

const SPILL_NAME = '.outputs-rows.jsonl';
/** Spilled rows are written in batches of about this many characters. */
const SPILL_BATCH = 64 * 1024;
/** outputs.csv is written in chunks of about this many characters. */
const WRITE_CHUNK = 1024 * 1024;

export class OutputsCsv {
  readonly #runDir: string;
  readonly #spill: FileHandle;
  #buffer = '';
  /** The spill writes, in order; the first failure is kept and reported by `write`. */
  #writing: Promise<void> = Promise.resolve();

  private constructor(runDir: string, spill: FileHandle) {
    this.#runDir = runDir;
    this.#spill = spill;
  }

  static async open(runDir: string): Promise<OutputsCsv> {
    return new OutputsCsv(runDir, await open(join(runDir, SPILL_NAME), 'w', 0o600));
  }

  /** Closes and removes the spill file without writing outputs.csv (the run could not start). */
  async abandon(): Promise<void> {
    await this.#spill.close().catch(() => undefined);
    await unlink(join(this.#runDir, SPILL_NAME)).catch(() => undefined);
  }

  /** Sets aside the rows (CSV text, one or more lines) of a finished instance. */
  add(id: string, rows: string): void {
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
   * Writes outputs.csv from the spilled rows and `unfinished` (instances still in the run's state),
   * sorted by id (UTF-16 code units), then removes the spill file.
   */
  async write(unfinished: Iterable<[string, string]>): Promise<void> {
    this.#flush();
    try {
      await this.#writing;
    } finally {
      await this.#spill.close();
    }
    const spillPath = join(this.#runDir, SPILL_NAME);
    const entries: [string, string][] = [];
    for await (const entry of readSpill(spillPath)) entries.push(entry);
    for (const entry of unfinished) entries.push(entry);
    entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    const path = join(this.#runDir, 'outputs.csv');
    const handle = await open(`${path}.tmp`, 'w');
    try {
      let chunk = OUTPUTS_CSV_HEADER;
      for (const [, rows] of entries) {
        chunk += rows;
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
    await unlink(spillPath).catch(() => undefined);
  }
}

/** The spilled [id, rows] pairs, read a chunk at a time. */
async function* readSpill(path: string): AsyncGenerator<[string, string]> {
  let rest = '';
  for await (const chunk of createReadStream(path, { encoding: 'utf8', highWaterMark: 1024 * 1024 })) {
    const lines = (rest + (chunk as string)).split('\n');
    rest = lines.pop() ?? '';
    for (const line of lines) if (line.length > 0) yield JSON.parse(line) as [string, string];
  }
  if (rest.length > 0) yield JSON.parse(rest) as [string, string];
}
