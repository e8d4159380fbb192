// genpipe diff tells the truth: a run keeps the CSV rows and presets it read
// (inputs.json, hashed in plan.json), and diff plans each run from its own copy, never today's
// file. Run A: 27 CSV rows x 2 qualities = 54 instances. Run B: one row inserted and one headline
// edited in the CSV, run with --reuse: 54 shared, 2 only in B, inputs differ in 2, and the reused
// results count as completed. Steps are listed in the manifest's order, money as everywhere else.
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess } from '../cli/in-process.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { cleanTemps, HF_KEY, tempDir } from '../run/runner-helpers.js';

let emulator: Emulator;
let dir: string;
let runA: string;
let runB: string;

const rows = (n: number): string[][] => Array.from({ length: n }, (_, i) => [`p${i + 1}`, `Headline ${i + 1}`]);
const writeCsv = (records: string[][]): void =>
  writeFileSync(join(dir, 'campaign.csv'), `id,headline\n${records.map((r) => r.join(',')).join('\n')}\n`);

async function cli(args: string[]): Promise<{ code: number; out: string; err: string }> {
  return runInProcess(args, { GENPIPE_BASE_URL: emulator.url, HF_KEY });
}

const runDirOf = (out: string): string => / instance\(s\) in (\S+)/.exec(out)?.[1] ?? '';

beforeAll(async () => {
  emulator = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  dir = tempDir();
  // `zeta` comes first in the manifest though it sorts last: diff lists it first.
  writeFileSync(
    join(dir, 'daily.yaml'),
    `version: 1
name: daily
steps:
  zeta:
    model: marketing-image
    matrix:
      row: { csv: campaign.csv, key: id }
      quality: [low, high]
    input: { prompt: "{{ row.headline }}", quality: "{{ quality }}" }
  alpha:
    model: character-sheet
    matrix:
      seed: [1]
    input: { tier: cats, seed: "{{ seed }}" }
`,
  );
  const out = tempDir();
  writeCsv(rows(27));
  const a = await cli(['run', join(dir, 'daily.yaml'), '--out', out, '--rate', '1000']);
  expect(a.code, a.err).toBe(0);
  // The next day's CSV: a row inserted in the middle, a headline edited.
  const next = rows(27);
  next[4] = ['p5', 'Headline 5 now shorter'];
  next.splice(10, 0, ['p100', 'A new product']);
  writeCsv(next);
  await new Promise((r) => setTimeout(r, 1_100)); // run ids have a one-second clock
  const b = await cli(['run', join(dir, 'daily.yaml'), '--out', out, '--rate', '1000', '--reuse']);
  expect(b.code, b.err).toBe(0);
  runA = runDirOf(a.out + a.err);
  runB = runDirOf(b.out + b.err);
  expect(runA).not.toBe('');
  expect(runB).not.toBe('');
}, 120_000);

afterAll(async () => {
  await emulator?.close();
  cleanTemps();
});

describe('a run keeps the CSV rows and presets it read', () => {
  it('inputs.json holds the rows with their lines, and plan.json its SHA-256', () => {
    const text = readFileSync(join(runA, 'inputs.json'), 'utf8');
    const plan = JSON.parse(readFileSync(join(runA, 'plan.json'), 'utf8')) as { inputs: { file: string; sha256: string } };
    expect(plan.inputs).toEqual({ file: 'inputs.json', sha256: createHash('sha256').update(text).digest('hex') });
    const saved = JSON.parse(text) as {
      steps: Record<string, Record<string, { kind: string; columns: string[]; rows: [number, Record<string, string>][] }>>;
    };
    expect(saved.steps.zeta?.row?.kind).toBe('csv');
    expect(saved.steps.zeta?.row?.columns).toEqual(['id', 'headline']);
    expect(saved.steps.zeta?.row?.rows).toHaveLength(27);
    expect(saved.steps.zeta?.row?.rows[4]).toEqual([6, { id: 'p5', headline: 'Headline 5' }]);
    expect(saved.steps.alpha).toBeUndefined();
  });

  it("plan.json lists the steps in the manifest's order", () => {
    const plan = JSON.parse(readFileSync(join(runA, 'plan.json'), 'utf8')) as { steps: { id: string }[] };
    expect(plan.steps.map((s) => s.id)).toEqual(['zeta', 'alpha']);
  });
});

