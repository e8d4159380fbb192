import { rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { buildCostReport, type CostReport } from './cost-report.js';
import { reportCsv, reportJson, reportMarkdown } from './render.js';

/** Writes report.json, report.csv and report.md into the run directory (each atomically) and returns the report. */
export async function writeCostReport(runDir: string, options: { creditsPerUsd?: number } = {}): Promise<CostReport> {
  const report = await buildCostReport(runDir, options);
  for (const [name, text] of [
    ['report.json', reportJson(report)],
    ['report.csv', reportCsv(report)],
    ['report.md', reportMarkdown(report)],
  ] as const) {
    const path = join(runDir, name);
    await writeFile(`${path}.tmp`, text);
    await rename(`${path}.tmp`, path);
  }
  return report;
}
