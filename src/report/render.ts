/** The cost report as JSON, CSV (RFC 4180, formula-safe) and Markdown. */
import { modelFor } from '../models/registry.js';
import { csvCell, csvRow } from '../util/csv.js';
import { formatMoney, formatSpend, jsonUsd, toCredits } from '../util/format-usd.js';
import type { CostReport, CostSummary, GroupLine, InstanceLine, Money, ReportSinks } from './cost-report.js';
import { formatBytes } from '../util/format-bytes.js';
import type { SinkNote, SinkTotals } from '../sink/sink-totals.js';
import { skippedCellWhere, skippedRowsSentence, type SkippedRow } from '../plan/skipped-rows.js';

const credits = toCredits;
const round6 = jsonUsd;

// Object.assign, not a spread: spreading a line into a literal took 3.5 s a million lines.
const withCredits = <T extends Money>(m: T, rate: number): T & { netCredits: number; refundedCredits: number } =>
  Object.assign({}, m, { netCredits: credits(m.netUsd, rate), refundedCredits: credits(m.refundedUsd, rate) });

/**
 * Each report format in three pieces, so a report of any size is written as its lines come (the
 * head, one piece per instance, the tail), never built as one string: write-report.ts streams them;
 * the `*Parts` generators join them for a report held in memory.
 */
export interface ReportFormat {
  head(summary: CostSummary): string;
  /** `index`: the instance's 0-based position. */
  instance(line: InstanceLine, index: number, rate: number): string;
  /** `count`: how many instance lines there were. */
  tail(summary: CostSummary, count: number): string;
}

const field = (name: string, value: unknown): string =>
  `  ${JSON.stringify(name)}: ${JSON.stringify(value, null, 2).replace(/\n/g, '\n  ')}`;

/** A number as JSON writes it (null for what JSON cannot hold). */
const num = (n: number): string => (Number.isFinite(n) ? String(n) : 'null');

/**
 * An instance line as `JSON.stringify(withCredits(line, rate))` writes a line built by lineOf, its
 * fields in that order, written field by field: the generic path took a fifth of a million-line
 * report's formatting (render.test.ts compares the two).
 */
export function instanceJson(l: InstanceLine, rate: number): string {
  return `{"instance":${JSON.stringify(l.instance)},"step":${JSON.stringify(l.step)},"model":${JSON.stringify(l.model)},"status":${JSON.stringify(l.status)},"requestId":${JSON.stringify(l.requestId)},"rerolls":${num(l.rerolls)},"estimatedUsd":${num(l.estimatedUsd)},"actualUsd":${l.actualUsd === null ? 'null' : num(l.actualUsd)},"refundedUsd":${num(l.refundedUsd)},"netUsd":${num(l.netUsd)},"unknownUsd":${num(l.unknownUsd)},"unpricedInstances":${num(l.unpricedInstances)}${notesJson(l)},"netCredits":${num(credits(l.netUsd, rate))},"refundedCredits":${num(credits(l.refundedUsd, rate))}}`;
}

/** A line's sink notes, as JSON.stringify writes them after `unpricedInstances` (none: nothing). */
function notesJson(l: InstanceLine): string {
  const conflicts = l.uploadConflicts === undefined ? '' : `,"uploadConflicts":${JSON.stringify(l.uploadConflicts)}`;
  return l.unverifiedUploads === undefined ? conflicts : `${conflicts},"unverifiedUploads":${JSON.stringify(l.unverifiedUploads)}`;
}

