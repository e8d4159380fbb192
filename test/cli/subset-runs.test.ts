// Subset runs: `genpipe run M --only 'sheets[tier=cats]' --limit 10` runs a
// smoke test with the ids and keys of the full plan, so a later full run with --reuse takes what
// it made; a resume keeps the subset; bad selectors exit 2 with one sentence and send nothing.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { loadManifestFile } from '../../src/manifest/load.js';
import { buildPlan } from '../../src/plan/plan.js';
import { labelMatcher, parseSelector, splitLabel } from '../../src/plan/selection.js';
import { cleanTemps, emuRequests, HF_KEY, tempDir } from '../run/runner-helpers.js';

function capture(env: NodeJS.ProcessEnv): CliIO & { stdout: string[]; stderr: string[] } {
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

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterAll(async () => {
  await emu.close();
  cleanTemps();
});

const dir = tempDir('genpipe-subset-');
const manifest = join(dir, 'sweep.yaml');
writeFileSync(
  manifest,
  `version: 1
name: sweep
steps:
  sheets:
    model: character-sheet
    matrix:
      tier: [cats, dogs]
      seed: { range: { from: 1, to: 4 } }
    input:
      tier: "{{ tier }}"
      seed: "{{ seed }}"
  clips:
    model: dop
    for_each: sheets
    input:
      model: dop-turbo
      prompt: move
      input_images: [{ type: image_url, image_url: "{{ upstream.outputs.images[0].url }}" }]
`,
);

const ids = async (only: string[], limit?: number): Promise<Record<string, string[]>> => {
  const plan = await buildPlan(loadManifestFile(manifest), { select: { only: only.map(parseSelector), limit } });
  const out: Record<string, string[]> = {};
  for (const step of plan.steps) out[step.id] = [...plan.instances(step.id)].map((i) => i.id);
  return out;
};

describe('selectors', () => {
  it('parse a step, or a step with axis values, quoted or not', () => {
    expect(parseSelector('sheets')).toEqual({ text: 'sheets', step: 'sheets', where: [] });
    expect(parseSelector('ads[row=SKU-1,preset="Summer, Market"]').where).toEqual([
      ['row', 'SKU-1'],
      ['preset', 'Summer, Market'],
    ]);
    expect(splitLabel('tier=cats,preset="a, b"')).toEqual(['tier=cats', 'preset="a, b"']);
    expect(labelMatcher([parseSelector('ads[preset=Summer Market]')])('row=2,preset="Summer Market"')).toBe(true);
    expect(labelMatcher([parseSelector('ads[preset=Summer]')])('row=2,preset="Summer Market"')).toBe(false);
  });

  it('refuse what is not a selector', () => {
    expect(() => parseSelector('Sheets')).toThrow(/^--only "Sheets" is not a selector; write a step id/);
    expect(() => parseSelector('sheets[tier]')).toThrow(/has "tier", which is not axis=value/);
    expect(() => parseSelector('sheets[]')).toThrow(/has empty brackets/);
  });

  it('select by axis value, union over --only, keeping the full plan ids and keys', async () => {
    const full = await buildPlan(loadManifestFile(manifest));
    const fullKeys = new Map([...full.instances('sheets')].map((i) => [i.id, i.key]));
    const plan = await buildPlan(loadManifestFile(manifest), {
      select: { only: [parseSelector('sheets[tier=dogs,seed=2]'), parseSelector('sheets[seed=4]')] },
    });
    const chosen = [...plan.instances('sheets')];
    expect(chosen.map((i) => i.id)).toEqual(['sheets[tier=cats,seed=4]', 'sheets[tier=dogs,seed=2]', 'sheets[tier=dogs,seed=4]']);
    for (const i of chosen) expect(i.key).toBe(fullKeys.get(i.id));
    expect(plan.step('sheets').count).toBe(3);
    expect(plan.step('clips').count).toBe(0);
  });

  it('--limit keeps the first N of each step; a for_each step follows the selected upstream', async () => {
    const selected = await ids([], 3);
    expect(selected.sheets).toEqual(['sheets[tier=cats,seed=1]', 'sheets[tier=cats,seed=2]', 'sheets[tier=cats,seed=3]']);
    expect(selected.clips).toHaveLength(3);
    const plan = await buildPlan(loadManifestFile(manifest), { select: { limit: 3 } });
    expect(plan.steps.map((s) => s.count)).toEqual([3, 3]);
  });

  it('refuse a step, axis or value that selects nothing, and a step without its upstream', async () => {
    const refusal = (only: string[]) =>
      ids(only).then(
        () => 'accepted',
        (e: Error) => e.message,
      );
    expect(await refusal(['sheet'])).toBe('--only "sheet" names no step of the manifest; did you mean "sheets"?');
    expect(await refusal(['sheets[tire=cats]'])).toBe(
      '--only "sheets[tire=cats]": "tire" is not an axis of step sheets (axes: tier, seed).',
    );
    expect(await refusal(['sheets[tier=cows]'])).toBe('--only "sheets[tier=cows]" matches no instance of step sheets.');
    expect(await refusal(['clips'])).toBe('--only selects step clips, which runs for_each sheets: select sheets too (--only sheets).');
  });
});

describe('a smoke test, then the full run', () => {
  it('runs the subset, resumes it as it was, and a full run with --reuse sends only the rest', { timeout: 60_000 }, async () => {
    const env = { GENPIPE_BASE_URL: emu.url, HF_KEY };
    const out = tempDir();
    const smoke = capture(env);
    expect(
      await main(
        ['run', manifest, '--out', out, '--rate', '1000', '--quiet', '--only', 'sheets[tier=cats]', '--only', 'clips', '--limit', '2'],
        smoke,
      ),
      smoke.stderr.join('\n'),
    ).toBe(0);
    const runDir = join(out, 'sweep', readdirSync(join(out, 'sweep')).filter((n) => !n.startsWith('.'))[0] as string);
    expect(JSON.parse(readFileSync(join(runDir, 'plan.json'), 'utf8')).selection).toEqual({
      only: ['sheets[tier=cats]', 'clips'],
      limit: 2,
    });
    const afterSmoke = emuRequests(emu).length;
    expect(afterSmoke).toBe(4);

    // A resume keeps the subset: the plan is the same, nothing is sent again.
    const resumed = capture(env);
    expect(await main(['resume', runDir, '--quiet'], resumed), resumed.stderr.join('\n')).toBe(0);
    expect(emuRequests(emu)).toHaveLength(afterSmoke);
    const narrowed = capture(env);
    expect(await main(['resume', runDir, '--limit', '5'], narrowed)).toBe(2);
    expect(narrowed.stderr).toEqual([
      'genpipe: --only and --limit choose the instances of a new run; a resume runs the subset its run started with (recorded in plan.json).',
    ]);

    // The full run reuses the two sheets (and their clips): 6 sheets and 6 clips are new.
    const full = capture(env);
    expect(await main(['run', manifest, '--out', out, '--rate', '1000', '--quiet', '--reuse'], full), full.stderr.join('\n')).toBe(0);
    expect(emuRequests(emu).length - afterSmoke).toBe(12);
  });

  it('a bad selector exits 2 with one sentence and sends nothing', async () => {
    const before = emuRequests(emu).length;
    const io = capture({ GENPIPE_BASE_URL: emu.url, HF_KEY });
    expect(await main(['run', manifest, '--out', tempDir(), '--only', 'clips'], io)).toBe(2);
    expect(io.stderr).toEqual(['genpipe: --only selects step clips, which runs for_each sheets: select sheets too (--only sheets).']);
    const zero = capture({ GENPIPE_BASE_URL: emu.url, HF_KEY });
    expect(await main(['run', manifest, '--out', tempDir(), '--limit', '0'], zero)).toBe(2);
    expect(zero.stderr).toEqual(['genpipe: --limit takes a whole number of at least 1, not "0".']);
    expect(emuRequests(emu)).toHaveLength(before);
  });
});
