/** The cost report as JSON, CSV (RFC 4180, formula-safe) and Markdown. */
import { csvRow } from '../util/csv.js';
import { formatUsd } from '../util/format-usd.js';
import type { CostReport, GroupLine, Money } from './cost-report.js';

const credits = (usd: number, rate: number): number => Math.round(usd * rate * 100) / 100;

const withCredits = <T extends Money>(m: T, rate: number): T & { netCredits: number; refundedCredits: number } => ({
  ...m,
  netCredits: credits(m.netUsd, rate),
  refundedCredits: credits(m.refundedUsd, rate),
});

/**
 * report.json in pieces, so a report of a million instances is written without building one
 * string of it: an instance per line, the groups indented as `JSON.stringify(…, null, 2)` would.
 */
export function* reportJsonParts(report: CostReport): Generator<string> {
  const rate = report.creditsPerUsd;
  const field = (name: string, value: unknown): string => `  ${JSON.stringify(name)}: ${JSON.stringify(value, null, 2).replace(/\n/g, '\n  ')}`;
  yield `{\n${field('pipeline', report.pipeline)},\n${field('runId', report.runId)},\n${field('creditsPerUsd', rate)},\n  "instances": [`;
  let first = true;
  for (const line of report.instances) {
    yield `${first ? '' : ','}\n    ${JSON.stringify(withCredits(line, rate))}`;
    first = false;
  }
  yield `${first ? '' : '\n  '}],\n`;
  yield `${field('steps', report.steps.map((g) => withCredits(g, rate)))},\n${field('models', report.models.map((g) => withCredits(g, rate)))},\n${field('total', withCredits(report.total, rate))}\n}\n`;
}

export const reportJson = (report: CostReport): string => [...reportJsonParts(report)].join('');

const MONEY_HEADER = ['estimated_usd', 'actual_usd', 'refunded_usd', 'net_usd', 'net_credits', 'unpriced_instances'];
const money = (m: Money, rate: number): unknown[] => [m.estimatedUsd, m.actualUsd ?? '', m.refundedUsd, m.netUsd, credits(m.netUsd, rate), m.unpricedInstances];

/** One row per instance, then one per step, per model and the total (`level` tells them apart). */
export function* reportCsvParts(report: CostReport): Generator<string> {
  yield csvRow(['level', 'name', 'step', 'model', 'status', 'request_id', ...MONEY_HEADER]);
  for (const line of report.instances) yield csvRow(['instance', line.instance, line.step, line.model, line.status, line.requestId, ...money(line, report.creditsPerUsd)]);
  const group = (level: string, g: GroupLine): string => csvRow([level, g.name, '', '', countsText(g), '', ...money(g, report.creditsPerUsd)]);
  for (const g of report.steps) yield group('step', g);
  for (const g of report.models) yield group('model', g);
  yield group('total', report.total);
}

export const reportCsv = (report: CostReport): string => [...reportCsvParts(report)].join('');

function countsText(g: GroupLine): string {
  return Object.entries(g.counts)
    .filter(([, n]) => n > 0)
    .map(([status, n]) => `${status} ${n}`)
    .join('; ');
}

/** `$1,234.50`: the report's dollars, grouped like every other figure of money genpipe prints. */
const usd = (n: number | null): string => (n === null ? '—' : formatUsd(n).replace(/^US/, ''));
const cell = (text: string): string => text.replace(/\|/g, '\\|').replace(/\r?\n/g, ' ');

export function* reportMarkdownParts(report: CostReport): Generator<string> {
  const rate = report.creditsPerUsd;
  const table = (title: string, groups: readonly GroupLine[]): string[] => [
    `## ${title}`,
    '',
    '| name | statuses | estimated | actual | refunded | net | net credits |',
    '|---|---|---:|---:|---:|---:|---:|',
    ...groups.map((g) => `| ${cell(g.name)} | ${cell(countsText(g))} | ${usd(g.estimatedUsd)} | ${usd(g.actualUsd)} | ${usd(g.refundedUsd)} | ${usd(g.netUsd)} | ${credits(g.netUsd, rate)} |`),
    '',
  ];
  const t = report.total;
  const head = [
    `# Cost report: ${cell(report.pipeline)} ${cell(report.runId)}`,
    '',
    `Net **${usd(t.netUsd)}** (${credits(t.netUsd, rate)} credits at ${rate} credits per US$): estimated ${usd(t.estimatedUsd)}, refunded ${usd(t.refundedUsd)}` +
      (t.actualUsd === null ? '.' : `, actual costs reported by the service ${usd(t.actualUsd)}.`),
    ...(t.unpricedInstances > 0 ? ['', `${t.unpricedInstances} submitted instance(s) have no known price and are not in these sums.`] : []),
    ...(t.counts.reused > 0 ? ['', `${t.counts.reused} instance(s) reused an earlier run's result: nothing was sent for them, US$0.`] : []),
    ...(t.rerolls > 0 ? ['', `${t.rerolls} nsfw attempt(s) were re-rolled with a new seed (each refunded); the re-rolled instances cost ${usd(t.rerolledNetUsd)} net.`] : []),
    '',
    ...table('By step', report.steps),
    ...table('By model', report.models),
    '## Instances',
    '',
    '| instance | status | request | net |',
    '|---|---|---|---:|',
  ];
  yield `${head.join('\n')}\n`;
  for (const l of report.instances) yield `| ${cell(l.instance)} | ${l.status} | ${cell(l.requestId)} | ${usd(l.netUsd)} |\n`;
}

export const reportMarkdown = (report: CostReport): string => [...reportMarkdownParts(report)].join('');
