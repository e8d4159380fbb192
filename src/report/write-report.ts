import { open, rename, rm, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { readPlanFile } from '../run/run-dir.js';
import { copyText } from '../util/copy-text.js';
import { summarizeCostReport, type CostSummary } from './cost-report.js';
import { CSV_FORMAT, JSON_FORMAT, MARKDOWN_FORMAT, type ReportFormat } from './render.js';

/** Joins small pieces into writes of about `size` characters. */
export async function writeInChunks(parts: Iterable<string>, write: (chunk: string) => Promise<unknown>, size = 256 * 1024): Promise<void> {
  let chunk = '';
  for (const part of parts) {
    chunk += part;
    if (chunk.length >= size) {
      await write(chunk);
      chunk = '';
    }
  }
  if (chunk.length > 0) await write(chunk);
}

/** A file written in chunks of about 256 KB. */
class Sink {
  #buffer = '';
  private constructor(
    readonly path: string,
    private readonly handle: FileHandle,
  ) {}

  static async open(path: string): Promise<Sink> {
    return new Sink(path, await open(path, 'w'));
  }

  async add(text: string): Promise<void> {
    this.#buffer += text;
    if (this.#buffer.length >= 256 * 1024) await this.flush();
  }

  async flush(): Promise<void> {
    if (this.#buffer.length === 0) return;
    const text = this.#buffer;
    this.#buffer = '';
    await this.handle.write(text);
  }

  async close(): Promise<void> {
    try {
      await this.flush();
    } finally {
      await this.handle.close();
    }
  }
}

const FILES: readonly (readonly [string, ReportFormat])[] = [
  ['report.json', JSON_FORMAT],
  ['report.csv', CSV_FORMAT],
  ['report.md', MARKDOWN_FORMAT],
];

/**
 * Writes report.json, report.csv and report.md into the run directory as the journal streams (each
 * to a temp file renamed into place), in one pass over the instances and in memory bounded whatever
 * the run's size, and returns the report without its instance lines. A format whose head needs the
 * totals (Markdown) gets its instance lines in a section file, copied in after its head.
 */
export async function writeCostReport(runDir: string, options: { creditsPerUsd?: number } = {}): Promise<CostSummary> {
  const plan = await readPlanFile(runDir);
  const rate = options.creditsPerUsd ?? 100;
  // What a head may read before the totals exist: the run's names and the rate.
  const early: CostSummary = { pipeline: plan.pipeline, runId: plan.runId, creditsPerUsd: rate, steps: [], models: [], total: { name: 'total', counts: {} as CostSummary['total']['counts'], estimatedUsd: 0, actualUsd: null, refundedUsd: 0, netUsd: 0, unpricedInstances: 0, rerolls: 0, rerolledNetUsd: 0 } };
  const headFirst = new Set<ReportFormat>([JSON_FORMAT, CSV_FORMAT]);
  const sinks: Sink[] = [];
  try {
    for (const [name, format] of FILES) {
      const sink = await Sink.open(join(runDir, headFirst.has(format) ? `${name}.tmp` : `${name}.lines.tmp`));
      sinks.push(sink);
      if (headFirst.has(format)) await sink.add(format.head(early));
    }
    let index = 0;
    const summary = await summarizeCostReport(runDir, options, async (line) => {
      for (const [i, [, format]] of FILES.entries()) await (sinks[i] as Sink).add(format.instance(line, index, rate));
      index++;
    });
    for (const [i, [name, format]] of FILES.entries()) {
      const sink = sinks[i] as Sink;
      if (headFirst.has(format)) {
        await sink.add(format.tail(summary, index));
        await sink.close();
        continue;
      }
      await sink.close();
      const whole = await Sink.open(join(runDir, `${name}.tmp`));
      try {
        await whole.add(format.head(summary));
        await whole.flush();
        await copyText(sink.path, (chunk) => whole.add(chunk));
        await whole.add(format.tail(summary, index));
      } finally {
        await whole.close();
      }
      await rm(sink.path, { force: true });
    }
    for (const [name] of FILES) await rename(join(runDir, `${name}.tmp`), join(runDir, name));
    return summary;
  } catch (error) {
    for (const sink of sinks) await sink.close().catch(() => undefined);
    for (const [name] of FILES) {
      await rm(join(runDir, `${name}.tmp`), { force: true });
      await rm(join(runDir, `${name}.lines.tmp`), { force: true });
    }
    throw error;
  }
}
