// A CSV campaign with a few bad rows: without a word the whole manifest is refused (every problem
// listed, nothing sent); with `on_invalid: skip` on the axis, or `--skip-invalid`, the good rows run
// against the emulator and the bad ones are set aside, listed with their row, column and reason in
// the plan output, the summary, report.md, report.json and plan.json, counted by the notification,
// and the run exits 1. A problem of the file itself (bytes that are not UTF-8) is never set aside.
import { readFileSync, writeFileSync, appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runInProcess } from '../cli/in-process.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { receiver } from '../notify/receiver.js';
import { cleanTemps, emuRequests, findRunDir, HF_KEY, tempDir } from '../run/runner-helpers.js';

let emu: Emulator;
const closers: (() => Promise<void>)[] = [];

// A standalone emulator per test: its requests are that test's alone.
beforeEach(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
  await emu?.close();
});
afterAll(() => cleanTemps());

/** The five bad rows: line in the file, column, and what the reason says. */
const BAD = [
  { row: 5, col: 4, column: 'image', reason: /a bad URL: "htp:\/broken-url" is neither a URL/ },
  { row: 10, col: 4, column: 'image', reason: /a bad URL: "not a url at all" is neither a URL/ },
  { row: 14, col: 2, column: 'brief', reason: /the cell is empty/ },
  { row: 21, col: 3, column: 'tier', reason: /must be one of .*did you mean dogs\?/ },
  { row: 28, col: 3, column: 'tier', reason: /must be one of .*did you mean capybaras\?/ },
];

/** 30 products, P1..P30 on lines 2..31; five of them bad (a bad URL twice, an empty cell, a bad tier twice). */
function products(): string {
  const lines = ['sku,brief,tier,image'];
  for (let i = 1; i <= 30; i++) {
    let brief = `product ${i}`;
    let tier = 'cats';
    let image = `https://images.example/p${i}.png`;
    if (i === 4) image = 'htp:/broken-url';
    if (i === 9) image = 'not a url at all';
    if (i === 13) brief = '';
    if (i === 20) tier = 'dogz';
    if (i === 27) tier = 'capybaraz';
    lines.push(`P${i},${brief},${tier},${image}`);
  }
  return `${lines.join('\n')}\n`;
}

function campaign(dir: string, axis: string, notify = ''): string {
  writeFileSync(join(dir, 'products.csv'), products());
  const path = join(dir, 'products.yaml');
  writeFileSync(
    path,
    `version: 1
name: products
${notify}steps:
  sheets:
    model: character-sheet
    matrix:
      row: ${axis}
    input:
      brief: "{{ row.brief }}"
      tier: "{{ row.tier }}"
      image_url: "{{ row.image }}"
`,
  );
  return path;
}

async function cli(args: string[]): Promise<{ code: number; out: string; err: string }> {
  return runInProcess(args, { GENPIPE_BASE_URL: emu.url, HF_KEY });
}

/** Each bad cell's line in the text, in order. */
function expectListed(text: string): void {
  for (const bad of BAD) {
    const line = text.split('\n').find((l) => l.includes(`products.csv row ${bad.row}, column ${bad.col} ("${bad.column}")`));
    expect(line, `row ${bad.row} in:\n${text}`).toBeDefined();
    expect(line).toMatch(bad.reason);
  }
}

interface Skipped {
  file: string;
  row: number;
  column: string;
  col: number;
  reason: string;
  key: string;
}

function expectRecords(rows: Skipped[] | undefined): void {
  expect(rows?.map((r) => [r.row, r.col, r.column, r.key])).toEqual(BAD.map((b) => [b.row, b.col, b.column, `P${b.row - 1}`]));
  rows?.forEach((r, i) => expect(r.reason).toMatch(BAD[i]!.reason));
}

