import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { manifestJsonSchema, modelInputsMarkdown } from '../../src/manifest/json-schema.js';

describe('schemas/manifest.schema.json', () => {
  it('is up to date with the zod schema (run `npm run schemas` when this fails)', () => {
    expect(readFileSync(new URL('../../schemas/manifest.schema.json', import.meta.url), 'utf8')).toBe(manifestJsonSchema());
  });

  it("keeps the manifest reference's model inputs up to date (run `npm run schemas` when this fails)", () => {
    const page = readFileSync(new URL('../../docs/reference/manifest.md', import.meta.url), 'utf8');
    expect(page).toContain(modelInputsMarkdown());
    expect(page).toContain('| `variation_index` | integer 0..2147483647 |');
  });

  it("describes each model's input, so editors complete its fields and flag a typo", () => {
    const schema = JSON.parse(manifestJsonSchema()) as {
      properties: {
        steps: {
          additionalProperties: {
            allOf: {
              if: { properties: { model: { const: string } } };
              then: { properties: { input: { properties: Record<string, unknown>; additionalProperties: unknown } } };
            }[];
          };
        };
      };
    };
    const rules = schema.properties.steps.additionalProperties.allOf;
    const sheet = rules.find((r) => r.if.properties.model.const === 'character-sheet')?.then.properties.input;
    expect(Object.keys(sheet?.properties ?? {})).toEqual(expect.arrayContaining(['tier', 'seed', 'variation_index', 'selection']));
    expect(sheet?.additionalProperties).toBe(false);
    // A template is accepted where the request takes an integer.
    expect((sheet?.properties.variation_index as { anyOf: { type: string; pattern?: string }[] }).anyOf).toEqual([
      expect.objectContaining({ type: 'integer' }),
      expect.objectContaining({ type: 'string', pattern: '\\{\\{.*\\}\\}' }),
    ]);
    expect(rules.map((r) => r.if.properties.model.const)).toEqual([
      'character-sheet',
      'marketing-image',
      'agent',
      'dop',
      'soul',
      'speak',
      'soul-standard',
    ]);
  });

  it('describes the manifest keys editors should complete', () => {
    const schema = JSON.parse(manifestJsonSchema()) as { properties: Record<string, unknown>; required: string[] };
    expect(Object.keys(schema.properties)).toEqual(
      expect.arrayContaining(['version', 'name', 'defaults', 'vars', 'env', 'prices', 'steps']),
    );
    expect(schema.required).toEqual(expect.arrayContaining(['version', 'name', 'steps']));
  });
});
