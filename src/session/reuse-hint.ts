/**
 * A repeat offers reuse: before a new run spends, the instances of its plan that an earlier run of
 * the same pipeline (in the same output folder) already completed are counted, the way `--reuse`
 * finds them (model and exact request body: run/attempt/reuse.ts), and named in one line. Without
 * it, running a finished manifest again pays for everything anew with no hint.
 */
import { sha256Hex } from '../api/transport.js';
import type { OptionsCatalog } from '../api/wire.js';
import type { Plan } from '../plan/plan.js';
import { ReuseIndex } from '../run/attempt/reuse.js';
import { formatCount } from '../util/format-usd.js';

/** The line to print, or undefined when no earlier run completed any instance of this plan. */
export async function reuseHint(pipelineDir: string, plan: Plan, catalog?: OptionsCatalog): Promise<string | undefined> {
  // The pipeline folder itself is no run: every run under it is an earlier one.
  const index = await ReuseIndex.build(pipelineDir, pipelineDir);
  if (index.size === 0) return undefined;
  let count = 0;
  const byRun = new Map<string, number>();
  try {
    for (const step of plan.steps) {
      // Its body is known only once the upstream's outputs are: not matched before the run.
      if (step.readsUpstreamOutputs) continue;
      for (const instance of plan.instances(step.id, catalog)) {
        const found = index.find(step.model, sha256Hex(JSON.stringify(instance.body)));
        if (!found) continue;
        count++;
        byRun.set(found.runId, (byRun.get(found.runId) ?? 0) + 1);
      }
    }
  } catch {
    // A hint only: an instance that cannot be rendered here is refused by the run itself.
    return undefined;
  }
  if (count === 0) return undefined;
  const [runId] = [...byRun].sort((a, b) => b[1] - a[1] || b[0].localeCompare(a[0]))[0] as [string, number];
  const others = byRun.size - 1;
  return (
    `${formatCount(count)} of ${formatCount(plan.totalInstances)} instance${plan.totalInstances === 1 ? '' : 's'} of this plan already completed in run ${runId}` +
    `${others > 0 ? ` and ${others} other run${others === 1 ? '' : 's'}` : ''}: run with --reuse to link ${count === 1 ? 'it' : 'them'} in and send nothing for ${count === 1 ? 'it' : 'them'}.`
  );
}
