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

  it("covers prices per configuration: a table's rows and a step's price_usd formula, and refuses what the manifest refuses", () => {
    interface Row {
      type: string;
      required: string[];
      additionalProperties: boolean;
      properties: Record<string, { type?: string | string[]; minimum?: number }>;
    }
    const schema = JSON.parse(manifestJsonSchema()) as {
      properties: { prices: { additionalProperties: { anyOf: [{ type: string }, { type: string; minItems: number; items: Row }] } } };
    } & { properties: { steps: { additionalProperties: { properties: { price_usd: { anyOf: { type: string; pattern?: string }[] } } } } } };
    const [flat, table] = schema.properties.prices.additionalProperties.anyOf;
    expect(flat.type).toBe('number');
    // A table: rows, at least one, each with its usd and nothing but when and usd.
    expect(table).toMatchObject({ type: 'array', minItems: 1 });
    expect(table.items.required).toEqual(['usd']);
    expect(table.items.additionalProperties).toBe(false);
    expect(Object.keys(table.items.properties).sort()).toEqual(['usd', 'when']);
    expect(table.items.properties.usd).toMatchObject({ type: 'number', minimum: 0 });
    // A step's price_usd: a number, or a formula in braces; other text is refused, as the manifest refuses it.
    const price = schema.properties.steps.additionalProperties.properties.price_usd.anyOf;
    expect(price.map((p) => p.type)).toEqual(['number', 'string']);
    const formula = new RegExp(price[1]?.pattern ?? '$^');
    expect(formula.test('{{ 0.04 + len(input.image_urls) * 0.01 }}')).toBe(true);
    expect(formula.test('0.04')).toBe(false);
    expect(formula.test('US$0.04')).toBe(false);
  });
});
