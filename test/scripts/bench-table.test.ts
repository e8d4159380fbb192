// The benchmark table of docs/benchmarks.md is made from bench/results/ by bench/table.mjs: the
// page says what the results hold (one truth), every row reads a benchmark that exists, and a row
// whose benchmark did not run says so instead of a figure.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain .mjs script of the benchmarks, without type declarations.
import { readResults, renderProvenance, renderTable, ROWS, withTable } from '../../bench/table.mjs';

const ROOT = new URL('../..', import.meta.url).pathname;
interface Row {
  bench: string;
  what: string;
  target: string;
}

describe('the benchmark table', () => {
  it('on docs/benchmarks.md is the one bench/table.mjs makes from bench/results/', () => {
    const page = readFileSync(join(ROOT, 'docs', 'benchmarks.md'), 'utf8');
    const results = readResults();
    expect(page).toContain(`${renderProvenance(results)}\n\n${renderTable(results)}\n`);
    expect(withTable(page, results)).toBe(page);
  });

  it('reads only benchmarks that exist, and gives every row a target', () => {
    for (const row of ROWS as Row[]) {
      expect(existsSync(join(ROOT, 'bench', `${row.bench}.bench.mjs`)), row.what).toBe(true);
      expect(row.target.length, row.what).toBeGreaterThan(0);
    }
  });

  it('says "not measured" for a row whose benchmark did not run, and marks a missed target', () => {
    const results = readResults();
    const withoutSink = Object.fromEntries(Object.entries(results).filter(([name]) => name !== 'sink'));
    const table = renderTable(withoutSink) as string;
    expect(table).toContain('not measured: `bench/sink.bench.mjs` did not run');
    const missed = renderTable({ ...results, sink: { ...results.sink, ratio: 0.5 } }) as string;
    expect(missed).toMatch(/storage sink[^\n]*\| 0\.8x \| \*\*no\*\* \|/);
    const met = renderTable({ ...results, sink: { ...results.sink, ratio: 0.9 } }) as string;
    expect(met).toMatch(/storage sink[^\n]*\| 0\.8x \| yes \|/);
  });
});
