import { open, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { buildCostReport, type CostReport } from './cost-report.js';
import { reportCsvParts, reportJsonParts, reportMarkdownParts } from './render.js';

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

/**
 * Writes report.json, report.csv and report.md into the run directory (each to a temp file renamed
 * into place, and in chunks, so a report of any size never sits in memory as text) and returns the report.
 */
export async function writeCostReport(runDir: string, options: { creditsPerUsd?: number } = {}): Promise<CostReport> {
  const report = await buildCostReport(runDir, options);
  for (const [name, parts] of [
    ['report.json', reportJsonParts],
    ['report.csv', reportCsvParts],
    ['report.md', reportMarkdownParts],
  ] as const) {
    const path = join(runDir, name);
    const handle = await open(`${path}.tmp`, 'w');
    try {
      await writeInChunks(parts(report), (chunk) => handle.write(chunk));
    } finally {
      await handle.close();
    }
    await rename(`${path}.tmp`, path);
  }
  return report;
}