/** report.json: an instance per line, the groups indented as `JSON.stringify(…, null, 2)` would. */
export const JSON_FORMAT: ReportFormat = {
  head: (r) =>
    `{\n${field('pipeline', r.pipeline)},\n${field('runId', r.runId)},\n${field('creditsPerUsd', r.creditsPerUsd)},\n  "instances": [`,
  instance: (line, index, rate) => `${index === 0 ? '' : ','}\n    ${instanceJson(line, rate)}`,
  tail: (r, count) =>
    `${count === 0 ? '' : '\n  '}],\n${field(
      'steps',
      r.steps.map((g) => withCredits(g, r.creditsPerUsd)),
    )},\n${field(
      'models',
      r.models.map((g) => withCredits(g, r.creditsPerUsd)),
    )},\n${field('total', withCredits(r.total, r.creditsPerUsd))}${r.sink ? `,\n${field('sink', r.sink)}` : ''}${r.skippedRows ? `,\n${field('skippedRows', r.skippedRows)}` : ''}${r.throttledMs !== undefined ? `,\n${field('throttledMs', r.throttledMs)}` : ''}${r.status !== undefined ? `,\n${field('status', r.status)}` : ''}\n}\n`,
};

function* partsOf(format: ReportFormat, report: CostReport): Generator<string> {
  yield format.head(report);
  let index = 0;
  for (const line of report.instances) yield format.instance(line, index++, report.creditsPerUsd);
  yield format.tail(report, index);
}

export const reportJsonParts = (report: CostReport): Generator<string> => partsOf(JSON_FORMAT, report);

export const reportJson = (report: CostReport): string => [...reportJsonParts(report)].join('');

const MONEY_HEADER = ['estimated_usd', 'actual_usd', 'refunded_usd', 'net_usd', 'net_credits', 'unknown_usd', 'unpriced_instances'];
/** A sum of a row with unpriced instances that adds up to nothing known reads `unpriced`, never 0. */
const csvSum = (usd: number, m: Money): number | string => (usd === 0 && m.unpricedInstances > 0 ? 'unpriced' : usd);
const money = (m: Money, rate: number): unknown[] => [
  csvSum(m.estimatedUsd, m),
  m.actualUsd ?? '',
  m.refundedUsd,
  csvSum(m.netUsd, m),
  csvSum(credits(m.netUsd, rate), m),
  m.unknownUsd,
  m.unpricedInstances,
];

/**
 * A cell of a CSV row set aside as invalid: level `skipped_row`, where it is as `name`, the reason as
 * its status, and no money (nothing was sent for it), so a spreadsheet of the report lists it too.
 */
const skippedCsvRow = (r: SkippedRow): string =>
  csvRow(['skipped_row', skippedCellWhere(r), r.step, '', `skipped: ${r.reason}`, '', ...MONEY_HEADER.map(() => '')]);

/**
 * The rows after an instance's row naming its sink notes, no money (its row has it): level
 * `upload_conflict` (another object kept at the key) or `upload_unverified`, the instance as
 * `name`, and the object and the reason as its status.
 */
function notesCsv(l: InstanceLine): string {
  const row = (level: string, n: { uri: string; reason: string }): string =>
    csvRow([level, l.instance, l.step, l.model, `${n.uri}: ${n.reason}`, '', ...MONEY_HEADER.map(() => '')]);
  return [
    ...(l.uploadConflicts ?? []).map((n) => row('upload_conflict', n)),
    ...(l.unverifiedUploads ?? []).map((n) => row('upload_unverified', n)),
  ].join('');
}

/**
 * report.csv: one row per instance, then one per step, per model and the total, then one per cell
 * of a CSV row set aside as invalid (`level` tells them apart).
 */
export const CSV_FORMAT: ReportFormat = {
  head: () => csvRow(['level', 'name', 'step', 'model', 'status', 'request_id', ...MONEY_HEADER]),
  // csvRow(['instance', line.instance, line.step, line.model, line.status, line.requestId, ...money(line, rate)]),
  // without the array: a number's cell is its text, and a status is a plain word (render.test.ts compares).
  instance: (l, _index, rate) =>
    `instance,${csvCell(l.instance)},${csvCell(l.step)},${csvCell(l.model)},${l.status},${csvCell(l.requestId)},${String(csvSum(l.estimatedUsd, l))},${l.actualUsd === null ? '' : String(l.actualUsd)},${String(l.refundedUsd)},${String(csvSum(l.netUsd, l))},${String(csvSum(credits(l.netUsd, rate), l))},${String(l.unknownUsd)},${String(l.unpricedInstances)}\r\n${l.uploadConflicts || l.unverifiedUploads ? notesCsv(l) : ''}`,
  tail: (r) => {
    const group = (level: string, g: GroupLine): string => csvRow([level, g.name, '', '', countsText(g), '', ...money(g, r.creditsPerUsd)]);
    return [
      ...r.steps.map((g) => group('step', g)),
      ...r.models.map((g) => group('model', g)),
      group('total', r.total),
      ...(r.skippedRows ?? []).map(skippedCsvRow),
    ].join('');
  },
};

