// report.md, outputs.csv and the gallery list a run's instances in one order: steps, axes and list
// values in manifest order, ranges by number, CSV rows as in the file. A real run against the
// emulator, then the report written again the way a big run's is (spilled chunks, merged, two
// threads), and outputs.csv's sort spilled: each keeps the order.
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../src/emulator/index.js';
import { instanceStates } from '../../src/report/instance-lines.js';
import { writeCostReport } from '../../src/report/write-report.js';
import { OutputsCsv } from '../../src/run/files/outputs-csv.js';
import type { PlanFile } from '../../src/run/files/run-dir.js';
import { readGalleryDir } from '../gallery/read-gallery.js';
import { cleanTemps, findRunDir, tempDir } from '../run/runner-helpers.js';

const worker = new URL('../../dist/report/report-worker.js', import.meta.url);

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0.3, log: () => {} });
});
afterAll(async () => {
  await emu.close();
  cleanTemps();
});

const TIERS = ['normal', 'frogs', 'cats'];
const SEEDS = [8, 9, 10, 11];
const ROWS = ['zeta', 'alpha', 'mid'];

/** What the manifest plans, in its own order: `portraits` is written first, `sheets` second. */
const EXPECTED = [
  'portraits[seed=9]',
  'portraits[seed=10]',
  ...TIERS.flatMap((tier) => SEEDS.flatMap((seed) => ROWS.map((row) => `sheets[tier=${tier},seed=${seed},row=${row}]`))),
];

function manifest(dir: string): string {
  writeFileSync(join(dir, 'rows.csv'), `name,brief\n${ROWS.map((r) => `${r},a ${r} mascot`).join('\n')}\n`);
  const path = join(dir, 'order.yaml');
  writeFileSync(
    path,
    [
      'version: 1',
      'name: order',
      'defaults:',
      '  concurrency: 8',
      '  polling: { initial_ms: 100, min_ms: 20, max_ms: 400 }',
      'steps:',
      '  portraits:',
      '    model: character-sheet',
      '    matrix: { seed: { range: { from: 9, to: 10 } } }',
      '    input: { tier: normal, seed: "{{ seed }}", brief: a portrait }',
      '  sheets:',
      '    model: character-sheet',
      '    matrix:',
      `      tier: [${TIERS.join(', ')}]`,
      `      seed: { range: { from: ${SEEDS[0]}, to: ${SEEDS.at(-1)} } }`,
      '      row: { csv: rows.csv, key: name }',
      '    input: { tier: "{{ tier }}", seed: "{{ seed }}", brief: "{{ row.brief }}" }',
      '',
    ].join('\n'),
  );
  return path;
}

async function run(args: string[]): Promise<{ code: number; out: string }> {
  const output: string[] = [];
  const io: CliIO = {
    out: (t) => output.push(t),
    write: async (t) => void output.push(t),
    err: (t) => output.push(t),
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` },
    signal: new AbortController().signal,
  };
  const code = await main(args, io);
  return { code, out: output.join('\n') };
}

/** The instance column of report.md's instance table, in order. */
const reportMdIds = (text: string): string[] => [...text.matchAll(/^\| ((?:portraits|sheets)\[[^|]*\]) \| /gm)].map((m) => m[1] as string);

/** outputs.csv's instance column, each instance once (an instance may have several rows). */
function outputsCsvIds(text: string): string[] {
  const ids: string[] = [];
  for (const line of text.trim().split(/\r?\n/).slice(1)) {
    const id = line.startsWith('"') ? (/^"((?:[^"]|"")*)"/.exec(line)?.[1] ?? '').replace(/""/g, '"') : line.split(',')[0];
    if (id !== undefined && ids.at(-1) !== id) ids.push(id);
  }
  return ids;
}

describe('the order of instances', () => {
  it(
    'is the same in report.md, report.json, outputs.csv, outputs.jsonl and the gallery: the manifest order',
    { timeout: 120_000 },
    async () => {
      const dir = tempDir('genpipe-order-');
      const runs = join(dir, 'runs');
      const done = await run(['run', manifest(dir), '--out', runs, '--quiet']);
      expect(done.code, done.out).toBe(0);
      const runDir = findRunDir(runs, 'order');

      const md = reportMdIds(readFileSync(join(runDir, 'report.md'), 'utf8'));
      const json = (JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { instances: { instance: string }[] }).instances.map(
        (l) => l.instance,
      );
      const csv = outputsCsvIds(readFileSync(join(runDir, 'outputs.csv'), 'utf8'));
      const jsonl = [
        ...new Set(
          readFileSync(join(runDir, 'outputs.jsonl'), 'utf8')
            .trim()
            .split('\n')
            .map((l) => (JSON.parse(l) as { instance: string }).instance),
        ),
      ];
      const gallery = readGalleryDir(runDir).steps.flatMap((s) => s.cells.map((c) => c.id));
      expect(md).toEqual(EXPECTED);
      expect(json).toEqual(EXPECTED);
      expect(csv).toEqual(EXPECTED);
      expect(jsonl).toEqual(EXPECTED);
      expect(gallery).toEqual(EXPECTED);
      // The gallery's selectors too: list values as written, CSV rows as in the file.
      const sheets = readGalleryDir(runDir).steps.find((s) => s.id === 'sheets');
      expect(sheets?.axes).toEqual([
        { name: 'tier', values: TIERS },
        { name: 'seed', values: SEEDS.map(String) },
        { name: 'row', values: ROWS },
      ]);

      // A big run's report: every chunk spilled and merged, its lines written by two threads from a
      // middle sort key. The same bytes, so the same order.
      const big = join(dir, 'big');
      mkdirSync(big);
      for (const f of ['plan.json', 'journal.jsonl']) copyFileSync(join(runDir, f), join(big, f));
      await writeCostReport(big, { threads: { worker, parallelMinBytes: 0, evenSplit: true } });
      for (const f of ['report.md', 'report.json', 'report.csv'])
        expect(readFileSync(join(big, f), 'utf8')).toBe(readFileSync(join(runDir, f), 'utf8'));

      // One thread, a chunk of 5 instances: 8 spilled runs merged.
      const plan = JSON.parse(readFileSync(join(runDir, 'plan.json'), 'utf8')) as PlanFile;
      const spilled: string[] = [];
      for await (const [id] of instanceStates(join(runDir, 'journal.jsonl'), { chunk: 5, order: plan.steps })) spilled.push(id);
      expect(spilled).toEqual(EXPECTED);

      // outputs.csv sorted 4 instances at a time in memory, the rest merged from disk.
      const out = join(dir, 'outputs');
      mkdirSync(out);
      const outputs = await OutputsCsv.open(out, [], { sortChunk: 4, order: plan.steps });
      for (const id of [...EXPECTED].reverse())
        outputs.add(id, [{ instance: id, step: id.replace(/\[.*$/, ''), axes: {}, status: 'completed' }]);
      await outputs.write([]);
      expect(outputsCsvIds(readFileSync(join(out, 'outputs.csv'), 'utf8'))).toEqual(EXPECTED);
    },
  );
});
