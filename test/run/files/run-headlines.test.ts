// headlines.json: every step whose model takes a prompt has a headline for each instance, a
// for_each DoP step (rendered from its upstream's values) and a Soul step among them.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadManifestFile } from '../../../src/manifest/load.js';
import { buildPlan } from '../../../src/plan/plan.js';
import { HEADLINES_FILE, saveHeadlines } from '../../../src/run/files/run-headlines.js';

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describe('headlines.json', () => {
  it('has a headline for every instance of every step with a prompt: sheets, for_each DoP clips, the agent, the Soul banner', async () => {
    const plan = await buildPlan(loadManifestFile(join(import.meta.dirname, '../../../pipelines/nightly.yaml')));
    const dir = mkdtempSync(join(tmpdir(), 'genpipe-headlines-'));
    dirs.push(dir);
    expect(await saveHeadlines(dir, plan)).toBe(true);
    const headlines = JSON.parse(readFileSync(join(dir, HEADLINES_FILE), 'utf8')) as Record<string, string>;
    for (const step of plan.steps) {
      const ids = [...plan.instances(step.id)].map((i) => i.id);
      expect(ids.length, step.id).toBeGreaterThan(0);
      for (const id of ids) expect(headlines[id], id).toBeTypeOf('string');
    }
    expect(headlines['clips[sheets[tier=frogs,seed=7]]']).toBe('The frogs waves at the camera');
    expect(headlines['banner']).toBe('A banner with frogs and capybaras at night, neon style');
    expect(headlines['release-note']).toBe("Create something for tonight's release");
  });
});
