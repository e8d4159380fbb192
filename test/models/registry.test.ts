// Adding a model is one file (architecture.md): every definition in src/models/ is listed once in
// the registry, and the manifest's model names, the plan's rules and the run's adapters all come
// from those definitions.
import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { MODEL_NAMES as SCHEMA_NAMES } from '../../src/manifest/schema.js';
import { adapterFor, definitionOf, MODEL_DEFINITIONS, MODEL_NAMES, modelFor, RAW_MODEL } from '../../src/models/registry.js';

const MODELS_DIR = new URL('../../src/models/', import.meta.url);

describe('the model registry', () => {
  it('lists every model file of src/models/ once, by the name it defines', () => {
    const defined = readdirSync(MODELS_DIR)
      .filter((f) => f.endsWith('.ts'))
      .flatMap((f) => [...readFileSync(new URL(f, MODELS_DIR), 'utf8').matchAll(/: ModelDefinition<'([a-z-]+)'>/g)].map((m) => m[1]));
    expect([...defined].sort()).toEqual([...MODEL_NAMES].sort());
    expect(new Set(MODEL_NAMES).size).toBe(MODEL_NAMES.length);
  });

  it('is where the manifest schema, the plan and the run get their models', () => {
    expect(SCHEMA_NAMES).toBe(MODEL_NAMES);
    for (const definition of MODEL_DEFINITIONS) {
      expect(modelFor(definition.name)).toBe(definition);
      expect(adapterFor(definition.name)).toBe(definition.adapter);
    }
    expect(modelFor('/vendor/new-model')).toBe(RAW_MODEL);
    expect(adapterFor('/vendor/new-model')).toBeUndefined();
  });

  it('says which models take a seed, so only those are re-rolled', () => {
    expect(
      MODEL_DEFINITIONS.filter((d) => d.seeded)
        .map((d) => d.name)
        .sort(),
    ).toEqual(['character-sheet', 'dop', 'soul', 'speak']);
    expect(definitionOf('marketing-image')?.seeded).toBe(false);
  });
});
