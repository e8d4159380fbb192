import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { ManifestError } from '../../src/manifest/errors.js';
import { loadManifestText } from '../../src/manifest/load.js';
import { buildPlan } from '../../src/plan/plan.js';

/** Loads and plans a document; anything but a plan or located ManifestError is a crash. */
async function loadOrLocatedErrors(text: string): Promise<'plan' | 'errors'> {
  try {
    const loaded = loadManifestText(text, 'fuzz.yaml');
    await buildPlan(loaded, { maxProblems: 5, maxInstances: 10_000 });
    return 'plan';
  } catch (error) {
    if (!(error instanceof ManifestError)) throw error;
    expect(error.problems.length).toBeGreaterThan(0);
    for (const problem of error.problems) {
      expect(problem.location.file).toBe('fuzz.yaml');
      expect(problem.location.line).toBeGreaterThanOrEqual(1);
      expect(problem.location.col).toBeGreaterThanOrEqual(1);
      expect(problem.message).not.toMatch(/\n\s+at /); // no stack trace
    }
    return 'errors';
  }
}

const key = fc.constantFrom(
  'version',
  'name',
  'steps',
  'model',
  'input',
  'matrix',
  'zip',
  'include',
  'exclude',
  'needs',
  'for_each',
  'seed',
  'tier',
  'range',
  'from',
  'to',
  'step',
  'vars',
  'env',
  'csv',
  'presets',
  'x',
);
const leaf = fc.oneof(
  fc.integer({ min: -3, max: 2_200_000_000 }),
  fc.constantFrom(
    '{{ seed }}',
    '{{ vars.a }}',
    '{{ upstream.outputs.images[0].url }}',
    'cats',
    'normal',
    'character-sheet',
    'dop',
    '{{',
    '',
  ),
  fc.boolean(),
  fc.constant(null),
);
const tree = fc.letrec((tie) => ({
  node: fc.oneof({ depthSize: 'small' }, leaf, fc.array(tie('node'), { maxLength: 3 }), fc.dictionary(key, tie('node'), { maxKeys: 4 })),
})).node;

describe('fuzzing the loader (fast-check)', () => {
  it('random text never crashes: a plan or located errors', async () => {
    await fc.assert(
      fc.asyncProperty(fc.string({ maxLength: 200 }), async (text) => {
        await loadOrLocatedErrors(text);
      }),
      { numRuns: 300 },
    );
  });

  it('random manifest-shaped documents never crash: a plan or located errors', async () => {
    const step = fc.record(
      {
        model: fc.constantFrom('character-sheet', 'marketing-image', 'dop', 'soul', 'nope'),
        input: fc.dictionary(key, tree, { maxKeys: 4 }),
        matrix: fc.dictionary(key, tree, { maxKeys: 2 }),
      },
      { requiredKeys: ['model'] },
    );
    const doc = fc.record(
      {
        version: fc.constantFrom(1, 2),
        name: fc.constantFrom('demo', 'Bad Name'),
        steps: fc.dictionary(fc.constantFrom('a', 'b', 'c'), step, { minKeys: 1, maxKeys: 3 }),
      },
      { requiredKeys: [] },
    );
    const outcomes = new Set<string>();
    await fc.assert(
      fc.asyncProperty(doc, async (value) => {
        outcomes.add(await loadOrLocatedErrors(stringify(value)));
      }),
      // Seeded, so that "both outcomes are reached" below holds on every run, not on most.
      { numRuns: 300, seed: 20261122 },
    );
    // The generator reaches both sides, so the property is not vacuous.
    expect(outcomes).toEqual(new Set(['plan', 'errors']));
  });
});
