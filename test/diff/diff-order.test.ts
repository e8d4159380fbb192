// genpipe diff lists instances in the one order every view uses (InstanceOrder): steps and axes in
// the manifest's order, list values as written, numbers by value (negative ones too), other text by
// code unit; never a locale's collation, which puts `alpha` before `zeta` whatever the manifest
// says, `-1` before `-2`, and `a` before `B`.
import { describe, expect, it } from 'vitest';
import { diffData, type DiffRun } from '../../src/diff/diff-data.js';
import { InstanceOrder } from '../../src/plan/instance-order.js';
import type { PlanFile } from '../../src/run/files/run-dir.js';
import { applyRecord, emptyRunState } from '../../src/run/journal/run-state.js';

const steps: PlanFile['steps'] = [
  // `shots` comes first in the manifest though it sorts last by name.
  { id: 'shots', model: 'marketing-image', count: 6, needs: [], for_each: null, price_usd: 0.04, axes: { tone: ['zeta', 'alpha'] } },
  // `offset` is a long range: plan.json records no labels for it, so its values go by number.
  { id: 'alpha', model: 'character-sheet', count: 4, needs: [], for_each: null, price_usd: 0.05 },
];

const planFile = (runId: string, planSteps: PlanFile['steps']): PlanFile => ({
  pipeline: 'order',
  runId,
  manifest: 'order.yaml',
  planHash: 'x',
  createdAt: '2026-12-04T00:00:00.000Z',
  steps: planSteps,
  estimate: { known_usd: 0, unknown_instances: 0 },
});

const IDS = [
  'alpha[offset=10]',
  'alpha[offset=-1]',
  'shots[tone=alpha,case=a]',
  'alpha[offset=2]',
  'shots[tone=zeta,case=a]',
  'shots[tone=alpha,case=B]',
  'alpha[offset=-2]',
  'shots[tone=zeta,case=B]',
];

/** A run whose journal started every id in `ids` (in the order given), and whose inputs were not planned again. */
function run(runId: string, ids: readonly string[], planSteps: PlanFile['steps'] = steps): DiffRun {
  const state = emptyRunState();
  for (const id of ids) {
    const model = id.startsWith('shots') ? 'marketing-image' : 'character-sheet';
    applyRecord(state, { type: 'intent', instance: id, model, idempotencyKey: null, bodyHash: 'a'.repeat(64), priceUsd: 0.05 });
  }
  return { plan: planFile(runId, planSteps), runDir: `/nowhere/${runId}`, state, inputs: { inputs: undefined, note: 'not planned again' } };
}

describe("genpipe diff's order", () => {
  it("is the views' order: manifest order for steps and list values, numbers by value, text by code unit", () => {
    const data = diffData(run('A', IDS), run('B', [...IDS].reverse()));
    const listed = data.rows.map((r) => r.id);
    expect(listed).toEqual([
      'shots[tone=zeta,case=B]',
      'shots[tone=zeta,case=a]',
      'shots[tone=alpha,case=B]',
      'shots[tone=alpha,case=a]',
      'alpha[offset=-2]',
      'alpha[offset=-1]',
      'alpha[offset=2]',
      'alpha[offset=10]',
    ]);
    expect(listed).toEqual(new InstanceOrder(steps).sort(IDS));
  });

  it("takes B's steps first, then those only A names, whatever order the journals hold", () => {
    // Run B's plan.json lists only `alpha`: `shots`, named by A alone, comes after it.
    const data = diffData(run('A', IDS), run('B', IDS, [steps[1] as PlanFile['steps'][number]]));
    const listed = data.rows.map((r) => r.id);
    expect(listed.slice(0, 4)).toEqual(['alpha[offset=-2]', 'alpha[offset=-1]', 'alpha[offset=2]', 'alpha[offset=10]']);
    expect(listed.slice(4)).toEqual([
      'shots[tone=zeta,case=B]',
      'shots[tone=zeta,case=a]',
      'shots[tone=alpha,case=B]',
      'shots[tone=alpha,case=a]',
    ]);
  });
});
