// outputs.csv and outputs.jsonl: a column per axis, natural order, the same
// records as JSON lines, rows spilled to disk while the run goes and the spill file removed.
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse as parseCsv } from 'csv-parse/sync';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { OutputRow } from '../../../src/run/files/output-rows.js';
import { outputsCsvHeader, OutputsCsv } from '../../../src/run/files/outputs-csv.js';

let runDir: string;
beforeEach(async () => {
  runDir = await mkdtemp(join(tmpdir(), 'genpipe-outputs-csv-'));
});
afterEach(async () => {
  await rm(runDir, { recursive: true, force: true });
});

const row = (id: string, seed: string, file?: string): OutputRow => ({
  instance: id,
  step: 'a',
  axes: { seed },
  status: 'completed',
  request_id: 'req',
  ...(file ? { role: 'image-0', file, sha256: 'ff', cost_usd: 0.05 } : {}),
});

describe('outputs.csv', () => {
  it("sorts spilled and unfinished instances together in the views' order (seed=2 before seed=10, numbers before text) and keeps multi-file rows together", async () => {
    const csv = await OutputsCsv.open(runDir, ['seed']);
    csv.add('a[seed=2]', [row('a[seed=2]', '2', 'outputs/a/2+0.png'), row('a[seed=2]', '2', 'outputs/a/2+1.png')]);
    csv.add('a[seed=10]', [row('a[seed=10]', '10', 'outputs/a/10.png')]);
    csv.add('a["quote\n,line"]', [row('a["quote\n,line"]', 'x')]);
    await csv.write([['a[seed=1]', [row('a[seed=1]', '1')]]]);
    const text = await readFile(join(runDir, 'outputs.csv'), 'utf8');
    expect(text.split('\r\n')[0]).toBe('instance,step,seed,status,error,request_id,job_set_id,reroll_seed,role,file,sha256,cost_usd');
    const rows = parseCsv(text, { columns: true }) as Record<string, string>[];
    expect(rows.map((r) => [r.instance, r.seed, r.file])).toEqual([
      ['a[seed=1]', '1', ''],
      ['a[seed=2]', '2', 'outputs/a/2+0.png'],
      ['a[seed=2]', '2', 'outputs/a/2+1.png'],
      ['a[seed=10]', '10', 'outputs/a/10.png'],
      ['a["quote\n,line"]', 'x', ''],
    ]);
    expect(rows[1]).toMatchObject({ status: 'completed', request_id: 'req', role: 'image-0', sha256: 'ff', cost_usd: '0.05' });
    const jsonl = (await readFile(join(runDir, 'outputs.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as OutputRow);
    expect(jsonl.map((r) => r.instance)).toEqual(rows.map((r) => r.instance));
    expect(jsonl[3]).toEqual(row('a[seed=10]', '10', 'outputs/a/10.png'));
    expect((await readdir(runDir)).sort()).toEqual(['outputs.csv', 'outputs.jsonl']);
  });

  it("two writers of one run's outputs at once (a displaced holder and the one that took over) both finish, with their own temporary files", async () => {
    const writers = await Promise.all([OutputsCsv.open(runDir, ['seed']), OutputsCsv.open(runDir, ['seed'])]);
    const ids = Array.from({ length: 3_000 }, (_, i) => `s[i=${i}]`);
    for (const csv of writers) for (const id of ids) csv.add(id, [row(id, '1', `outputs/s/${id}.png`)]);
    await Promise.all(writers.map((csv) => csv.write([])));
    const rows = parseCsv(await readFile(join(runDir, 'outputs.csv'), 'utf8'), { columns: true }) as Record<string, string>[];
    expect(rows).toHaveLength(ids.length);
    expect((await readdir(runDir)).filter((n) => n.includes('.tmp'))).toEqual([]);
  });

  it('spills in batches and reads every one back (more rows than one batch holds)', async () => {
    const csv = await OutputsCsv.open(runDir, ['seed']);
    const ids = Array.from({ length: 5_000 }, (_, i) => `s[i=${i}]`);
    for (const id of [...ids].reverse()) csv.add(id, [row(id, '1', `outputs/s/${id}.png`)]);
    await csv.write([]);
    const rows = parseCsv(await readFile(join(runDir, 'outputs.csv'), 'utf8'), { columns: true }) as Record<string, string>[];
    expect(rows.map((r) => r.instance)).toEqual(ids);
  });

  it('sorts more instances than it holds in memory at once through sorted runs on disk, and removes them', async () => {
    const before = (await readdir(tmpdir())).filter((n) => n.startsWith('genpipe-sort-')).length;
    const csv = await OutputsCsv.open(runDir, ['seed'], { sortChunk: 700 });
    const ids = Array.from({ length: 5_000 }, (_, i) => `s[i=${i}]`);
    // Spilled out of order; one instance's two files stay together and in their order.
    for (const id of [...ids].reverse())
      csv.add(
        id,
        id === 's[i=42]' ? [row(id, '1', 'outputs/s/42+0.png'), row(id, '1', 'outputs/s/42+1.png')] : [row(id, '1', `outputs/s/${id}.png`)],
      );
    await csv.write([['s[i=5000]', [row('s[i=5000]', '1')]]]);
    const rows = parseCsv(await readFile(join(runDir, 'outputs.csv'), 'utf8'), { columns: true }) as Record<string, string>[];
    expect(rows.map((r) => r.instance)).toEqual(
      [...ids.slice(0, 43), 's[i=42]', ...ids.slice(43), 's[i=5000]'].sort(
        (a, b) => Number(/\d+/.exec(a)?.[0]) - Number(/\d+/.exec(b)?.[0]),
      ),
    );
    expect(rows.filter((r) => r.instance === 's[i=42]').map((r) => r.file)).toEqual(['outputs/s/42+0.png', 'outputs/s/42+1.png']);
    expect((await readdir(tmpdir())).filter((n) => n.startsWith('genpipe-sort-')).length).toBe(before);
  });

  it('writes the header alone for a run with no instances', async () => {
    const csv = await OutputsCsv.open(runDir, ['tier', 'row.sku']);
    await csv.write([]);
    expect(await readFile(join(runDir, 'outputs.csv'), 'utf8')).toBe(outputsCsvHeader(['tier', 'row.sku']));
    expect(await readFile(join(runDir, 'outputs.jsonl'), 'utf8')).toBe('');
  });
});
