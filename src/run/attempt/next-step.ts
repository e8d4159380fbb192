/**
 * What the driver does next with an instance, decided from its journaled state alone: pure, so
 * each rule reads (and is tested) on its own. `resumeAction` (journal/run-state.ts) says where the
 * journal leaves the instance; these extend it to `--retry` rounds, remakes, reuse and reclaims.
 */
import type { Submission } from '../../models/adapter.js';
import type { JournalRecordOf } from '../journal/journal-records.js';
import type { InstanceState, ResumeAction } from '../journal/run-state.js';
import type { RetryStatus } from '../run-options.js';
import type { AttemptFate } from './fate.js';

export type NextStep =
  /** Final before this start: fetch its missing files, deliver them, count it. */
  | { kind: 'finish'; final: JournalRecordOf<'status'> }
  | { kind: 'settle'; fate: AttemptFate }
  /** An unanswered intent the executor still holds (a fleet job): its submit is learnt from there. */
  | { kind: 'reclaim' }
  /** `--resubmit-unknown`: the unknown attempt is journaled as retried with the same key, then sent. */
  | { kind: 'resend_unknown' }
  /** Send the attempt: with the key an earlier process sent (`key`), else its own; `reuse`: try an earlier run's result first. */
  | { kind: 'send'; key?: string | undefined; reuse: boolean }
  /** Sent before and not final: follow it, never send it again. */
  | { kind: 'follow'; submission: Submission };

export interface StepFacts {
  /** The executor holds the attempt behind the unanswered intent. */
  holds: boolean;
  resubmitUnknown: boolean;
  /** The run reuses earlier runs' results (`--reuse`). */
  reuse: boolean;
}

/** Said of an unknown that is not resent. */
export const UNKNOWN_NOT_RESENT =
  'an earlier submit may or may not have reached the service; resend it with `genpipe resume --retry unknown`';

export function nextStep(action: ResumeAction, entry: InstanceState | undefined, facts: StepFacts): NextStep {
  switch (action.kind) {
    case 'done':
      return entry?.final ? { kind: 'finish', final: entry.final } : { kind: 'send', reuse: facts.reuse };
    case 'failed':
      return { kind: 'settle', fate: { kind: 'failed_before' } };
    case 'unknown':
      if (facts.holds) return { kind: 'reclaim' };
      return facts.resubmitUnknown
        ? { kind: 'resend_unknown' }
        : { kind: 'settle', fate: { kind: 'unknown', message: UNKNOWN_NOT_RESENT } };
    case 'fresh':
      return { kind: 'send', reuse: facts.reuse };
    case 'resubmit_same_key':
      return { kind: 'send', key: action.key, reuse: false };
    case 'reattach':
      return { kind: 'follow', submission: action.submission };
  }
}

/** What `--retry` calls an instance's outcome so far (failed, canceled, nsfw, unknown), if it is one of those. */
export function retryStatusOf(action: ResumeAction): Exclude<RetryStatus, 'rejected'> | undefined {
  if (action.kind === 'failed') return 'failed';
  if (action.kind === 'unknown') return 'unknown';
  if (action.kind === 'done' && action.status !== 'completed') return action.status;
  return undefined;
}

/**
 * The `--retry` status this start retries the instance for: one of the selected statuses, at most
 * once per round however often the run is resumed (the round is recorded). An unknown may yet be
 * held by the executor: the driver asks it before it retries.
 */
export function retryOf(
  action: ResumeAction,
  entry: InstanceState | undefined,
  selected: ReadonlySet<RetryStatus>,
  round: number,
): Exclude<RetryStatus, 'rejected'> | undefined {
  const status = retryStatusOf(action);
  return status !== undefined && selected.has(status) && entry?.retryRound !== round ? status : undefined;
}

/** Whether a rejected result may be remade: completed by this run (not reused) while `--retry rejected` is selected. */
export const mayRemake = (entry: InstanceState | undefined, selected: ReadonlySet<RetryStatus>): entry is InstanceState =>
  entry?.final?.status === 'completed' && entry.reusedFrom === undefined && selected.has('rejected');
