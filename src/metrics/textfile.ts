/**
 * `genpipe run --metrics-file PATH`: the figures of one run, written when it ends in the format
 * node_exporter's textfile collector reads (the Prometheus text format, no timestamps), for cron
 * jobs, which nobody scrapes while they run. The file is written whole under a temporary name in
 * the same folder, then renamed over PATH: a scraper reads the old file or the new one, never
 * half of one. Its temporary name does not end in `.prom`, so the collector never reads it.
 */
import { randomBytes } from 'node:crypto';
import { rename, rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { Gauge, Registry } from 'prom-client';
import { runListing, type RunSums } from '../report/run-list.js';
import type { RunObserver } from '../run/observer.js';
import { LiveFigures, RunFigures } from './metrics.js';

/** Writes `text` to `path` at once: a temporary file beside it, then a rename. */
export async function writeTextfile(path: string, text: string): Promise<void> {
  const temp = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  try {
    await writeFile(temp, text, { mode: 0o644 });
    await rename(temp, path);
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
}

/** How a run ended, for its textfile. */
export interface RunEnd {
  /** The run's directory, once it existed (a run refused before it has none). */
  runDir?: string | undefined;
  /** The exit code of genpipe run. */
  exitCode: number;
}

/** The figures of one run: live ones told by the run as it goes (`observer`), the rest read at the end. */
export class RunMetrics {
  readonly registry = new Registry();
  readonly observer: RunObserver = new LiveFigures(this.registry);
  readonly #figures = new RunFigures(this.registry);
  readonly #exit = new Gauge({
    name: 'genpipe_run_exit_code',
    help: 'The exit code of the last genpipe run that wrote this file (0 all succeeded; see the exit codes reference).',
    labelNames: ['pipeline'],
    registers: [this.registry],
  });
  readonly #ended = new Gauge({
    name: 'genpipe_run_end_timestamp_seconds',
    help: 'Unix time the last genpipe run that wrote this file ended.',
    labelNames: ['pipeline'],
    registers: [this.registry],
  });

  /** The exposition of the run as it ended. */
  async render(end: RunEnd): Promise<string> {
    let pipeline: string | undefined;
    if (end.runDir !== undefined) {
      const runDir = end.runDir;
      let summary: RunSums | undefined;
      // The same listing `genpipe runs` prints for this run, and the same cost summary as its report.
      const listing = await runListing(dirname(dirname(runDir)), basename(dirname(runDir)), basename(runDir), (_, s) => {
        summary = s;
      }).catch(() => undefined);
      if (listing && summary) {
        pipeline = summary.pipeline;
        this.#figures.set([{ listing: { ...listing, pipeline }, summary }]);
      }
    }
    const labels = pipeline === undefined ? {} : { pipeline };
    this.#exit.set(labels, end.exitCode);
    this.#ended.set(labels, Math.round(Date.now() / 1000));
    return this.registry.metrics();
  }

  /** Renders and writes the run's figures to `path` (writeTextfile). */
  async write(path: string, end: RunEnd): Promise<void> {
    await writeTextfile(path, await this.render(end));
  }
}