export const reportCsvParts = (report: CostReport): Generator<string> => partsOf(CSV_FORMAT, report);

export const reportCsv = (report: CostReport): string => [...reportCsvParts(report)].join('');

function countsText(g: GroupLine): string {
  return Object.entries(g.counts)
    .filter(([, n]) => n > 0)
    .map(([status, n]) => `${status} ${n}`)
    .join('; ');
}

/** `US$1,234.50`: a total of the report, as every other figure of money genpipe prints. */
const usd = (n: number | null): string => (n === null ? '—' : formatMoney(n, 'total'));
/** `US$0.0865`: an instance's amount, with the finer digits a price has. */
const usdEach = (n: number): string => formatMoney(n, 'each');
/** A sum of a row with unpriced instances: `unpriced (2 instances)` or `US$0.10 + 2 unpriced`, never US$0.00 alone. */
const priced = (usd: number, m: Money): string => formatSpend({ netUsd: usd, unpricedInstances: m.unpricedInstances });
const cell = (text: string): string => (MARKDOWN_SPECIAL.test(text) ? text.replace(/\|/g, '\\|').replace(/\r?\n/g, ' ') : text);
const MARKDOWN_SPECIAL = /[|\n]/;

/** usd() of the last amounts seen: an instance table repeats a handful of amounts a million times. */
const usdSeen = new Map<number, string>();
function usdOf(n: number): string {
  let text = usdSeen.get(n);
  if (text === undefined) {
    if (usdSeen.size >= 256) usdSeen.clear();
    usdSeen.set(n, (text = usdEach(n)));
  }
  return text;
}

/** "Waited 3.2 s on throttling in all: ...". */
export const throttledSentence = (ms: number): string =>
  `Waited ${(ms / 1000).toFixed(1)} s on throttling in all: the time during which at least one request refused with 429 waited out its Retry-After.`;

/** "Storage sinks: 40 files (12.3 MB) uploaded to s3://…, public at https://…; 2 files (1.1 MB) of 1 instance pending." */
function sinkSentence(sink: ReportSinks): string {
  const where = sink.locations
    .map((l) => `${cell(l.uri)}${l.public_url === undefined ? '' : ` (public at ${cell(l.public_url)})`}`)
    .join(', ');
  const uploaded = `${files(sink.uploadedFiles)} (${formatBytes(sink.uploadedBytes)}) uploaded to ${where}`;
  if (sink.pendingFiles === 0) return `Storage sinks: ${uploaded}; none pending.${conflictsText(sink)}`;
  return `Storage sinks: ${uploaded}; **${files(sink.pendingFiles)} (${formatBytes(sink.pendingBytes)}) of ${sink.pendingInstances} instance(s) pending**: \`genpipe resume\` uploads them without sending anything to the service.${conflictsText(sink)}`;
}

/** What a report says of conflicts and unverified uploads after its sink sentence: the counts, in words. */
function conflictsText(sink: ReportSinks): string {
  const parts: string[] = [];
  if (sink.conflictFiles > 0)
    parts.push(
      ` **${files(sink.conflictFiles)} not uploaded: another object with other bytes is at the key**, not overwritten (the sink's \`on_conflict\` decides: \`overwrite\` or \`skip\`).`,
    );
  if (sink.skippedFiles > 0)
    parts.push(` ${files(sink.skippedFiles)} left out on purpose: another object is at the key (\`on_conflict: skip\`).`);
  if (sink.unverifiedFiles > 0)
    parts.push(` ${files(sink.unverifiedFiles)} uploaded **unverified**: the store's bytes could not be checked.`);
  return parts.join('');
}

