/**
 * Refusals that hold for a whole step, not one instance: the account may not use the step's model
 * (service spec §5 "model access"). The first submit the service refuses so closes the step for
 * this start: its other instances are not sent, and the one sentence names the step's `model:`.
 */
import type { StepPlan } from '../../plan/plan.js';
import type { RunEffects } from '../run-context.js';
import { formatLocation } from '../../util/yaml-source.js';

/** The sentence said once for a step whose model the account may not use. */
export function noModelAccessSentence(fx: RunEffects, step: StepPlan): string {
  const at = formatLocation(fx.plan.loaded.source.locate(['steps', step.id, 'model']));
  return (
    `The account has no access to the ${step.model} model (steps.${step.id}.model at ${at}): the service refused it with 403, ` +
    `so no other instance of ${step.id} was sent and nothing was charged; ask for access or change the model, then \`genpipe resume\`.`
  );
}
