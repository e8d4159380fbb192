/**
 * The reclaim phase: an intent no submission answered, whose attempt the run's executor still
 * holds (a fleet job an earlier coordinator queued), is learnt from there instead of being called
 * unknown or sent again. It returns the submission (journaled as a submit's is) or the attempt's
 * fate; settle() does the rest.
 */
import { GenpipeError } from '../../api/errors.js';
import type { ModelAdapter, Submission } from '../../models/adapter.js';
import type { StepPlan } from '../../plan/plan.js';
import { toldPrice } from './attempt-money.js';
import { attemptOf } from './attempt-ref.js';
import { workOf } from './executor.js';
import { isFate, type AttemptFate } from './fate.js';
import { adapterContext, type PhaseDeps } from './phase-deps.js';

/** Whether the executor holds the attempt behind the instance's unanswered intent. */
export async function holdsIntent(d: PhaseDeps, step: StepPlan, adapter: ModelAdapter, id: string): Promise<boolean> {
  const { fx } = d;
  const entry = fx.state.instances.get(id);
  if (entry?.intent === undefined || entry.submission !== undefined || entry.final !== undefined) return false;
  return fx.op(() => d.executor.holds(attemptOf(fx.settings.runId, id, entry), workOf(step, adapter)));
}

/**
 * The held attempt's submission, sending nothing new; else its fate: unknown (nothing could be
 * learnt), refused (its submit was), in flight (another holder took the run over), or interrupted.
 */
export async function reclaimAttempt(d: PhaseDeps, step: StepPlan, adapter: ModelAdapter, id: string): Promise<Submission | AttemptFate> {
  const { fx } = d;
  if (!(await fx.fenced())) return { kind: 'in_flight' };
  const attempt = attemptOf(fx.settings.runId, id, fx.state.instances.get(id));
  let answer: Submission | AttemptFate;
  try {
    answer = await fx.op(() => d.executor.reclaim(attempt, workOf(step, adapter), adapterContext(fx)));
  } catch (error) {
    if (!(error instanceof GenpipeError)) throw error;
    // Withdrawn from the queue before any worker began to send it: never sent, and journaled so.
    return error.code === 'aborted'
      ? { kind: 'interrupted', neverSent: error.neverSent }
      : { kind: 'refused', code: error.code, message: error.message };
  }
  if (isFate(answer)) return answer;
  await fx.log({ type: 'submitted', instance: id, handle: answer }, true);
  fx.emit({
    type: 'instance_submitted',
    step: step.id,
    instance: id,
    model: step.model,
    estimatedUsd: toldPrice(fx.state.instances, id, step),
  });
  return answer;
}