describe("genpipe diff reads each run's own inputs", () => {
  it('54 shared campaign instances (55 with the sheet), 2 only in B, inputs differ in 2; reused counts as completed (status differs in 0)', async () => {
    const page = join(tempDir(), 'diff.html');
    const result = await cli(['diff', runA, runB, '--out', page]);
    expect(result.code, result.err).toBe(0);
    expect(result.out).toContain('55 shared instances (0 only in A, 2 only in B); inputs differ in 2, status in 0;');
    const html = readFileSync(page, 'utf8');
    // The edited headline, both qualities.
    for (const quality of ['low', 'high']) {
      const row = new RegExp(
        `<tr class="differs-row" data-instance="zeta\\[row=p5,quality=${quality}\\]" data-input-changes="1" data-status-a="completed" data-status-b="completed">`,
      );
      expect(html).toMatch(row);
    }
    expect(html).toContain('<code>prompt</code>: <code>&#34;Headline 5&#34;</code> → <code>&#34;Headline 5 now shorter&#34;</code>');
    // Reused against completed, same inputs: the same, hidden by "only instances that differ".
    expect(html).toContain(
      '<tr class="same" data-instance="zeta[row=p1,quality=low]" data-input-changes="0" data-status-a="completed" data-status-b="reused">',
    );
    expect(html).not.toContain('data-instance="zeta[row=p100');
  });

  it("--out replaces only a diff page genpipe wrote: a run's journal, any other file and a name that is not .html are refused, exit 2, untouched", async () => {
    const journal = join(runB, 'journal.jsonl');
    const before = readFileSync(journal);
    const other = join(tempDir(), 'notes.html');
    writeFileSync(other, '<p>my notes</p>');
    for (const [target, message] of [
      [journal, `--out ${journal} is not an .html file; the diff is a page.`],
      [other, `--out ${other} exists and is not a diff page genpipe wrote: it is left as it is; choose another file.`],
    ] as const) {
      const refused = await cli(['diff', runA, runB, '--out', target]);
      expect(refused.code).toBe(2);
      expect(refused.err).toContain(message);
    }
    expect(readFileSync(journal)).toEqual(before);
    expect(readFileSync(other, 'utf8')).toBe('<p>my notes</p>');
    // A page genpipe wrote is written again.
    const page = join(tempDir(), 'again.html');
    expect((await cli(['diff', runA, runB, '--out', page])).code).toBe(0);
    expect((await cli(['diff', runA, runB, '--out', page])).code).toBe(0);
  });

  it('a CSV file edited after both runs changes nothing', async () => {
    writeCsv([['p1', 'Something else entirely']]);
    const result = await cli(['diff', runA, runB, '--out', join(tempDir(), 'diff.html')]);
    expect(result.code, result.err).toBe(0);
    expect(result.out).toContain('55 shared instances (0 only in A, 2 only in B); inputs differ in 2, status in 0;');
    expect(result.err).toBe('');
  });

  it("lists steps in the manifest's order, and money as everywhere else (US$0.05, not US$0.0500)", async () => {
    const page = join(tempDir(), 'diff.html');
    const result = await cli(['diff', runA, runB, '--out', page]);
    const html = readFileSync(page, 'utf8');
    const ids = [...html.matchAll(/data-instance="([^"]+)"/g)].map((m) => m[1] as string);
    expect(ids[0]).toBe('zeta[row=p1,quality=low]');
    expect(ids.at(-1)).toBe('alpha[seed=1]');
    expect(ids.findIndex((id) => id.startsWith('alpha'))).toBe(54);
    expect(html).toMatch(/<\/span> US\$0\.05\n/);
    expect(html).not.toContain('US$0.0500');
    expect(result.out).toMatch(/cost of the shared instances: A US\$[\d,]+\.\d+, B US\$[\d,]+\.\d+\./);
  });

  it("an altered inputs.json is named, and that run's inputs are not compared", async () => {
    const copy = tempDir();
    const made = await cli(['run', join(dir, 'daily.yaml'), '--out', copy, '--rate', '1000']);
    expect(made.code, made.err).toBe(0);
    const run = runDirOf(made.out + made.err);
    writeFileSync(join(run, 'inputs.json'), readFileSync(join(run, 'inputs.json'), 'utf8').replace('Something else entirely', 'Tampered'));
    const result = await cli(['diff', runA, run, '--out', join(copy, 'd.html')]);
    expect(result.code).toBe(0);
    expect(result.err).toContain("inputs.json does not match the SHA-256 its run's plan.json recorded");
  });
});

describe('a run made before genpipe kept its CSV rows', () => {
  it('is planned from the file as it is now, and the note says so', async () => {
    const copy = tempDir();
    writeCsv(rows(3));
    const made = await cli(['run', join(dir, 'daily.yaml'), '--out', copy, '--rate', '1000']);
    expect(made.code, made.err).toBe(0);
    const run = runDirOf(made.out + made.err);
    const planPath = join(run, 'plan.json');
    const plan = JSON.parse(readFileSync(planPath, 'utf8')) as Record<string, unknown>;
    delete plan.inputs;
    writeFileSync(planPath, JSON.stringify(plan));
    const result = await cli(['diff', run, run, '--out', join(copy, 'd.html')]);
    expect(result.code, result.err).toBe(0);
    expect(result.err).toContain('keeps no copy of the CSV rows and presets it read (it was made before genpipe kept them)');
  });
});

describe('recorded axes are read instead of the file and the catalog', () => {
  it('a preset axis plans from the presets the run kept, without asking the catalog', async () => {
    const { resolveAxis } = await import('../../src/manifest/axes.js');
    const presets = [
      { id: '00000000-0000-4000-8000-000000000001', type: 'ads' as const, name: 'Summer sale' },
      { id: '00000000-0000-4000-8000-000000000002', type: 'ads' as const, name: 'Summer night' },
    ];
    const axis = await resolveAxis(
      'preset',
      { presets: { name: 'Summer*', limit: 5 } },
      {
        dir,
        presets: () => Promise.reject(new Error('the catalog must not be read')),
        recorded: { kind: 'presets', presets },
      },
    );
    expect(Array.from({ length: axis.length }, (_, i) => axis.label(i))).toEqual(['"Summer sale"', '"Summer night"']);
  });

  it('`genpipe report` reads the journal: a CSV gone since changes nothing', async () => {
    const before = readFileSync(join(runA, 'report.json'), 'utf8');
    writeFileSync(join(dir, 'campaign.csv'), 'nothing\n');
    const result = await cli(['report', runA, '--json']);
    expect(result.code, result.err).toBe(0);
    const strip = (t: string): unknown => ({ ...(JSON.parse(t) as Record<string, unknown>), generated_at: undefined });
    expect(strip(result.out)).toEqual(strip(before));
  });
});
