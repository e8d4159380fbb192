// A big plan is checked by two threads (src/plan/parallel-plan.ts). The second
// thread must make the instances, and the verdict, one thread makes: these tests run the built
// binary with GENPIPE_PLAN_PARALLEL_MIN=1 (two threads from one instance on) against the same
// binary left to one thread (plans this small stay below the default threshold).
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadManifestFile } from '../../src/manifest/load.js';
import { parallelPlanHelper } from '../../src/plan/parallel-plan.js';
import { buildPlan } from '../../src/plan/plan.js';
import { InstanceSpool } from '../../src/plan/instance-spool.js';
import { ManifestError } from '../../src/manifest/errors.js';
import { BIN, cleanTemps, tempDir } from '../run/runner-helpers.js';

afterAll(cleanTemps);

const dir = tempDir('genpipe-parallel-plan-');
const root = new URL('../../', import.meta.url).pathname;

function manifest(name: string, text: string): string {
  const path = join(dir, `${name}.yaml`);
  writeFileSync(path, text);
  return path;
}

/** `genpipe plan --json` as a process: two threads when `parallel`, one otherwise. */
function planJson(path: string, parallel: boolean): { code: number | null; stdout: string; stderr: string } {
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, BRAND: 'Acme', ...(parallel ? { GENPIPE_PLAN_PARALLEL_MIN: '1' } : {}) };
  const result = spawnSync(process.execPath, [BIN, 'plan', path, '--json'], { env, encoding: 'utf8', timeout: 60_000 });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

const sheets = (matrix: string, input = '', extra = ''): string => `version: 1
name: parallel
env: [BRAND]
vars: { theme: winter }
steps:
  sheets:
    model: character-sheet
    matrix:
${matrix}${extra}    input:
      tier: cats
      seed: "{{ seed }}"
      variation_index: "{{ variation_index }}"
${input}`;

