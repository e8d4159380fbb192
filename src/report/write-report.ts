import { rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { readPlanFile } from '../run/run-dir.js';
import { ByteSink } from '../util/byte-sink.js';
import { summarizeCostReport, type CostSummary } from './cost-report.js';
import { CSV_FORMAT, JSON_FORMAT, MARKDOWN_FORMAT, type ReportFormat } from './render.js';

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
  const sinks: ByteSink[] = [];
  try {
    for (const [name, format] of FILES) {
      const sink = new ByteSink(join(runDir, headFirst.has(format) ? `${name}.tmp` : `${name}.lines.tmp`));
      sinks.push(sink);
      if (headFirst.has(format)) sink.add(format.head(early));
    }
    let index = 0;
    const summary = await summarizeCostReport(runDir, options, (line) => {
      for (const [i, [, format]] of FILES.entries()) (sinks[i] as ByteSink).add(format.instance(line, index, rate));
      index++;
    });
    for (const [i, [name, format]] of FILES.entries()) {
      const sink = sinks[i] as ByteSink;
      if (headFirst.has(format)) {
        sink.add(format.tail(summary, index));
        sink.close();
        continue;
      }
      sink.close();
      const whole = new ByteSink(join(runDir, `${name}.tmp`));
      try {
        whole.add(format.head(summary));
        whole.addFile(sink.path);
        whole.add(format.tail(summary, index));
      } finally {
        whole.close();
      }
      await rm(sink.path, { force: true });
    }
    for (const [name] of FILES) await rename(join(runDir, `${name}.tmp`), join(runDir, name));
    return summary;
  } catch (error) {
    for (const sink of sinks) {
      try {
        sink.close();
      } catch {
        // the first error is the one to report
      }
    }
    for (const [name] of FILES) {
      await rm(join(runDir, `${name}.tmp`), { force: true });
      await rm(join(runDir, `${name}.lines.tmp`), { force: true });
    }
    throw error;
  }
}
