import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { OUTPUTS_CSV_HEADER, OutputsCsv } from '../../src/run/outputs-csv.js';
import { csvRow } from '../../src/util/csv.js';

let runDir: string;
beforeEach(async () => {
  runDir = await mkdtemp(join(tmpdir(), 'genpipe-outputs-csv-'));
});
afterEach(async () => {
  await rm(runDir, { recursive: true, force: true });
});

const row = (id: string, file = ''): string => csvRow([id, 'a', { seed: 1 }, 'req', 'completed', file, file ? 'ff' : '']);

describe('outputs.csv', () => {
  // By UTF-16 code units: '0' sorts before ']', so seed=10 comes before seed=1.
  it('sorts spilled and unfinished instances together by id, keeps multi-file rows together, and removes the spill file', async () => {
    const csv = await OutputsCsv.open(runDir);
    csv.add('a[seed=2]', row('a[seed=2]', 'outputs/a/2-0.png') + row('a[seed=2]', 'outputs/a/2-1.png'));
    csv.add('a[seed=10]', row('a[seed=10]', 'outputs/a/10.png'));
    csv.add('a["quote\n,line"]', row('a["quote\n,line"]'));
    await csv.write([['a[seed=1]', row('a[seed=1]')]]);
    const text = await readFile(join(runDir, 'outputs.csv'), 'utf8');
    expect(text).toBe(OUTPUTS_CSV_HEADER + row('a["quote\n,line"]') + row('a[seed=10]', 'outputs/a/10.png') + row('a[seed=1]') + row('a[seed=2]', 'outputs/a/2-0.png') + row('a[seed=2]', 'outputs/a/2-1.png'));
    expect(await readdir(runDir)).toEqual(['outputs.csv']);
  });

  it('spills in batches and reads every one back (more rows than one batch holds)', async () => {
    const csv = await OutputsCsv.open(runDir);
    const ids = Array.from({ length: 5_000 }, (_, i) => `s[i=${String(i).padStart(5, '0')}]`);
    for (const id of [...ids].reverse()) csv.add(id, row(id, `outputs/s/${id}.png`));
    await csv.write([]);
    const lines = (await readFile(join(runDir, 'outputs.csv'), 'utf8')).split('\r\n').filter((l) => l.length > 0);
    expect(lines).toHaveLength(ids.length + 1);
    expect(lines.slice(1).map((l) => l.split(',')[0])).toEqual(ids);
  });

  it('writes the header alone for a run with no instances', async () => {
    const csv = await OutputsCsv.open(runDir);
    await csv.write([]);
    expect(await readFile(join(runDir, 'outputs.csv'), 'utf8')).toBe(OUTPUTS_CSV_HEADER);
  });
});
