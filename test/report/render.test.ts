// The report's per-instance formats are written field by field (a million lines a report): each
// must give exactly what the generic path gives, JSON.stringify and csvRow, for any line.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { InstanceLine, ReportStatus } from '../../src/report/cost-report.js';
import { CSV_FORMAT, JSON_FORMAT, MARKDOWN_FORMAT } from '../../src/report/render.js';
import { csvRow } from '../../src/util/csv.js';
import { formatMoney } from '../../src/util/format-usd.js';

const STATUSES: ReportStatus[] = ['completed', 'reused', 'failed', 'nsfw', 'canceled', 'unknown', 'in_flight', 'not_started'];
const text = fc.oneof(
  fc.string(),
  fc.string({ unit: 'grapheme' }),
  fc.constantFrom('=1+2', '-5', 'a|b', 'x\r\ny', 'q"uote', 'comma,here', '@x', '\tt'),
);
const money = fc.oneof(
  fc.double({ min: -1e6, max: 1e6 }),
  fc.constantFrom(0, -0, 0.05, 0.1 + 0.2, 1e21, Number.NaN, Number.POSITIVE_INFINITY),
);

/** A line with its fields in lineOf's order (cost-report.ts), which report.json keeps. */
const line: fc.Arbitrary<InstanceLine> = fc
  .record({
    instance: text,
    step: text,
    model: text,
    status: fc.constantFrom(...STATUSES),
    requestId: text,
    rerolls: fc.nat(),
    estimatedUsd: money,
    actualUsd: fc.option(money, { nil: null }),
    refundedUsd: money,
    netUsd: money,
    unknownUsd: money,
    unpricedInstances: fc.nat(1),
  })
  .map((l) => ({
    instance: l.instance,
    step: l.step,
    model: l.model,
    status: l.status,
    requestId: l.requestId,
    rerolls: l.rerolls,
    estimatedUsd: l.estimatedUsd,
    actualUsd: l.actualUsd,
    refundedUsd: l.refundedUsd,
    netUsd: l.netUsd,
    unknownUsd: l.unknownUsd,
    unpricedInstances: l.unpricedInstances,
  }));

const credits = (usd: number, rate: number): number => Math.round(usd * rate * 100) / 100;

describe('report formats, one instance line', () => {
  it('report.json: what JSON.stringify writes of the line with its credits (property)', () => {
    fc.assert(
      fc.property(line, fc.constantFrom(100, 7, 0.5), fc.nat(3), (l, rate, index) => {
        const generic = JSON.stringify({ ...l, netCredits: credits(l.netUsd, rate), refundedCredits: credits(l.refundedUsd, rate) });
        expect(JSON_FORMAT.instance(l, index, rate)).toBe(`${index === 0 ? '' : ','}\n    ${generic}`);
      }),
      { numRuns: 500 },
    );
  });

  it('report.csv: what csvRow writes of its cells, formula-safe and quoted (property)', () => {
    fc.assert(
      fc.property(line, fc.constantFrom(100, 7), (l, rate) => {
        // A zero sum of an unpriced line reads `unpriced`, never 0.
        const sum = (usd: number): number | string => (usd === 0 && l.unpricedInstances > 0 ? 'unpriced' : usd);
        const generic = csvRow([
          'instance',
          l.instance,
          l.step,
          l.model,
          l.status,
          l.requestId,
          sum(l.estimatedUsd),
          l.actualUsd ?? '',
          l.refundedUsd,
          sum(l.netUsd),
          sum(credits(l.netUsd, rate)),
          l.unknownUsd,
          l.unpricedInstances,
        ]);
        expect(CSV_FORMAT.instance(l, 0, rate)).toBe(generic);
      }),
      { numRuns: 500 },
    );
  });

  it('report.md: a table row with | escaped and line breaks flattened, the same amount shown the same every time (property)', () => {
    const cell = (t: string): string => t.replace(/\|/g, '\\|').replace(/\r?\n/g, ' ');
    fc.assert(
      fc.property(line, (l) => {
        // An unpriced instance reads "unpriced", never US$0.00; an unknown amount is shown apart.
        // An instance's amount is of the `each` kind: 2 to 4 decimals.
        const net = l.unpricedInstances > 0 ? 'unpriced' : formatMoney(l.netUsd, 'each');
        const unknown = l.unknownUsd > 0 ? ` (+ up to ${formatMoney(l.unknownUsd, 'each')} unknown)` : '';
        const expected = `| ${cell(l.instance)} | ${l.status} | ${cell(l.requestId)} | ${net}${unknown} |\n`;
        expect(MARKDOWN_FORMAT.instance(l, 0, 100)).toBe(expected);
        expect(MARKDOWN_FORMAT.instance(l, 1, 100)).toBe(expected);
      }),
      { numRuns: 500 },
    );
  });
});
