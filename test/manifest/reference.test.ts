import { readFileSync } from 'node:fs';
import * as z from 'zod';
import { describe, expect, it } from 'vitest';
import {
  MANIFEST_REFERENCE_PATH,
  manifestJsonSchema,
  manifestReferenceMarkdown,
  undocumentedFields,
} from '../../src/manifest/json-schema.js';
import { Manifest } from '../../src/manifest/schema.js';
import { loadManifestText } from '../../src/manifest/load.js';

describe('the manifest reference (docs/reference/manifest.md)', () => {
  it('is up to date with the zod schemas (run `npm run schemas` when this fails)', () => {
    expect(readFileSync(new URL(`../../${MANIFEST_REFERENCE_PATH}`, import.meta.url), 'utf8')).toBe(manifestReferenceMarkdown());
  });

  it('every field of the manifest has a description and an example', () => {
    expect(undocumentedFields()).toEqual([]);
  });

  it('a field without a description or an example is named, wherever it stands', () => {
    const schema = z.strictObject({
      a: z.string().meta({ description: 'A.', examples: ['x'] }),
      b: z.int().optional(),
      c: z.record(z.string(), z.strictObject({ d: z.string().meta({ description: 'D.' }) })).meta({ description: 'C.', examples: [{}] }),
    });
    expect(undocumentedFields(z.toJSONSchema(schema) as Record<string, unknown>)).toEqual([
      'b (no description)',
      'b (no example)',
      'c.<key>.d (no example)',
    ]);
  });

  it('lists every top-level key and every step key, each with its example', () => {
    const page = manifestReferenceMarkdown();
    const escaped = (key: string): string => key.replace(/[$.*+?^()[\]{}|\\]/g, '\\$&');
    for (const key of Object.keys(Manifest.shape)) expect(page).toMatch(new RegExp(`\\| \`${escaped(key)}\` \\|.*\\| \`${escaped(key)}: `));
    expect(page).toContain('| `budget_usd` | number |  | The most a run may commit, in US$');
    expect(page).toContain('`budget_usd: 15`');
    expect(page).toContain('## `steps.<step>.matrix.<axis>`: the rows of a CSV file');
    expect(page).toContain('## Model inputs');
  });

  it("the top level's examples make a manifest genpipe accepts", () => {
    const properties = (JSON.parse(manifestJsonSchema()) as { properties: Record<string, { examples: unknown[] }> }).properties;
    const example = (key: string): unknown => properties[key]?.examples[0];
    const text = JSON.stringify({
      version: example('version'),
      name: example('name'),
      defaults: example('defaults'),
      vars: example('vars'),
      steps: example('steps'),
    });
    expect(() => loadManifestText(text, 'example.yaml')).not.toThrow();
  });
});
