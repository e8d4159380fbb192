import fc from 'fast-check';
import { parse } from 'csv-parse/sync';
import { describe, expect, it } from 'vitest';
import { csvCell, csvRow } from '../../src/util/csv.js';

const FORMULA = /^[=+\-@\t\r]/;

describe('CSV cells (RFC 4180, formula-safe)', () => {
  it('any row of arbitrary strings parses back to the same cells, formula starts neutralised (property)', () => {
    fc.assert(
      fc.property(fc.array(fc.string({ unit: 'binary', maxLength: 40 }), { minLength: 1, maxLength: 6 }), (cells) => {
        const [parsed] = parse(csvRow(cells), { relax_quotes: false, record_delimiter: '\r\n' }) as string[][];
        expect(parsed).toHaveLength(cells.length);
        parsed?.forEach((value, i) => {
          const original = cells[i] ?? '';
          expect(FORMULA.test(value)).toBe(false);
          expect(value).toBe(FORMULA.test(original) ? `'${original}` : original);
        });
      }),
      { numRuns: 500 },
    );
  });

  it('quotes a field with a comma, quote, CR or LF, doubling quotes, and ends rows with CRLF', () => {
    expect(csvRow(['a,b', 'say "hi"', 'line\nbreak', 'plain'])).toBe('"a,b","say ""hi""","line\nbreak",plain\r\n');
  });

  it('neutralises =, +, -, @, tab and CR at the start of a text cell, and leaves numbers alone', () => {
    expect(['=SUM(A1)', '+1', '-2', '@cmd', '\tx', '\rx'].map(csvCell)).toEqual(["'=SUM(A1)", "'+1", "'-2", "'@cmd", "'\tx", '"\'\rx"']);
    expect(csvCell(-0.05)).toBe('-0.05');
    expect(csvCell(null)).toBe('');
  });
});
