// The CSV size cap is checked on the file's size before anything is read. Every read of a CSV file
// goes through createReadStream, spied on here, so "refused without reading" is asserted directly:
// chmod cannot make a file unreadable to root (these tests may run as root), and a memory reading
// would only be a proxy. A sparse file stands in for a large one: it costs no disk.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createReadStream } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { CsvError, MAX_CSV_BYTES, readCsv } from '../../src/manifest/csv.js';

vi.mock('node:fs', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:fs')>();
  return { ...actual, createReadStream: vi.fn(actual.createReadStream) };
});
vi.mock('node:fs/promises', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:fs/promises')>();
  return { ...actual, stat: vi.fn(actual.stat) };
});

const dir = mkdtempSync(join(tmpdir(), 'genpipe-csv-size-'));
afterEach(() => vi.mocked(createReadStream).mockClear());

async function sparse(name: string, size: number): Promise<string> {
  const path = join(dir, name);
  const handle = await open(path, 'w');
  await handle.truncate(size);
  await handle.close();
  return path;
}

const readsOf = (path: string): number => vi.mocked(createReadStream).mock.calls.filter(([p]) => p === path).length;

describe('the CSV size cap', () => {
  it('streams a file within the cap (so the spy below sees every read)', async () => {
    const path = join(dir, 'small.csv');
    writeFileSync(path, 'a,b\n1,2\n');
    expect((await readCsv(path, 'small.csv')).rows).toEqual([{ line: 2, values: { a: '1', b: '2' } }]);
    expect(readsOf(path)).toBe(1);
  });

  it('refuses a file one byte over 64 MiB by its size, at file:1:1, without reading it', async () => {
    const path = await sparse('over.csv', MAX_CSV_BYTES + 1);
    const error = await readCsv(path, 'over.csv').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CsvError);
    expect((error as CsvError).message).toBe(`the CSV file is ${MAX_CSV_BYTES + 1} bytes, over the limit of ${MAX_CSV_BYTES}`);
    expect((error as CsvError).location).toEqual({ file: 'over.csv', line: 1, col: 1 });
    expect(readsOf(path)).toBe(0);
  });

  it('refuses a 1 TiB file the same way, at once', async () => {
    const path = await sparse('huge.csv', 2 ** 40);
    await expect(readCsv(path, 'huge.csv')).rejects.toThrow(`the CSV file is ${2 ** 40} bytes, over the limit of ${MAX_CSV_BYTES}`);
    expect(readsOf(path)).toBe(0);
  });

  it('stops reading a file that grew past the cap after its size was checked', async () => {
    const path = join(dir, 'grows.csv');
    writeFileSync(path, `a\n${'1\n'.repeat(600)}`);
    const real = await stat(path);
    // The size check sees the file as it was: 10 bytes.
    vi.mocked(stat).mockResolvedValueOnce(
      Object.assign(Object.create(Object.getPrototypeOf(real) as object) as typeof real, real, { size: 10 }),
    );
    const error = await readCsv(path, 'grows.csv', { maxBytes: 1_000 }).catch((e: unknown) => e);
    expect((error as CsvError).message).toBe('the CSV file grew past the limit of 1000 bytes while it was read');
  });

  it('refuses what is not a regular file', async () => {
    await expect(readCsv(dir, 'a-folder')).rejects.toThrow('the CSV file is not a regular file');
  });

  it('genpipe validate: exit 2 naming the CSV file, and nothing read', async () => {
    const path = await sparse('axis.csv', MAX_CSV_BYTES + 1);
    const manifest = join(dir, 'm.yaml');
    writeFileSync(
      manifest,
      'version: 1\nname: big\nsteps:\n  a:\n    model: character-sheet\n    matrix:\n      row: { csv: axis.csv }\n    input: {}\n',
    );
    const stderr: string[] = [];
    const io: CliIO = {
      out: () => {},
      write: async () => {},
      err: (t) => stderr.push(t),
      env: { GENPIPE_BASE_URL: 'http://127.0.0.1:9' },
      signal: new AbortController().signal,
    };
    expect(await main(['validate', manifest], io)).toBe(2);
    expect(stderr.join('\n')).toMatch(/axis\.csv:1:1: steps\.a\.matrix\.row: the CSV file is 67108865 bytes, over the limit of 67108864$/);
    expect(readsOf(path)).toBe(0);
  });
});
