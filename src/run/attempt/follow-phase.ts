/**
 * The follow phase of an attempt: its submission followed to a final status through the run's
 * executor (the same follow loop here and on a fleet worker), and the status journaled. It returns
 * the final status, or the attempt's fate when the follow ended otherwise; settle() does the rest.
 */
import type { Submission } from '../../models/adapter.js';
import type { PlannedInstance, StepPlan } from '../../plan/plan.js';
import type { FinalTrack } from '../polling/follow.js';
import type { AttemptRef } from './attempt-ref.js';
import { classify } from './classify.js';
import type { AttemptFate } from './fate.js';
import { adapterContext, type AttemptWork, type PhaseDeps } from './phase-deps.js';

/** How long a cancel (--cancel-on-abort) or an agent interrupt may take after Ctrl-C. */
export const CANCEL_TIMEOUT_MS = 4_000;

export interface FollowRequest {
  step: StepPlan;
  attempt: AttemptRef;
  work: AttemptWork;
  instance: PlannedInstance;
  submission: Submission;
  submittedAt: number;
  /** What the submission was sent with, so the service's answer is checked against it. */
  sentBody: unknown;
}

export async function followAttempt(d: PhaseDeps, r: FollowRequest): Promise<FinalTrack | AttemptFate> {
  const { fx } = d;
  // The submission being followed now: an agent turn moves on with each reply sent.
  let current = r.submission;
  let followed;
  try {
    // The whole follow is an operation that settles by itself for the watchdog: a fleet's executor
    // waits on a worker's answer, with nothing of this process busy meanwhile.
    followed = await fx.op(() =>
      d.executor.follow(
        r.attempt,
        r.work,
        r.submission,
        { ...adapterContext(fx), sentBody: r.sentBody },
        {
          signal: fx.signal,
          timer: d.polls.start(r.step.model, r.submittedAt),
          webhook: fx.settings.webhook,
          turnPoll: fx.settings.agentPoll,
          random: d.random,
          // A look that may pass is retried while the run's retry budget lasts.
          mayRetry: () => fx.consumeRetry(),
          answered: () => fx.creditRetry(),
          moved: async (next) => {
            current = next;
            await fx.log({ type: 'submitted', instance: r.instance.id, handle: next }, true);
          },
          op: (work) => fx.op(work),
        },
      ),
    );
  } catch (error) {
    const decision = classify('follow', error, { tries: 0 });
    if (decision.kind !== 'fate') throw error;
    return decision.fate.kind === 'interrupted' ? stopOnAbort(d, r, current) : decision.fate;
  }
  const { result, durationMs } = followed;
  await fx.log(
    {
      type: 'status',
      instance: r.instance.id,
      status: result.status,
      durationMs,
      outputs: result.files.map((f) => ({ url: f.url, name: f.name, accept: [...f.accept] })),
      result: result.outputs,
      ...(result.error === undefined ? {} : { error: result.error }),
      ...(result.actualCostUsd === undefined ? {} : { actualCostUsd: result.actualCostUsd }),
    },
    // Not synced: lost in a crash, the status is read again from the service on resume.
    false,
  );
  return result;
}

/**
 * Ctrl-C while following: a conversation's turn is interrupted, and with --cancel-on-abort a
 * queued request is canceled; a cancel the service took ends the attempt canceled (refunded), so
 * a resume does not wait for it.
 */
async function stopOnAbort(d: PhaseDeps, r: FollowRequest, submission: Submission): Promise<AttemptFate> {
  const { fx } = d;
  const stop = r.work.adapter.stop;
  const cancelOnAbort = fx.settings.cancelOnAbort;
  if (!stop || !(cancelOnAbort || r.work.adapter.conversational)) return { kind: 'interrupted' };
  const accepted = await fx.op(() =>
    stop(submission, { ...adapterContext(fx), signal: AbortSignal.timeout(CANCEL_TIMEOUT_MS) }).catch(() => false),
  );
  if (!cancelOnAbort || accepted !== true) return { kind: 'interrupted' };
  return { kind: 'interrupted', canceled: 'canceled by genpipe on abort (--cancel-on-abort)' };
}
