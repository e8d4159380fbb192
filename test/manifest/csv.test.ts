import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveAxis } from '../../src/manifest/axes.js';
import { CsvError, readCsv } from '../../src/manifest/csv.js';

const dir = mkdtempSync(join(tmpdir(), 'genpipe-csv-'));
const file = (name: string, text: string): string => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};

describe('CSV rows', () => {
  it('reads a header row and one record per line, remembering each line', async () => {
    const { columns, rows } = await readCsv(file('ok.csv', '\uFEFFsku,prompt\nA1,"red, shoes"\n\nB2,blue\n'));
    expect(columns).toEqual(['sku', 'prompt']);
    expect(rows).toEqual([
      { line: 2, values: { sku: 'A1', prompt: 'red, shoes' } },
      { line: 4, values: { sku: 'B2', prompt: 'blue' } },
    ]);
  });

  it('locates a short row by row and column', async () => {
    try {
      await readCsv(file('short.csv', 'a,b\n1,2\n3\n'), 'short.csv');
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(CsvError);
      expect((error as CsvError).location).toEqual({ file: 'short.csv', line: 3, col: 2 });
    }
  });

  it('locates a bad row far into a file read in many chunks', async () => {
    const good = Array.from({ length: 20_000 }, (_, i) => `${i},"row ${i}, quoted"`).join('\n');
    const error = await readCsv(file('long.csv', `id,text\n${good}\n20000\n20001,last\n`), 'long.csv').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CsvError);
    expect((error as CsvError).location).toEqual({ file: 'long.csv', line: 20_002, col: 2 });
  });

  it('locates an unclosed quote', async () => {
    const error = await readCsv(file('quote.csv', 'a,b\n1,"2\n'), 'quote.csv').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CsvError);
    expect((error as CsvError).message).toMatch(/Quote Not Closed/);
    expect((error as CsvError).location).toMatchObject({ file: 'quote.csv', line: 2 });
  });

  it('refuses a header that repeats a column, naming its column number', async () => {
    try {
      await readCsv(file('dup.csv', 'a,b,a\n1,2,3\n'), 'dup.csv');
      expect.unreachable();
    } catch (error) {
      expect((error as CsvError).location).toEqual({ file: 'dup.csv', line: 1, col: 3 });
      expect((error as CsvError).message).toMatch(/repeats the name "a"/);
    }
  });

  it('filters rows with where, and refuses a where column that does not exist', async () => {
    const path = file('where.csv', 'region,sku\nEU,1\nUS,2\nEU,3\nAPAC,4\n');
    const eu = await resolveAxis('row', { csv: path, where: { region: 'EU' } }, { dir });
    expect(eu.length).toBe(2);
    expect(eu.value(1)).toEqual({ region: 'EU', sku: '3' });
    expect(eu.label(1)).toBe('4');
    const two = await resolveAxis('row', { csv: path, where: { region: ['US', 'APAC'] } }, { dir });
    expect([0, 1].map((i) => (two.value(i) as { sku: string }).sku)).toEqual(['2', '4']);
    await expect(resolveAxis('row', { csv: path, where: { country: 'FR' } }, { dir })).rejects.toThrow(/no column "country"/);
    await expect(resolveAxis('row', { csv: path, where: { region: 'MARS' } }, { dir })).rejects.toThrow(
      /no row of .*where\.csv matches the where filter/,
    );
    // A file with only its header has no rows at all: said so, not blamed on a filter it does not have.
    const empty = file('header-only.csv', 'region,sku\n');
    await expect(resolveAxis('row', { csv: empty }, { dir })).rejects.toThrow(
      /^the CSV file .*header-only\.csv has no rows under its header$/,
    );
  });

  it('resolves CSV paths against the manifest folder', async () => {
    file('rel.csv', 'a\n1\n');
    expect((await resolveAxis('row', { csv: 'rel.csv' }, { dir })).length).toBe(1);
  });
});

describe('preset axes', () => {
  const presets = async () => [
    { id: '11111111-1111-4111-8111-111111111111', type: 'ads' as const, name: 'Summer Beach' },
    { id: '22222222-2222-4222-8222-222222222222', type: 'ads' as const, name: 'Winter Cabin' },
    { id: '33333333-3333-4333-8333-333333333333', type: 'ads' as const, name: 'summer city' },
  ];

  it('filters by a case-insensitive name glob and a limit', async () => {
    const axis = await resolveAxis('preset', { presets: { name: 'summer*' } }, { dir, presets });
    expect([0, 1].map((i) => axis.label(i))).toEqual(['"Summer Beach"', '"summer city"']);
    expect((await resolveAxis('preset', { presets: { limit: 1 } }, { dir, presets })).length).toBe(1);
  });

  it('refuses a glob that matches nothing, and a plan without a preset source', async () => {
    await expect(resolveAxis('preset', { presets: { name: 'Autumn*' } }, { dir, presets })).rejects.toThrow(/no visible preset matches/);
    await expect(resolveAxis('preset', { presets: {} }, { dir })).rejects.toThrow(/preset catalog/);
  });
});

describe('CSV text encoding', () => {
  it('refuses a cell whose bytes are not UTF-8 (a Latin-1 file) at its row and column, instead of sending U+FFFD', async () => {
    const path = join(dir, 'latin1.csv');
    writeFileSync(path, Buffer.concat([Buffer.from('sku,city\nA1,Paris\nA2,Z'), Buffer.from([0xfc]), Buffer.from('rich\n')]));
    const error = await readCsv(path, 'latin1.csv').then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(CsvError);
    expect((error as CsvError).message).toBe('row 3, column "city" holds bytes that are not UTF-8 text: save the file as UTF-8');
    expect((error as CsvError).location).toMatchObject({ file: 'latin1.csv', line: 3, col: 2 });
    // The same text as UTF-8 is read as it is.
    writeFileSync(path, 'sku,city\nA1,Paris\nA2,Zürich\n');
    expect((await readCsv(path, 'latin1.csv')).rows[1]?.values.city).toBe('Zürich');
  });
});