describe('bad CSV rows', () => {
  it(
    'without on_invalid: skip, run refuses the manifest with all five problems, exit 2, and sends nothing',
    { timeout: 30_000 },
    async () => {
      const dir = tempDir();
      const path = campaign(dir, '{ csv: products.csv, key: sku }');
      const result = await cli(['run', path, '--out', join(dir, 'runs')]);
      expect(result.code).toBe(2);
      expect(result.err).toMatch(/5 problems; all listed below/);
      for (const bad of BAD) expect(result.err).toContain(`row ${bad.row}, column ${bad.col} ("${bad.column}")`);
      expect(emuRequests(emu)).toHaveLength(0);
    },
  );

  for (const how of ['on_invalid: skip', '--skip-invalid'] as const) {
    it(`with ${how}: the 25 good rows run, the 5 bad ones are listed everywhere, notified, exit 1`, { timeout: 60_000 }, async () => {
      const hook = await receiver();
      closers.push(hook.close);
      const dir = tempDir();
      const axis = how === 'on_invalid: skip' ? '{ csv: products.csv, key: sku, on_invalid: skip }' : '{ csv: products.csv, key: sku }';
      const path = campaign(dir, axis, `notify:\n  - url: ${hook.url}/hook\n`);
      const out = join(dir, 'runs');
      const result = await cli(['run', path, '--out', out, ...(how === '--skip-invalid' ? ['--skip-invalid'] : [])]);
      expect(result.code, result.err).toBe(1);

      // Zero requests for the bad rows: 25 sent, one per good row.
      const sent = emuRequests(emu);
      expect(sent).toHaveLength(25);

      // The plan output, before anything was sent, then the summary under the run's last line.
      const [plan, rest] = result.err.split(/^running products:/m);
      expect(plan).toContain('5 CSV rows were skipped as invalid: nothing was sent for them.');
      expectListed(plan!);
      expect(rest).toContain('25 instance(s)');
      expect(result.out).toMatch(/completed; 25 completed, 0 failed/);
      expect(result.out).toContain('5 CSV rows were skipped as invalid');
      expectListed(result.out);

      const runDir = findRunDir(out, 'products');
      const planFile = JSON.parse(readFileSync(join(runDir, 'plan.json'), 'utf8')) as { skipped_rows?: Skipped[] };
      expectRecords(planFile.skipped_rows);
      const reportJson = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as {
        skippedRows?: Skipped[];
        instances: unknown[];
      };
      expectRecords(reportJson.skippedRows);
      expect(reportJson.instances).toHaveLength(25);
      // report.csv: one `skipped_row` line per bad cell, where it is and why, with no money.
      const csvLines = readFileSync(join(runDir, 'report.csv'), 'utf8').split('\r\n');
      const skippedLines = csvLines.filter((l) => l.startsWith('skipped_row,'));
      expect(skippedLines).toHaveLength(BAD.length);
      for (const bad of BAD)
        expect(
          skippedLines.some(
            (l) => l.includes(`products.csv row ${bad.row}, column ${bad.col} (""${bad.column}"")`) && /,"?skipped: \S/.test(l),
          ),
        ).toBe(true);
      expect(skippedLines.every((l) => l.endsWith(',,,,,,,'))).toBe(true);
      const md = readFileSync(join(runDir, 'report.md'), 'utf8');
      expect(md).toContain('## Skipped rows');
      for (const bad of BAD)
        expect(md).toMatch(new RegExp(`\\| [^|]*products\\.csv \\| ${bad.row} \\| ${bad.col} \\("${bad.column}"\\) \\| `));

      // `genpipe report` of the finished run lists them from what the run journaled.
      const report = await cli(['report', runDir]);
      expect(report.code).toBe(0);
      expect(report.out).toContain('## Skipped rows');
      expect(report.out).toMatch(/\| [^|]*products\.csv \| 21 \| 3 \("tier"\) \| must be one of/);

      expect(hook.received).toHaveLength(1);
      expect(hook.received[0]!.body).toMatchObject({
        event: 'finish',
        exit_code: 1,
        skipped_rows: 5,
        counts: { completed: 25, failed: 0 },
        message: 'All 25 instances completed; 5 CSV rows were skipped as invalid.',
      });
    });
  }

  it('a resume says how many rows the file gained, without adding them; the skipped rows are not new', { timeout: 60_000 }, async () => {
    const dir = tempDir();
    const path = campaign(dir, '{ csv: products.csv, key: sku, on_invalid: skip }');
    const out = join(dir, 'runs');
    expect((await cli(['run', path, '--out', out, '--quiet'])).code).toBe(1);
    const runDir = findRunDir(out, 'products');
    const before = emuRequests(emu).length;
    appendFileSync(
      join(dir, 'products.csv'),
      'P31,product 31,cats,https://images.example/p31.png\nP32,product 32,dogs,https://images.example/p32.png\n',
    );
    const resumed = await cli(['resume', runDir]);
    expect(resumed.err).toContain(
      "note: the CSV files have 2 rows this run's recorded plan does not have; this resume does not add them: a new run with --reuse picks them up",
    );
    expect(resumed.err.match(/recorded plan does not have/g)).toHaveLength(1);
    // Still the run it was: its rows set aside stay aside, and nothing was sent.
    expect(resumed.code).toBe(1);
    expect(emuRequests(emu)).toHaveLength(before);
  });

  it('a file that is not UTF-8 is refused even with --skip-invalid, exit 2, nothing sent', { timeout: 30_000 }, async () => {
    const dir = tempDir();
    const path = campaign(dir, '{ csv: products.csv, key: sku, on_invalid: skip }');
    const bytes = Buffer.concat([
      Buffer.from('sku,brief,tier,image\nP1,product 1,cats,https://images.example/p1.png\nP2,caf'),
      Buffer.from([0xe9]),
      Buffer.from(',cats,https://images.example/p2.png\n'),
    ]);
    writeFileSync(join(dir, 'products.csv'), bytes);
    const result = await cli(['run', path, '--out', join(dir, 'runs'), '--skip-invalid']);
    expect(result.code).toBe(2);
    expect(result.err).toMatch(/row 3, column "brief" holds bytes that are not UTF-8/);
    expect(emuRequests(emu)).toHaveLength(0);
  });

  it('a template reading a column the file lacks is refused even with on_invalid: skip', { timeout: 30_000 }, async () => {
    const dir = tempDir();
    const path = campaign(dir, '{ csv: products.csv, key: sku, on_invalid: skip }');
    writeFileSync(path, readFileSync(path, 'utf8').replace('{{ row.brief }}', '{{ row.breif }}'));
    const result = await cli(['run', path, '--out', join(dir, 'runs')]);
    expect(result.code).toBe(2);
    expect(result.err).toMatch(/no column "breif"; did you mean "brief"\?/);
    expect(emuRequests(emu)).toHaveLength(0);
  });

  it('a bad value the manifest writes itself is not a row problem: refused with on_invalid: skip', { timeout: 30_000 }, async () => {
    const dir = tempDir();
    const path = campaign(dir, '{ csv: products.csv, key: sku, on_invalid: skip }');
    writeFileSync(path, `${readFileSync(path, 'utf8')}      seed: -5\n`);
    const result = await cli(['run', path, '--out', join(dir, 'runs')]);
    expect(result.code).toBe(2);
    expect(result.err).toMatch(/steps\.sheets\.input\.seed: sheets\[row=P1\]: must be at least 1/);
    expect(emuRequests(emu)).toHaveLength(0);
  });

  it('genpipe plan and validate list the rows on_invalid: skip sets aside', { timeout: 30_000 }, async () => {
    const dir = tempDir();
    const path = campaign(dir, '{ csv: products.csv, key: sku, on_invalid: skip }');
    const plan = await cli(['plan', path]);
    expect(plan.code).toBe(0);
    expect(plan.out).toContain('sheets (character-sheet): 25 instance(s)');
    expectListed(plan.out);
    const json = await cli(['plan', path, '--json']);
    const doc = JSON.parse(json.out) as { skipped_rows: Skipped[]; instances: unknown[] };
    expectRecords(doc.skipped_rows);
    expect(doc.instances).toHaveLength(25);
    const validate = await cli(['validate', path]);
    expect(validate.code).toBe(0);
    expectListed(validate.out);
    expect(emuRequests(emu)).toHaveLength(0);
  });
});
