import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../src/emulator/index.js';

function capture(env: NodeJS.ProcessEnv = {}): CliIO & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  return {
    stdout,
    stderr,
    out: (t) => stdout.push(t),
    write: async (t) => void stdout.push(t),
    err: (t) => stderr.push(t),
    env,
    signal: new AbortController().signal,
  };
}

const pipelines = new URL('../../pipelines/', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'genpipe-plan-emu-'));
let emulator: Emulator;
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  emulator = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  env = { GENPIPE_BASE_URL: emulator.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` };
});
afterAll(async () => {
  await emulator.close();
});

describe('plans that read the live catalogs', () => {
  it('campaign.yaml resolves presets by name from the preset catalog and plans both modes', async () => {
    const io = capture(env);
    expect(await main(['plan', join(pipelines, 'campaign.yaml'), '--json'], io)).toBe(0);
    const doc = JSON.parse(io.stdout.join('')) as {
      steps: { id: string; count: number }[];
      instances: { id: string; body: { preset_id?: string } }[];
    };
    expect(doc.steps).toEqual([expect.objectContaining({ id: 'enhanced', count: 4 }), expect.objectContaining({ id: 'direct', count: 4 })]);
    const visible = emulator.presets.presets.filter((p) => p.visible && /market/i.test(p.name)).map((p) => p.id);
    const used = new Set(doc.instances.filter((i) => i.id.startsWith('enhanced[')).map((i) => i.body.preset_id));
    expect([...used].sort()).toEqual([...visible].sort());
    expect(used.size).toBe(2);
  });

  it('--emulator plans the campaign with no configuration at all', async () => {
    const io = capture({});
    expect(await main(['validate', join(pipelines, 'campaign.yaml'), '--emulator'], io)).toBe(0);
    expect(io.stdout[0]).toMatch(/campaign\.yaml: valid; 2 step\(s\), 8 instance\(s\)/);
  });

  it('checks a selection against the live options catalog: a stale key is refused with its location', async () => {
    const path = join(dir, 'stale.yaml');
    writeFileSync(
      path,
      'version: 1\nname: stale\nsteps:\n  a:\n    model: character-sheet\n    input:\n      tier: cats\n      selection: { no_such_category: [x] }\n',
    );
    const io = capture(env);
    expect(await main(['validate', path], io)).toBe(2);
    expect(io.stderr[0]).toMatch(
      /stale\.yaml:8:\d+: steps\.a\.input\.selection\.no_such_category: a: category "no_such_category" is not in the catalog/,
    );
  });

  it('an invalid manifest sends zero requests', async () => {
    const invalid = [
      'version: 1\nname: bad\nsteps:\n  a:\n    model: character-sheet\n    input: { seed: 0, selection: { fur: [x] } }\n',
      'version: 1\nname: bad\nsteps:\n  a:\n    model: marketing-image\n    matrix: { p: { presets: { name: "*" } } }\n    input: { prompt: 1 }\n',
      'version: 1\nname: bad\nsteps:\n  a:\n    model: marketing-image\n    matrix: { row: { csv: missing.csv } }\n    input: { prompt: "{{ row.x }}" }\n',
      'version: 1\nname: bad\nsteps: {a: {model: agent, input: {content: ""}}}\n',
      'version: 1\nname: [broken\n',
    ];
    let catalogReads = 0;
    for (const [i, text] of invalid.entries()) {
      const path = join(dir, `invalid-${i}.yaml`);
      writeFileSync(path, text);
      emulator.stats.reset();
      const io = capture(env);
      expect(await main(['validate', path], io), text).toBe(2);
      // Catalog reads (GET, free) are allowed; nothing may reach a route that spends credits.
      const spending = [...emulator.stats.byRoute.keys()].filter((route) => !route.startsWith('GET '));
      expect(spending, text).toEqual([]);
      catalogReads += emulator.stats.total;
    }
    // The counter is live: the selection and preset cases did read the catalogs.
    expect(catalogReads).toBeGreaterThanOrEqual(2);
    expect(emulator.requests.inspect({}).length).toBe(0);
  });
});
