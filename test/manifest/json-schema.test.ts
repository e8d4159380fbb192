import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { manifestJsonSchema } from '../../src/manifest/json-schema.js';

describe('schemas/manifest.schema.json', () => {
  it('is up to date with the zod schema (run `npm run schemas` when this fails)', () => {
    expect(readFileSync(new URL('../../schemas/manifest.schema.json', import.meta.url), 'utf8')).toBe(manifestJsonSchema());
  });

  it('describes the manifest keys editors should complete', () => {
    const schema = JSON.parse(manifestJsonSchema()) as { properties: Record<string, unknown>; required: string[] };
    expect(Object.keys(schema.properties)).toEqual(expect.arrayContaining(['version', 'name', 'defaults', 'vars', 'env', 'prices', 'steps']));
    expect(schema.required).toEqual(expect.arrayContaining(['version', 'name', 'steps']));
  });
});