describe('a plan checked by two threads', () => {
  it('prints, byte for byte, the plan one thread prints: every instance once, in plan order, with its key', () => {
    const path = manifest(
      'same',
      sheets(
        '      seed: { range: { from: 1, to: 20 } }\n      variation_index: [0, 1, 2]\n',
        '      brief: "{{ vars.theme }} mascot for {{ env.BRAND }}"\n',
      ),
    );
    const one = planJson(path, false);
    const two = planJson(path, true);
    expect(one.code).toBe(0);
    expect(two.code).toBe(0);
    expect(two.stdout).toBe(one.stdout);
    const instances = (JSON.parse(two.stdout) as { instances: { id: string; key: string; body: { brief: string } }[] }).instances;
    expect(instances).toHaveLength(60);
    expect(instances[59]?.id).toBe('sheets[seed=20,variation_index=2]');
    expect(new Set(instances.map((i) => i.key)).size).toBe(60);
    // The second thread read the allow-listed variable the first one did.
    expect(instances[59]?.body.brief).toBe('winter mascot for Acme');
  });

  it('works when genpipe is driven from node --input-type=module -e (options the worker must not inherit)', () => {
    const path = manifest('eval', sheets('      seed: { range: { from: 1, to: 10 } }\n      variation_index: [0, 1]\n'));
    const one = planJson(path, false);
    const script = `import { main } from ${JSON.stringify(join(root, 'dist/cli/main.js'))}; process.exitCode = await main(${JSON.stringify(['plan', path, '--json'])});`;
    const result = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
      env: { PATH: process.env.PATH, BRAND: 'Acme', GENPIPE_PLAN_PARALLEL_MIN: '1' },
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    expect(result.stdout).toBe(one.stdout);
  });

  it("renders {{ run.started_at }} with the first thread's time in both", () => {
    const path = manifest(
      'started',
      sheets('      seed: { range: { from: 1, to: 10 } }\n      variation_index: [0, 1]\n', '      brief: "run {{ run.started_at }}"\n'),
    );
    const two = planJson(path, true);
    expect(two.code).toBe(0);
    const briefs = new Set((JSON.parse(two.stdout) as { instances: { body: { brief: string } }[] }).instances.map((i) => i.body.brief));
    expect(briefs.size).toBe(1);
  });

  it('refuses a plan whose only invalid instances are in the second thread’s part (exit 2, nothing printed), as one thread does', () => {
    const path = manifest('late-invalid', sheets('      seed: [1, 2, 3, 4, 5, 6, 7, 8, 9, 0]\n      variation_index: [0, 1]\n'));
    const one = planJson(path, false);
    const two = planJson(path, true);
    expect(one.code).toBe(2);
    expect(two.code).toBe(2);
    expect(two.stdout).toBe('');
    expect(two.stderr).toBe(one.stderr);
    expect(two.stderr).toContain('steps.sheets.matrix.seed[9]: 0 must be at least 1; read by steps.sheets.input.seed');
  });

  it('counts a problem both threads meet over the whole plan ("in 6 instances")', () => {
    const path = manifest('both-invalid', sheets('      seed: { range: { from: 1, to: 6 } }\n      variation_index: [-1, 0]\n'));
    const one = planJson(path, false);
    const two = planJson(path, true);
    expect(two.code).toBe(2);
    expect(two.stderr).toBe(one.stderr);
    expect(two.stderr).toContain(
      'steps.sheets.matrix.variation_index[0]: -1 must be at least 0; read by steps.sheets.input.variation_index',
    );
    expect(two.stderr).toContain(' in 6 instances');
  });

  it("checks the local image files the second thread's instances name", () => {
    for (const name of ['face.png', 'face1.png', 'face2.png', 'face3.png'])
      writeFileSync(
        join(dir, name),
        Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0, 0x49, 0x45, 0x4e, 0x44, 0, 0, 0, 0]),
      );
    // Each value once (a repeated value is refused: two instances with one id).
    const text = `version: 1
name: faces
steps:
  sheets:
    model: character-sheet
    matrix:
      face: [face1.png, face2.png, face3.png, missing.png]
    input: { image_url: "{{ face }}" }
`;
    const path = manifest('faces', text);
    const two = planJson(path, true);
    expect(two.code).toBe(2);
    expect(two.stderr).toMatch(/sheets\[face=missing\.png\]: the image file .*missing\.png does not exist/);
    expect(planJson(manifest('faces-ok', text.replace('missing.png', 'face.png')), true).code).toBe(0);
  });

  it('leaves to one thread a plan with output file names: two names that collide across the parts are refused', () => {
    const path = manifest(
      'names',
      sheets('      half: [1, 2]\n      who: [a, b]\n', '', '    output:\n      filename: "{{ who }}"\n')
        .replace('seed: "{{ seed }}"', 'seed: "{{ half }}"')
        .replace('variation_index: "{{ variation_index }}"', 'variation_index: 0'),
    );
    const two = planJson(path, true);
    expect(two.code).toBe(2);
    expect(two.stderr).toContain('would both be written as "a"');
  });

  it('leaves to one thread a plan with a for_each step: the same plan', () => {
    const text = `${sheets('      seed: { range: { from: 1, to: 4 } }\n      variation_index: [0]\n')}  clips:
    model: dop
    for_each: sheets
    matrix:
      motion: [slow, fast]
    input:
      prompt: "{{ motion }} {{ upstream.values.seed }}"
      input_images:
        - type: image_url
          image_url: "{{ upstream.outputs.images[0].url }}"
`;
    const path = manifest('for-each', text);
    const one = planJson(path, false);
    const two = planJson(path, true);
    expect(two.code).toBe(0);
    expect(two.stdout).toBe(one.stdout);
  });

  it('ships the worker module in the bundle the binary loads', () => {
    expect(existsSync(join(root, 'dist/bundle/plan-worker.js'))).toBe(true);
  });

  it('hands the second half to the worker: this thread spools the first half, the worker the rest', async () => {
    const path = manifest(
      'halves',
      sheets('      seed: { range: { from: 1, to: 5 } }\n      variation_index: [0, 1]\n', '      brief: "{{ env.BRAND }}"\n'),
    );
    const mine = new InstanceSpool(join(dir, 'mine.jsonl'));
    const theirs = join(dir, 'theirs.jsonl');
    const run = { id: 'preview', startedAt: new Date() };
    const helper = parallelPlanHelper({
      manifest: path,
      spool: theirs,
      env: { BRAND: 'Acme' },
      run,
      presets: () => undefined,
      signal: new AbortController().signal,
      minInstances: 1,
      worker: new URL('dist/plan/plan-worker.js', `file://${root}`),
    });
    const plan = await buildPlan(loadManifestFile(path), { env: { BRAND: 'Acme' }, run, helper, onInstance: (i) => mine.add(i) });
    mine.close();
    expect(plan.totalInstances).toBe(10);
    const ids = (file: string): string[] => [...readFileSync(file, 'utf8').matchAll(/"id":"([^"]+)"/g)].map((m) => m[1] as string);
    expect(ids(mine.path)).toEqual([
      'sheets[seed=1,variation_index=0]',
      'sheets[seed=1,variation_index=1]',
      'sheets[seed=2,variation_index=0]',
      'sheets[seed=2,variation_index=1]',
      'sheets[seed=3,variation_index=0]',
    ]);
    expect(ids(theirs)).toEqual([
      'sheets[seed=3,variation_index=1]',
      'sheets[seed=4,variation_index=0]',
      'sheets[seed=4,variation_index=1]',
      'sheets[seed=5,variation_index=0]',
      'sheets[seed=5,variation_index=1]',
    ]);
    // The worker's lines continue this thread's: each starts with its separating comma.
    expect(readFileSync(theirs, 'utf8').startsWith(',\n{"id":"sheets[seed=3,variation_index=1]"')).toBe(true);
  });

  it('rejects the plan when the worker finds a problem, with the problem located in the manifest', async () => {
    const path = manifest('halves-bad', sheets('      seed: [1, 2, 3, 0]\n      variation_index: [0]\n'));
    const helper = parallelPlanHelper({
      manifest: path,
      spool: join(dir, 'bad.jsonl'),
      env: { BRAND: 'x' },
      run: { id: 'preview', startedAt: new Date() },
      presets: () => undefined,
      signal: new AbortController().signal,
      minInstances: 1,
      worker: new URL('dist/plan/plan-worker.js', `file://${root}`),
    });
    const seen: string[] = [];
    const error = await buildPlan(loadManifestFile(path), { env: { BRAND: 'x' }, helper, onInstance: (i) => seen.push(i.id) }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(ManifestError);
    // At the value in the seed list, with the template that reads it as the second location.
    expect((error as ManifestError).problems[0]?.message).toBe('0 must be at least 1');
    expect((error as ManifestError).problems[0]?.location.line).toBe(9);
    expect((error as ManifestError).problems[0]?.also?.location.line).toBe(13);
    expect(seen).toEqual(['sheets[seed=1,variation_index=0]', 'sheets[seed=2,variation_index=0]']);
  });

  it('hands the worker the presets this thread read: the second half sweeps the same presets, and without them the worker refuses', async () => {
    const presets = [
      { id: '11111111-1111-4111-8111-111111111111', type: 'ads' as const, name: 'Summer Beach' },
      { id: '22222222-2222-4222-8222-222222222222', type: 'ads' as const, name: 'Winter Cabin' },
    ];
    const path = manifest(
      'presets',
      `version: 1
name: presets
steps:
  ads:
    model: marketing-image
    matrix:
      n: { range: { from: 1, to: 3 } }
      preset: { presets: { name: "*" } }
    input:
      prompt: "ad {{ n }}"
      enhance_prompt: true
      preset_id: "{{ preset.id }}"
      image_urls: ["https://cdn.example.com/product.png"]
`,
    );
    const built = new URL('dist/plan/plan-worker.js', `file://${root}`);
    let read: typeof presets | undefined;
    const theirs = join(dir, 'presets-theirs.jsonl');
    const helper = parallelPlanHelper({
      manifest: path,
      spool: theirs,
      env: {},
      run: { id: 'preview', startedAt: new Date() },
      presets: () => read,
      signal: new AbortController().signal,
      minInstances: 1,
      worker: built,
    });
    await buildPlan(loadManifestFile(path), { presets: async () => (read = presets), helper });
    const ids = [...readFileSync(theirs, 'utf8').matchAll(/"preset_id":"([^"]+)"/g)].map((m) => m[1]);
    expect(ids).toEqual([presets[1]?.id, presets[0]?.id, presets[1]?.id]);
    const blind = parallelPlanHelper({
      manifest: path,
      spool: join(dir, 'presets-blind.jsonl'),
      env: {},
      run: { id: 'preview', startedAt: new Date() },
      presets: () => undefined,
      signal: new AbortController().signal,
      minInstances: 1,
      worker: built,
    });
    await expect(buildPlan(loadManifestFile(path), { presets: async () => presets, helper: blind })).rejects.toThrow(
      /second thread failed: the plan reads presets the first thread did not/,
    );
  });

  it('fingerprints a plan in one thread even when offered a helper: the fingerprint covers every instance', async () => {
    const path = manifest(
      'fingerprint',
      sheets('      seed: { range: { from: 1, to: 8 } }\n      variation_index: [0, 1]\n', '      brief: "{{ env.BRAND }}"\n'),
    );
    const run = { id: 'preview', startedAt: new Date('2026-11-25T00:00:00Z') };
    const alone = await buildPlan(loadManifestFile(path), { env: { BRAND: 'Acme' }, run, fingerprint: true });
    const helper = parallelPlanHelper({
      manifest: path,
      spool: join(dir, 'fingerprint.jsonl'),
      env: { BRAND: 'Acme' },
      run,
      presets: () => undefined,
      signal: new AbortController().signal,
      minInstances: 1,
      worker: new URL('dist/plan/plan-worker.js', `file://${root}`),
    });
    const offered = await buildPlan(loadManifestFile(path), { env: { BRAND: 'Acme' }, run, fingerprint: true, helper });
    expect(offered.fingerprint).toMatch(/^[0-9a-f]{64}$/);
    expect(offered.fingerprint).toBe(alone.fingerprint);
  });
});