/** "## Storage sink: objects to check": each conflict and unverified upload the totals list, with how many more there are. */
function notesSection(sink: ReportSinks | undefined): string[] {
  if (!sink || (sink.conflicts.length === 0 && sink.unverified.length === 0)) return [];
  const more = (listed: number, all: number): string[] =>
    all > listed ? [`| … | ${all - listed} more | report.json names each in its instance lines |`] : [];
  return [
    '## Storage sink: objects to check',
    '',
    '| instance | object | what |',
    '|---|---|---|',
    ...sink.conflicts.map((n) => `| ${cell(n.instance)} | ${cell(n.uri)} | conflict: ${cell(n.reason)} |`),
    ...more(sink.conflicts.length, sink.conflictFiles + sink.skippedFiles),
    ...sink.unverified.map((n) => `| ${cell(n.instance)} | ${cell(n.uri)} | unverified: ${cell(n.reason)} |`),
    ...more(sink.unverified.length, sink.unverifiedFiles),
    '',
  ];
}

const files = (n: number): string => `${n.toLocaleString('en-US')} file${n === 1 ? '' : 's'}`;

/** "## Skipped rows": the CSV rows the run set aside as invalid, one line per bad cell. */
function skippedRowsSection(report: CostSummary): string[] {
  const rows = report.skippedRows ?? [];
  if (rows.length === 0) return [];
  return [
    '## Skipped rows',
    '',
    skippedRowsSentence(rows),
    '',
    '| file | row | column | reason |',
    '|---|---:|---|---|',
    ...rows.map((r) => `| ${cell(r.file)} | ${r.row} | ${cell(`${r.col} ("${r.column}")`)} | ${cell(r.reason)} |`),
    '',
  ];
}

/**
 * A token-priced model's figures are provisional: the charge at submit, which the service later
 * reconciles to actual token usage; that reconciliation's refunds are not in the journal.
 */
export const provisionalModels = (report: Pick<CostSummary, 'models'>): string[] =>
  report.models.filter((g) => modelFor(g.name).tokenPriced === true && g.estimatedUsd > 0).map((g) => g.name);

function provisionalLines(report: CostSummary): string[] {
  const models = provisionalModels(report);
  if (models.length === 0) return [];
  return [
    '',
    `Provisional: the ${models.join(', ')} figures are the charges at submit, as priced; the service reconciles them later to actual token usage, and the refunds of that reconciliation are not visible to this report.`,
  ];
}

/** The run's status as `genpipe runs` and the summary line say it; an interrupted run says how to go on. */
export function statusSentence(status: string): string {
  if (status === 'interrupted')
    return 'Status: **interrupted**: stopped by a signal (Ctrl-C, SIGTERM) or ended before it finished; `genpipe resume` continues it without paying twice.';
  return `Status: ${cell(status)}.`;
}

