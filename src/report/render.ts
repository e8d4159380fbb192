/** The cost report as JSON, CSV (RFC 4180, formula-safe) and Markdown. */
import { csvRow } from '../util/csv.js';
import type { CostReport, GroupLine, InstanceLine, Money } from './cost-report.js';

const credits = (usd: number, rate: number): number => Math.round(usd * rate * 100) / 100;

export function reportJson(report: CostReport): string {
  const withCredits = <T extends Money>(m: T): T & { netCredits: number; refundedCredits: number } => ({
    ...m,
    netCredits: credits(m.netUsd, report.creditsPerUsd),
    refundedCredits: credits(m.refundedUsd, report.creditsPerUsd),
  });
  return `${JSON.stringify(
    { ...report, instances: report.instances.map(withCredits), steps: report.steps.map(withCredits), models: report.models.map(withCredits), total: withCredits(report.total) },
    null,
    2,
  )}\n`;
}

const MONEY_HEADER = ['estimated_usd', 'actual_usd', 'refunded_usd', 'net_usd', 'net_credits', 'unpriced_instances'];
const money = (m: Money, rate: number): unknown[] => [m.estimatedUsd, m.actualUsd ?? '', m.refundedUsd, m.netUsd, credits(m.netUsd, rate), m.unpricedInstances];

/** One row per instance, then one per step, per model and the total (`level` tells them apart). */
export function reportCsv(report: CostReport): string {
  let out = csvRow(['level', 'name', 'step', 'model', 'status', 'request_id', ...MONEY_HEADER]);
  for (const line of report.instances) out += csvRow(['instance', line.instance, line.step, line.model, line.status, line.requestId, ...money(line, report.creditsPerUsd)]);
  const group = (level: string, g: GroupLine): string => csvRow([level, g.name, '', '', countsText(g), '', ...money(g, report.creditsPerUsd)]);
  for (const g of report.steps) out += group('step', g);
  for (const g of report.models) out += group('model', g);
  out += group('total', report.total);
  return out;
}

function countsText(g: GroupLine): string {
  return Object.entries(g.counts)
    .filter(([, n]) => n > 0)
    .map(([status, n]) => `${status} ${n}`)
    .join('; ');
}

const usd = (n: number | null): string => (n === null ? '—' : `$${n.toFixed(n * 100 === Math.round(n * 100) ? 2 : 4)}`);
const cell = (text: string): string => text.replace(/\|/g, '\\|').replace(/\r?\n/g, ' ');

export function reportMarkdown(report: CostReport): string {
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
  const lines = [
    `# Cost report: ${cell(report.pipeline)} ${cell(report.runId)}`,
    '',
    `Net **${usd(t.netUsd)}** (${credits(t.netUsd, rate)} credits at ${rate} credits per US$): estimated ${usd(t.estimatedUsd)}, refunded ${usd(t.refundedUsd)}` +
      (t.actualUsd === null ? '.' : `, actual costs reported by the service ${usd(t.actualUsd)}.`),
    ...(t.unpricedInstances > 0 ? ['', `${t.unpricedInstances} submitted instance(s) have no known price and are not in these sums.`] : []),
    '',
    ...table('By step', report.steps),
    ...table('By model', report.models),
    '## Instances',
    '',
    '| instance | status | request | net |',
    '|---|---|---|---:|',
    ...report.instances.map((l: InstanceLine) => `| ${cell(l.instance)} | ${l.status} | ${cell(l.requestId)} | ${usd(l.netUsd)} |`),
    '',
  ];
  return lines.join('\n');
}
