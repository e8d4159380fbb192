/**
 * `--reuse`: an earlier run completed the same model and body, so its files are linked in and the
 * instance is done at US$0, with nothing sent. Undefined when there is nothing to reuse (or an
 * earlier file is gone or changed): the instance is generated as usual.
 */
import { sha256Hex } from '../../api/transport.js';
import type { PlannedInstance, StepPlan } from '../../plan/plan.js';
import { outputPath } from '../files/output-names.js';
import type { Delivery } from './deliver-phase.js';
import type { FateOf } from './fate.js';
import type { PhaseDeps } from './phase-deps.js';
import { linkEarlierFile } from './reuse.js';

export interface Reused {
  fate: FateOf<'reused'> | FateOf<'upload_pending'> | FateOf<'upload_conflict'>;
  outputs: Record<string, unknown>;
}

export async function reuseEarlier(
  d: PhaseDeps,
  delivery: Delivery,
  step: StepPlan,
  instance: PlannedInstance,
): Promise<Reused | undefined> {
  const { fx } = d;
  const bodyHash = sha256Hex(JSON.stringify(instance.body));
  const found = fx.reuse?.find(step.model, bodyHash);
  if (!found) return undefined;
  const paths = found.outputs.map((file, index) => outputPath(step.id, instance, file, found.outputs.length, index));
  for (const [index, file] of found.files.entries()) {
    const path = paths[index] as string;
    if (!(await fx.op(() => linkEarlierFile(found, file, fx.settings.runDir, path)))) return undefined;
  }
  await fx.log(
    {
      type: 'reused',
      instance: instance.id,
      model: step.model,
      bodyHash,
      fromRunId: found.runId,
      outputs: found.outputs,
      ...(found.result === undefined ? {} : { result: found.result }),
    },
    true,
  );
  for (const [index, file] of found.files.entries()) {
    await fx.log({
      type: 'downloaded',
      instance: instance.id,
      output: index,
      path: paths[index] as string,
      sha256: file.sha256,
      size: file.size,
    });
  }
  const delivered = await delivery.deliver(step, instance.id, true);
  const fate =
    delivered.kind === 'completed' ? ({ kind: 'reused', fromRunId: found.runId } as const) : { ...delivered, reusedFrom: found.runId };
  return { fate, outputs: found.result ?? {} };
}
