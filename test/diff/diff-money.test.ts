// genpipe diff's page never says US$0.00 for a side whose shared instances are unpriced: the
// summary says `unpriced (2 instances)` (or `US$X + N unpriced`), and each unpriced cell says
// `unpriced` where a priced one gives its cost.
import { describe, expect, it } from 'vitest';
import { diffData, type DiffRun } from '../../src/diff/diff-data.js';
import { diffHtml } from '../../src/diff/diff-page.js';
import type { PlanFile } from '../../src/run/files/run-dir.js';
import { applyRecord, emptyRunState } from '../../src/run/journal/run-state.js';

const IDS = ['clips[n=1]', 'clips[n=2]'];

/** A run whose instances all completed, each sent at `priceUsd` (null: unpriced). */
function run(runId: string, priceUsd: number | null): DiffRun {
  const steps: PlanFile['steps'] = [{ id: 'clips', model: 'dop', count: 2, needs: [], for_each: null, price_usd: priceUsd }];
  const state = emptyRunState();
  for (const [i, id] of IDS.entries()) {
    applyRecord(state, { type: 'intent', instance: id, model: 'dop', idempotencyKey: null, bodyHash: 'a'.repeat(64), priceUsd });
    applyRecord(state, { type: 'submitted', instance: id, handle: { kind: 'request', requestId: `${runId}-${i}` } });
    applyRecord(state, { type: 'status', instance: id, status: 'completed', outputs: [] });
  }
  const plan: PlanFile = {
    pipeline: 'clips',
    runId,
    manifest: 'clips.yaml',
    planHash: 'x',
    createdAt: '2026-12-04T00:00:00.000Z',
    steps,
    estimate: { known_usd: 0, unknown_instances: 0 },
  };
  return { plan, runDir: `/nowhere/${runId}`, state, inputs: { inputs: undefined, note: 'not planned again' } };
}

describe("genpipe diff's money", () => {
  it('says unpriced for a side whose instances have no price, and the cost of a priced one', () => {
    const data = diffData(run('A', null), run('B', 0.25));
    expect(data.a).toMatchObject({ costUsd: 0, unpricedInstances: 2 });
    expect(data.b).toMatchObject({ costUsd: 0.5, unpricedInstances: 0 });
    const html = diffHtml(data, '/nowhere/diff.html');
    expect(html).toContain('Cost of the shared instances: A unpriced (2 instances), B US$0.50.');
    expect(html).not.toContain('A US$0.00');
    // Each A cell says unpriced; each B cell its price.
    expect(html.match(/<\/span> unpriced/g)).toHaveLength(2);
    expect(html.match(/<\/span> US\$0\.25/g)).toHaveLength(2);
  });
});
