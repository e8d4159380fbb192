import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadManifestFile } from '../../src/manifest/load.js';
import { buildPlan } from '../../src/plan/plan.js';

const dir = new URL('../../pipelines/', import.meta.url).pathname;
const examples = readdirSync(dir).filter((f) => f.endsWith('.yaml'));

describe('example pipelines', () => {
  it('are all here', () => {
    expect(examples.sort()).toEqual(['bulk-characters.yaml', 'campaign.yaml', 'nightly.yaml', 'quickstart.yaml']);
  });

  for (const file of examples) {
    it(`${file} loads and points editors at the JSON Schema`, () => {
      expect(readFileSync(join(dir, file), 'utf8').split('\n')[0]).toBe('# yaml-language-server: $schema=../schemas/manifest.schema.json');
      const loaded = loadManifestFile(join(dir, file));
      expect(loaded.manifest.steps).not.toEqual({});
    });
  }

  it('quickstart.yaml plans offline: six character sheets, US$0.30', async () => {
    const plan = await buildPlan(loadManifestFile(join(dir, 'quickstart.yaml')));
    expect(plan.totalInstances).toBe(6);
    expect(plan.estimate()).toEqual({ knownUsd: 0.3, unknownInstances: 0 });
  });

  it('bulk-characters.yaml plans offline: 4 tiers x 5 seeds x 10 variations x 2 colours less the excluded birds, plus beetles', async () => {
    const plan = await buildPlan(loadManifestFile(join(dir, 'bulk-characters.yaml')));
    expect(plan.step('animals').count).toBe(4 * 5 * 10 * 2 - 5 * 10);
    expect(plan.step('beetles').count).toBe(100);
  });

  it('nightly.yaml plans offline: one clip per sheet, the note and the banner after the clips', async () => {
    const plan = await buildPlan(loadManifestFile(join(dir, 'nightly.yaml')));
    expect(plan.steps.map((s) => [s.id, s.count])).toEqual([
      ['sheets', 6],
      ['clips', 6],
      ['release-note', 1],
      ['banner', 1],
    ]);
    expect(plan.estimate().knownUsd).toBeCloseTo(6 * 0.05 + 6 * 0.25 + 0.5 + 0.03, 6);
  });
});