function markdownHead(report: CostSummary): string {
  const rate = report.creditsPerUsd;
  const table = (title: string, groups: readonly GroupLine[]): string[] => [
    `## ${title}`,
    '',
    '| name | statuses | charged | actual | refunded | net | net credits |',
    '|---|---|---:|---:|---:|---:|---:|',
    ...groups.map(
      (g) =>
        `| ${cell(g.name)} | ${cell(countsText(g))} | ${priced(g.estimatedUsd, g)} | ${usd(g.actualUsd)} | ${usd(g.refundedUsd)} | ${priced(g.netUsd, g)} | ${formatSpend({ netUsd: g.netUsd, unpricedInstances: g.unpricedInstances }, 'credits', rate).replace(/ credits/, '')} |`,
    ),
    '',
  ];
  const t = report.total;
  const head = [
    `# Cost report: ${cell(report.pipeline)} ${cell(report.runId)}`,
    '',
    ...(report.status === undefined ? [] : [statusSentence(report.status), '']),
    `Net **${priced(t.netUsd, t)}** (${formatSpend({ netUsd: t.netUsd, unpricedInstances: t.unpricedInstances }, 'credits', rate)} at ${rate} credits per US$): charged ${priced(t.estimatedUsd, t)}, refunded ${usd(t.refundedUsd)}` +
      (t.actualUsd === null ? '.' : `, actual costs reported by the service ${usd(t.actualUsd)}.`),
    ...(t.unknownUsd > 0
      ? [
          '',
          `Unknown: up to ${usd(t.unknownUsd)} more, for attempts whose end genpipe never saw (sent, or maybe sent); the account was charged between ${usd(t.netUsd)} and ${usd(round6(t.netUsd + t.unknownUsd))}.`,
        ]
      : []),
    ...(t.unpricedInstances > 0
      ? [
          '',
          `${t.unpricedInstances} submitted instance(s) are unpriced (no price in the manifest, none reported by the service): what they cost is not in these sums.`,
        ]
      : []),
    ...provisionalLines(report),
    ...(report.sink ? ['', sinkSentence(report.sink)] : []),
    ...(report.throttledMs !== undefined ? ['', throttledSentence(report.throttledMs)] : []),
    ...(t.counts.reused > 0
      ? ['', `${t.counts.reused} instance(s) reused an earlier run's result: nothing was sent for them, ${usd(0)}.`]
      : []),
    ...(t.rerolls > 0
      ? [
          '',
          `${t.rerolls} nsfw attempt(s) were re-rolled with a new seed (each refunded); the re-rolled instances cost ${usd(t.rerolledNetUsd)} net.`,
        ]
      : []),
    '',
    ...skippedRowsSection(report),
    ...notesSection(report.sink),
    ...table('By step', report.steps),
    ...table('By model', report.models),
    '## Instances',
    '',
    '| instance | status | request | net |',
    '|---|---|---|---:|',
  ];
  return `${head.join('\n')}\n`;
}

/** report.md: the totals and groups, then a table of the instances. */
export const MARKDOWN_FORMAT: ReportFormat = {
  head: markdownHead,
  instance: (l) =>
    `| ${cell(l.instance)} | ${l.status}${l.uploadConflicts ? ', upload conflict' : ''}${l.unverifiedUploads ? ', unverified upload' : ''} | ${cell(l.requestId)} | ${l.unpricedInstances > 0 ? 'unpriced' : usdOf(l.netUsd)}${l.unknownUsd > 0 ? ` (+ up to ${usdOf(l.unknownUsd)} unknown)` : ''} |\n`,
  tail: () => '',
};

export const reportMarkdownParts = (report: CostReport): Generator<string> => partsOf(MARKDOWN_FORMAT, report);

export const reportMarkdown = (report: CostReport): string => [...reportMarkdownParts(report)].join('');

/** Objects named under a run's summary line, of each kind; report.md lists up to LISTED_NOTES, report.json every one. */
const SUMMARY_NOTES = 10;

/**
 * The lines under a run's summary naming its sink's conflicts and unverified uploads: one per
 * object (the first few of each kind), and how many more there are.
 */
export function sinkNoteLines(sink: SinkTotals | undefined): string[] {
  if (!sink) return [];
  const lines = (word: string, notes: readonly SinkNote[], all: number): string[] => [
    ...notes.slice(0, SUMMARY_NOTES).map((n) => `${word}: ${n.uri} (${n.instance}): ${n.reason}.`),
    ...(all > Math.min(notes.length, SUMMARY_NOTES)
      ? [`${word}: ${all - Math.min(notes.length, SUMMARY_NOTES)} more; report.md and report.json list them.`]
      : []),
  ];
  return [
    ...lines('Upload conflict', sink.conflicts, sink.conflictFiles + sink.skippedFiles),
    ...lines('Unverified upload', sink.unverified, sink.unverifiedFiles),
  ];
}
