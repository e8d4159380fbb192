// Every JSON genpipe writes rounds its amounts of money to a millionth of a US$: report.json, the
// gallery's index, a notification's body, --json-logs events, `genpipe runs --json` and `genpipe plan --json`. Prices
// are chosen so that their sums in floating point carry dust (0.1 x 3 = 0.30000000000000004,
// 0.0865 x 3 = 0.25949999999999995): an amount written unrounded would show it.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { pageIndex } from '../gallery/read-gallery.js';
import { receiver } from '../notify/receiver.js';
import { cleanTemps, findRunDir, HF_KEY, tempDir } from '../run/runner-helpers.js';
import { runInProcess, type InProcessRun } from './in-process.js';

let emulator: Emulator;
let hook: Awaited<ReturnType<typeof receiver>>;
let dir: string;
let out: string;
let runDir: string;
let run: InProcessRun;

const cli = (args: string[]): Promise<InProcessRun> => runInProcess(args, { GENPIPE_BASE_URL: emulator.url, HF_KEY });

/** Every number under a key that names money (`…Usd`, `…_usd`, `spend_usd`'s fields), with its path. */
function amounts(value: unknown, path = '', money = false): [string, number][] {
  if (typeof value === 'number') return money ? [[path, value]] : [];
  if (Array.isArray(value)) return value.flatMap((v, i) => amounts(v, `${path}[${i}]`, money));
  if (value !== null && typeof value === 'object')
    return Object.entries(value).flatMap(([k, v]) => amounts(v, `${path}.${k}`, money || /usd$/i.test(k)));
  return [];
}

/** Amounts written with more than six decimals. */
const unrounded = (doc: unknown): [string, number][] => amounts(doc).filter(([, n]) => Number(n.toFixed(6)) !== n);

beforeAll(async () => {
  emulator = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  hook = await receiver();
  dir = tempDir();
  out = join(dir, 'out');
  // The dust is really there: these sums, unrounded, have more than six decimals.
  expect(0.1 + 0.1 + 0.1).not.toBe(0.3);
  expect(0.0865 + 0.0865 + 0.0865).not.toBe(0.2595);
  writeFileSync(
    join(dir, 'dust.yaml'),
    `version: 1
name: dust
notify:
  - url: ${hook.url}/n
prices:
  marketing-image:
    - { when: { quality: high }, usd: 0.0865 }
    - { usd: 0.1 }
steps:
  high:
    model: marketing-image
    matrix: { n: [1, 2, 3] }
    input: { prompt: "High {{ n }}", resolution: 1k, quality: high }
  low:
    model: marketing-image
    matrix: { n: [1, 2, 3] }
    input: { prompt: "Low {{ n }}", resolution: 1k, quality: low }
`,
  );
  run = await cli(['run', join(dir, 'dust.yaml'), '--out', out, '--yes', '--json-logs']);
  expect(run.code, run.err).toBe(0);
  runDir = findRunDir(out, 'dust');
}, 60_000);

afterAll(async () => {
  await hook?.close();
  await emulator?.close();
  cleanTemps();
});

describe('JSON amounts are rounded to a millionth', () => {
  it('report.json', () => {
    const json = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { total: { estimatedUsd: number } };
    expect(json.total.estimatedUsd).toBe(0.5595);
    expect(amounts(json).length).toBeGreaterThan(20);
    expect(unrounded(json)).toEqual([]);
  });

  it("the gallery's index (JSON in gallery.html)", () => {
    const page = pageIndex(readFileSync(join(runDir, 'gallery.html'), 'utf8'));
    expect(page.steps.map((s) => s.spendUsd)).toEqual([0.2595, 0.3]);
    expect(unrounded(page)).toEqual([]);
  });

  it("a notification's body", () => {
    expect(hook.received).toHaveLength(1);
    const body = hook.received[0]?.body as { spend_usd: { estimated: number } };
    expect(body.spend_usd.estimated).toBe(0.5595);
    expect(unrounded(body)).toEqual([]);
  });

  it('--json-logs events', () => {
    const events = run.out
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as unknown);
    const finished = events.find((e) => (e as { type?: string }).type === 'run_finished') as { summary: { estimatedUsd: number } };
    expect(finished.summary.estimatedUsd).toBe(0.5595);
    expect(events.flatMap((e) => amounts(e)).length).toBeGreaterThan(6);
    expect(events.flatMap((e) => unrounded(e))).toEqual([]);
  });

  it('genpipe runs --json', async () => {
    const runs = await cli(['runs', '--out', out, '--json']);
    expect(runs.code, runs.err).toBe(0);
    const listed = JSON.parse(runs.out) as { estimatedUsd: number; netUsd: number }[];
    expect(listed[0]).toMatchObject({ estimatedUsd: 0.5595 });
    expect(unrounded(listed)).toEqual([]);
  });

  it('genpipe plan --json', async () => {
    const plan = await cli(['plan', join(dir, 'dust.yaml'), '--json']);
    expect(plan.code, plan.err).toBe(0);
    const doc = JSON.parse(plan.out) as { steps: { id: string; cost_usd: number }[]; estimate: { known_usd: number } };
    expect(doc.steps.map((s) => s.cost_usd)).toEqual([0.2595, 0.3]);
    expect(doc.estimate.known_usd).toBe(0.5595);
    expect(unrounded(doc)).toEqual([]);
  });
});
