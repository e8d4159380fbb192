// `output: {filename: ...}`: a template names the files, sanitised, and two
// instances of a step that would get the same name are refused at plan time, before anything is sent.
import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { ManifestError } from '../../src/manifest/errors.js';
import { loadManifestFile } from '../../src/manifest/load.js';
import { buildPlan } from '../../src/plan/plan.js';
import { cleanTemps, emuRequests, findRunDir, HF_KEY, tempDir } from '../run/runner-helpers.js';

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterAll(async () => {
  await emu.close();
  cleanTemps();
});

const dir = tempDir('genpipe-file-names-');

function manifest(name: string, filename: string, matrix = '      seed: [1, 2]\n      variation_index: [0, 1]\n'): string {
  const path = join(dir, `${name}.yaml`);
  writeFileSync(
    path,
    `version: 1\nname: ${name}\nsteps:\n  sheets:\n    model: character-sheet\n    matrix:\n${matrix}    output:\n      filename: ${JSON.stringify(filename)}\n    input:\n      tier: cats\n      seed: "{{ seed }}"\n      variation_index: "{{ variation_index }}"\n`,
  );
  return path;
}

async function stems(file: string): Promise<(string | undefined)[]> {
  const plan = await buildPlan(loadManifestFile(file));
  return [...plan.instances('sheets')].map((i) => i.fileStem);
}

async function refused(file: string): Promise<{ line: number; col: number; message: string }[]> {
  const error = await buildPlan(loadManifestFile(file)).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(ManifestError);
  return (error as ManifestError).problems.map((p) => ({ line: p.location.line, col: p.location.col, message: p.message }));
}

describe('file names from a template', () => {
  it('renders and sanitises the name of every instance', async () => {
    expect(await stems(manifest('ok', 'cat {{ seed }}/v{{ variation_index }}'))).toEqual(['cat_1_v0', 'cat_1_v1', 'cat_2_v0', 'cat_2_v1']);
  });

  it('keeps non-ASCII letters, NFC-normalised: Zürich and 北京 Tea Set', async () => {
    const cities = '      seed: [1]\n      city: ["Zürich", "北京 Tea Set", "Zu\\u0308g"]\n      variation_index: [0]\n';
    expect(await stems(manifest('cities', '{{ city }}', cities))).toEqual(['Zürich', '北京_Tea_Set', 'Züg']);
  });

  it('names that differ only in Unicode form (composed or not) collide, and are refused', async () => {
    const forms = '      seed: [1]\n      city: ["Zürich", "Zu\\u0308rich"]\n      variation_index: [0]\n';
    const problems = await refused(manifest('forms', '{{ city }}', forms));
    expect(problems).toHaveLength(1);
    expect(problems[0]?.message).toMatch(/would both be written as "Zürich"/);
  });

  it('a Windows device name gets a leading _', async () => {
    expect(await stems(manifest('device', 'NUL', '      seed: [1]\n      variation_index: [0]\n'))).toEqual(['_NUL']);
  });

  it('refuses two instances that would share a name, at the template, naming both', async () => {
    expect(await refused(manifest('clash', 'cat-{{ seed }}', '      seed: [1]\n      variation_index: [0, 1]\n'))).toEqual([
      {
        line: 10,
        col: 17,
        message:
          'sheets[seed=1,variation_index=0] and sheets[seed=1,variation_index=1] would both be written as "cat-1": add an axis that tells them apart to the file name',
      },
    ]);
  });

  it('names that differ only in case collide too (case-insensitive file systems)', async () => {
    const file = manifest('case', '{{ label }}', '      seed: [1]\n      variation_index: [0]\n      label: [A, a]\n');
    const problems = await refused(file);
    expect(problems.some((p) => /would both be written as "a"/.test(p.message))).toBe(true);
  });

  it('refuses a name with nothing a file name can keep, and one over 100 characters', async () => {
    expect((await refused(manifest('empty', '///', '      seed: [1]\n      variation_index: [0]\n')))[0]?.message).toBe(
      'sheets[seed=1,variation_index=0]: the file name "///" has no character a file name can keep',
    );
    expect(
      (await refused(manifest('long', `${'x'.repeat(101)}{{ seed }}`, '      seed: [1]\n      variation_index: [0]\n')))[0]?.message,
    ).toMatch(/is longer than 100 characters$/);
  });

  it('refuses a name read from upstream outputs, and a path that is nothing', () => {
    const path = join(dir, 'upstream.yaml');
    writeFileSync(
      path,
      `version: 1\nname: up\nsteps:\n  a:\n    model: character-sheet\n    input: { tier: cats }\n  b:\n    model: dop\n    for_each: a\n    output:\n      filename: "{{ upstream.outputs.images[0].url }}-{{ nothing }}"\n    input:\n      input_images: [{ type: image_url, image_url: "{{ upstream.outputs.images[0].url }}" }]\n`,
    );
    let error: unknown;
    try {
      loadManifestFile(path);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ManifestError);
    expect((error as ManifestError).problems.map((p) => p.message)).toEqual([
      '{{ upstream.outputs.images[0].url }}: a file name cannot read upstream outputs, which are known only at run time',
      '{{ nothing }}: "nothing" is not an axis of this step, vars, env, run or upstream',
    ]);
  });

  it('a run writes the files under those names, and a refused plan sends nothing', { timeout: 30_000 }, async () => {
    const env = { GENPIPE_BASE_URL: emu.url, HF_KEY };
    const io = (): CliIO => ({ out: () => {}, write: async () => {}, err: () => {}, env, signal: new AbortController().signal });
    const out = tempDir();
    expect(
      await main(['run', manifest('named', 'cat_{{ seed }}_{{ variation_index }}'), '--out', out, '--rate', '1000', '--quiet'], io()),
    ).toBe(0);
    expect(readdirSync(join(findRunDir(out, 'named'), 'outputs', 'sheets')).sort()).toEqual([
      'cat_1_0.png',
      'cat_1_1.png',
      'cat_2_0.png',
      'cat_2_1.png',
    ]);
    const before = emuRequests(emu).length;
    expect(await main(['run', manifest('clashing', '{{ seed }}'), '--out', out, '--rate', '1000', '--quiet'], io())).toBe(2);
    expect(emuRequests(emu)).toHaveLength(before);
  });
});
