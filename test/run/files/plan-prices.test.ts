// plan.json says what it knows of a price that follows the configuration (a prices table): where it
// comes from, whether the model is token-priced, its instances' cheapest and dearest prices, and,
// when every instance costs the same, that price as the step's price_usd. A reader that finds no
// price journaled for an attempt (a journal written before prices were journaled) then counts it
// at that price, not as unpriced; when the instances' prices differ it still says unpriced, never
// US$0.00. `genpipe plan --json` gives each such instance its own price.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../../src/emulator/index.js';
import { runInProcess } from '../../cli/in-process.js';
import { pageIndex } from '../../gallery/read-gallery.js';
import { cleanTemps, findRunDir, HF_KEY, tempDir } from '../runner-helpers.js';

let emulator: Emulator;
let dir: string;
let runDir: string;

const MANIFEST = `version: 1
name: priced
prices:
  marketing-image:
    - { when: { quality: high }, usd: 0.0865 }
    - { when: { quality: medium }, usd: 0.0438 }
    - { usd: 0.02 }
steps:
  heroes:
    model: marketing-image
    matrix: { n: [1, 2, 3] }
    input: { prompt: "Hero {{ n }}", resolution: 1k, quality: high }
  banners:
    model: marketing-image
    matrix: { quality: [high, medium] }
    input: { prompt: "A banner", resolution: 1k, quality: "{{ quality }}" }
`;

interface StepRecord {
  id: string;
  price_usd: number | null;
  price_source?: string;
  token_priced?: boolean;
  price_range_usd?: { min: number; max: number };
}

const cli = (args: string[]): ReturnType<typeof runInProcess> => runInProcess(args, { GENPIPE_BASE_URL: emulator.url, HF_KEY });

beforeAll(async () => {
  emulator = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  dir = tempDir();
  writeFileSync(join(dir, 'priced.yaml'), MANIFEST);
  const out = join(dir, 'out');
  const run = await cli(['run', join(dir, 'priced.yaml'), '--out', out, '--yes']);
  expect(run.code, run.err).toBe(0);
  runDir = findRunDir(out, 'priced');
}, 60_000);

afterAll(async () => {
  await emulator?.close();
  cleanTemps();
});

const stepsOf = (file: string): StepRecord[] => (JSON.parse(readFileSync(file, 'utf8')) as { steps: StepRecord[] }).steps;

describe("plan.json's prices for a step priced per instance", () => {
  it('records the source, the range, and the price when every instance costs the same', () => {
    const [heroes, banners] = stepsOf(join(runDir, 'plan.json'));
    expect(heroes).toMatchObject({
      id: 'heroes',
      price_usd: 0.0865,
      price_source: 'table',
      token_priced: true,
      price_range_usd: { min: 0.0865, max: 0.0865 },
    });
    // Two prices: no one figure for the step, the range instead.
    expect(banners).toMatchObject({ id: 'banners', price_usd: null, price_source: 'table', price_range_usd: { min: 0.0438, max: 0.0865 } });
  });

  it("the gallery and outputs.csv price each instance at its journaled price, not the step's null", () => {
    const page = pageIndex(readFileSync(join(runDir, 'gallery.html'), 'utf8'));
    expect(page.steps.map((s) => [s.id, s.spendUsd, s.unpriced])).toEqual([
      ['heroes', 0.2595, 0],
      ['banners', 0.1303, 0],
    ]);
    const rows = readFileSync(join(runDir, 'outputs.csv'), 'utf8').trim().split(/\r?\n/);
    const header = (rows[0] as string).split(',');
    const costOf = (id: string): string => (rows.find((r) => r.startsWith(`${id},`)) ?? '').split(',')[header.indexOf('cost_usd')] ?? '';
    expect(costOf('banners[quality=high]')).toBe('0.0865');
    expect(costOf('banners[quality=medium]')).toBe('0.0438');
  });

  it("a journal without journaled prices is counted at the instances' shared price, and unpriced (never zero) where they differ", async () => {
    const journal = join(runDir, 'journal.jsonl');
    const lines = readFileSync(journal, 'utf8').split('\n');
    const stripped = lines.map((line) => (line.includes('"type":"intent"') ? line.replace(/,"priceUsd":[0-9.e-]+/, '') : line));
    expect(stripped.join('\n')).not.toContain('"priceUsd"');
    writeFileSync(journal, stripped.join('\n'));
    const report = await cli(['report', runDir, '--json']);
    expect(report.code, report.err).toBe(0);
    const json = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as {
      steps: { name: string; estimatedUsd: number; netUsd: number; unpricedInstances: number }[];
    };
    expect(json.steps.find((s) => s.name === 'heroes')).toMatchObject({ estimatedUsd: 0.2595, netUsd: 0.2595, unpricedInstances: 0 });
    expect(json.steps.find((s) => s.name === 'banners')).toMatchObject({ netUsd: 0, unpricedInstances: 2 });
    const md = readFileSync(join(runDir, 'report.md'), 'utf8');
    const row = (name: string): string => md.split('\n').find((l) => l.startsWith(`| ${name} |`)) ?? '';
    expect(row('heroes')).toContain('| US$0.26 |');
    expect(row('banners')).toContain('unpriced (2 instances)');
    expect(row('banners')).not.toContain('| US$0.00 | — | US$0.00 |');
  });
});

describe('genpipe plan --json', () => {
  it("gives each instance of a step priced per instance its own price, and the step's range", async () => {
    const plan = await cli(['plan', join(dir, 'priced.yaml'), '--json']);
    expect(plan.code, plan.err).toBe(0);
    const doc = JSON.parse(plan.out) as {
      steps: (StepRecord & { cost_usd: number })[];
      instances: { id: string; price_usd?: number }[];
    };
    expect(doc.steps.find((s) => s.id === 'banners')).toMatchObject({
      price_usd: null,
      price_range_usd: { min: 0.0438, max: 0.0865 },
      cost_usd: 0.1303,
    });
    const priceOf = (id: string): number | undefined => doc.instances.find((i) => i.id === id)?.price_usd;
    expect(priceOf('banners[quality=high]')).toBe(0.0865);
    expect(priceOf('banners[quality=medium]')).toBe(0.0438);
    expect(priceOf('heroes[n=2]')).toBe(0.0865);
  });
});
