import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { OptionsCatalog } from '../../src/api/wire.js';
import { ManifestError } from '../../src/manifest/errors.js';
import { loadManifestText } from '../../src/manifest/load.js';
import { buildPlan, type Plan } from '../../src/plan/plan.js';
import { planHash } from '../../src/run/files/run-dir.js';

const dir = mkdtempSync(join(tmpdir(), 'genpipe-plan-'));
const load = (text: string) => loadManifestText(text, join(dir, 'm.yaml'));
const ids = (plan: Plan, step: string): string[] => [...plan.instances(step)].map((i) => i.id);

async function refused(text: string, options = {}): Promise<ManifestError> {
  try {
    await buildPlan(load(text), options);
  } catch (error) {
    expect(error).toBeInstanceOf(ManifestError);
    return error as ManifestError;
  }
  throw new Error('expected the plan to be refused');
}

const sheets = `version: 1
name: bulk
steps:
  sheets:
    model: character-sheet
    matrix:
      tier: [cats, dogs]
      seed: { range: { from: 1, to: 2 } }
      variation_index: { range: { from: 0, to: 4, step: 2 } }
    input:
      tier: "{{ tier }}"
      seed: "{{ seed }}"
      variation_index: "{{ variation_index }}"
`;

describe('plans', () => {
  it('gives every instance a stable, readable id', async () => {
    const plan = await buildPlan(load(sheets));
    expect(plan.step('sheets').count).toBe(12);
    expect(ids(plan, 'sheets').slice(0, 4)).toEqual([
      'sheets[tier=cats,seed=1,variation_index=0]',
      'sheets[tier=cats,seed=1,variation_index=2]',
      'sheets[tier=cats,seed=1,variation_index=4]',
      'sheets[tier=cats,seed=2,variation_index=0]',
    ]);
  });

  it('keeps the type of single-expression templates in the body', async () => {
    const plan = await buildPlan(load(sheets));
    const first = plan.instances('sheets').next().value;
    expect(first?.body).toEqual({ tier: 'cats', seed: 1, variation_index: 0 });
    expect(first?.canonical).toBe('{"seed":1,"tier":"cats","variation_index":0}');
  });

  it('derives the same idempotency keys when planned twice, and a new key for a new variation', async () => {
    const a = [...(await buildPlan(load(sheets))).instances('sheets')].map((i) => i.key);
    const b = [...(await buildPlan(load(sheets))).instances('sheets')].map((i) => i.key);
    expect(a).toEqual(b);
    expect(new Set(a).size).toBe(a.length);
    expect(a[0]).toMatch(/^gp1-[0-9a-f]{40}$/);
    const renamed = [...(await buildPlan(load(sheets.replace('name: bulk', 'name: other')))).instances('sheets')].map((i) => i.key);
    expect(renamed[0]).not.toBe(a[0]);
  });

  it('validates every instance, not only the first, and locates the rule that breaks', async () => {
    const text = sheets.replace('tier: [cats, dogs]', 'tier: [cats, normal]');
    const error = await refused(text);
    // human tiers require variation_index 0: the normal instances with index 2 and 4 break it
    expect(error.problems).toHaveLength(1);
    const problem = error.problems[0];
    expect(problem?.path).toBe('steps.sheets.input.variation_index');
    expect(problem?.message).toBe(
      'sheets[tier=normal,seed=1,variation_index=2]: human tier normal requires variation_index 0 (and 3 more instances)',
    );
    expect(problem?.location.line).toBe(13); // the `variation_index:` line of the input
  });

  it('reports a template with no value for an instance at the template', async () => {
    const text = `version: 1
name: rows
steps:
  ads:
    model: marketing-image
    include:
      - { prompt: "a" }
      - { other: "b" }
    input:
      prompt: "{{ prompt }}"
`;
    const error = await refused(text);
    expect(error.problems[0]?.message).toBe('ads[other=b]: {{ prompt }} has no value here');
    expect(error.problems[0]?.location.line).toBe(10);
  });

  it('for_each: one instance per upstream instance, crossed with its own axes, reading upstream outputs and values', async () => {
    const text = `${sheets}  clips:
    model: dop
    for_each: sheets
    matrix:
      motion: [slow, fast]
    input:
      prompt: "{{ motion }} {{ upstream.values.tier }}"
      input_images:
        - type: image_url
          image_url: "{{ upstream.outputs.images[0].url }}"
`;
    const plan = await buildPlan(load(text));
    expect(plan.step('clips').count).toBe(24);
    const first = plan.instances('clips').next().value;
    expect(first?.id).toBe('clips[sheets[tier=cats,seed=1,variation_index=0],motion=slow]');
    expect(first?.upstream).toBe('sheets[tier=cats,seed=1,variation_index=0]');
    expect((first?.body as { prompt: string }).prompt).toBe('slow cats');
    // The body reads upstream outputs, so its key is derived at run time from the real URL.
    expect(first?.key).toBeUndefined();
    expect(plan.steps.map((s) => s.id)).toEqual(['sheets', 'clips']);
  });

  it('fingerprints the plan in its validation pass when asked: the same hash as a pass of its own, and a new one for a changed input', async () => {
    const text = `${sheets}  clips:
    model: dop
    for_each: sheets
    input:
      prompt: "wave {{ upstream.values.tier }}"
      input_images:
        - type: image_url
          image_url: "{{ upstream.outputs.images[0].url }}"
`;
    const withFingerprint = await buildPlan(load(text), { fingerprint: true });
    const without = await buildPlan(load(text));
    expect(without.fingerprint).toBeUndefined();
    expect(withFingerprint.fingerprint).toMatch(/^[0-9a-f]{64}$/);
    expect(planHash(without)).toBe(withFingerprint.fingerprint);
    expect(planHash(withFingerprint)).toBe(withFingerprint.fingerprint);
    const changed = await buildPlan(load(text.replace('wave {{', 'jump {{')), { fingerprint: true });
    expect(changed.fingerprint).not.toBe(withFingerprint.fingerprint);
  });

  it('estimates US$0.05 per character sheet and shows unknown prices as unknown, never $0', async () => {
    const text = `${sheets}  ads:
    model: marketing-image
    input: { prompt: "hi" }
`;
    const plan = await buildPlan(load(text));
    expect(plan.estimate()).toEqual({ knownUsd: 0.6, unknownInstances: 1 });
    const priced = await buildPlan(load(text.replace('name: bulk', 'name: bulk\nprices:\n  marketing-image: 0.2')));
    expect(priced.estimate()).toEqual({ knownUsd: 0.8, unknownInstances: 0 });
  });

  const catalog: OptionsCatalog = {
    config_revision: 'r1',
    categories: [
      {
        key: 'fur',
        label: 'Fur',
        tiers: ['cats', 'dogs'],
        max: 1,
        options: [{ key: 'tabby', label: 'Tabby', img: null, color: null, tiers: ['cats'], slot: null, exclusive: false }],
      },
    ],
  };

  it('checks selections against the live options catalog', async () => {
    const text = sheets.replace(
      '      variation_index: "{{ variation_index }}"\n',
      '      variation_index: "{{ variation_index }}"\n      selection: { fur: [tabby] }\n',
    );
    const error = await refused(text, { catalog: async () => catalog });
    expect(error.problems[0]?.message).toMatch(
      /^sheets\[tier=dogs,seed=1,variation_index=0\]: option "tabby" in category "fur" is only for cats, not dogs \(and 5 more instances\)$/,
    );
    const cats = text.replace('tier: [cats, dogs]', 'tier: [cats]');
    expect((await buildPlan(load(cats), { catalog: async () => catalog })).step('sheets').count).toBe(6);
  });

  it('refuses a selection when no catalog can be read, saying how to give one', async () => {
    const text = sheets.replace(
      '      variation_index: "{{ variation_index }}"\n',
      '      variation_index: "{{ variation_index }}"\n      selection: { fur: [tabby] }\n',
    );
    expect((await refused(text)).problems[0]?.message).toMatch(/needs the live options catalog: set --base-url/);
  });

  it('checks local image paths at plan time, relative to the manifest', async () => {
    writeFileSync(
      join(dir, 'face.png'),
      Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0, 0x49, 0x45, 0x4e, 0x44, 0, 0, 0, 0]),
    );
    writeFileSync(join(dir, 'notes.txt'), 'not an image');
    const text = (path: string) => `version: 1
name: faces
steps:
  sheets:
    model: character-sheet
    input: { image_url: "${path}" }
`;
    const plan = await buildPlan(load(text('face.png')));
    expect(plan.instances('sheets').next().value?.body).toEqual({ tier: 'normal', image_url: join(dir, 'face.png') });
    expect((await refused(text('notes.txt'))).problems[0]?.message).toMatch(/is not a JPEG, PNG or WebP image/);
    expect((await refused(text('missing.png'))).problems[0]?.message).toMatch(/: the image file .*missing\.png does not exist$/);
  });

  it('refuses a plan over the instance limit before validating anything', async () => {
    const error = await refused(sheets, { maxInstances: 11 });
    expect(error.problems[0]?.message).toBe(
      'step sheets expands to 12 instances, over the limit of 11; split the sweep into several manifests',
    );
    expect((await buildPlan(load(sheets), { maxInstances: 12 })).totalInstances).toBe(12);
    // With exclude, the count needs a walk of the product: a billion-wide product is refused without one.
    const huge = sheets
      .replace('seed: { range: { from: 1, to: 2 } }', 'seed: { range: { from: 1, to: 1000000000 } }')
      .replace('    input:\n', '    exclude: [{ tier: dogs }]\n    input:\n');
    expect((await refused(huge)).problems[0]?.message).toMatch(/^step sheets expands to 6000000000 instances, over the limit of 10000000/);
  });

  it('reads allow-listed environment variables, and refuses one that is not set', async () => {
    const text = `version: 1
name: envs
env: [CAMPAIGN]
steps:
  ads:
    model: marketing-image
    input: { prompt: "{{ env.CAMPAIGN }}" }
`;
    const plan = await buildPlan(load(text), { env: { CAMPAIGN: 'summer', OTHER: 'x' } });
    expect(plan.instances('ads').next().value?.body).toMatchObject({ prompt: 'summer' });
    expect((await refused(text, { env: {} })).problems[0]?.message).toBe('environment variable CAMPAIGN is allow-listed but not set');
  });
});
