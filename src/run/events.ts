/**
 * Typed run events. The runner emits them and knows nothing of who listens: progress bars, log
 * lines and JSON logs are subscribers (report layer).
 */
import type { JournalRecord, TerminalStatus } from './journal/journal-records.js';
import type { PlannedStep, RunFold } from './journal/run-fold.js';
import type { SpendFigures } from '../util/format-usd.js';

export type RunEvent =
  | {
      type: 'run_started';
      runId: string;
      runDir: string;
      pipeline: string;
      instances: number;
      resumed: boolean;
      /** The budget this start runs under (resolved-options.ts): what a view shows beside the money. */
      budgetUsd: number | undefined;
      /** The plan's steps: their instance counts (so instances never started count) and prices. */
      steps: PlannedStep[];
      /**
       * A resume's journal as this start found it, folded: a view copies it (RunFold.copy) and feeds
       * its copy the records this start journals (`instance_journaled`). In JSON, its counts and money.
       */
      already?: RunFold | undefined;
    }
  /**
   * A record about an instance reached the journal: a view folds it (run-fold.ts) and so says what
   * the report of the journal will say. Sent after the record is written, in the journal's order.
   */
  | { type: 'instance_journaled'; step: string; instance: string; record: JournalRecord }
  /** A resume changed options the run recorded (budget, reuse, retry...): one line each, "budget: US$1.00 → US$5.00". */
  | { type: 'options_changed'; changes: string[] }
  /** The service answered 429: the run waits `waitMs` before the retry, which drew from its budget. */
  | { type: 'throttled'; waitMs: number; retriesLeft: number }
  | { type: 'step_started'; step: string }
  | { type: 'instance_submitted'; step: string; instance: string; model: string; estimatedUsd: number | undefined }
  | {
      type: 'instance_finished';
      step: string;
      instance: string;
      status: TerminalStatus;
      estimatedUsd: number | undefined;
      actualCostUsd?: number | undefined;
      error?: string | undefined;
    }
  /** `completed`: the instance's generation completed (counted by instance_finished); its files are what failed (a download, a sink upload). */
  | { type: 'instance_failed'; step: string; instance: string; code: string; message: string; completed?: true }
  | { type: 'instance_unknown'; step: string; instance: string; message: string }
  | { type: 'instance_skipped'; step: string; instance: string; reason: string }
  /** An nsfw attempt (refunded) goes on with a new seed; the instance is not finished. */
  | { type: 'instance_rerolled'; step: string; instance: string; attempt: number; seed: number; estimatedUsd: number | undefined }
  /** `--reuse`: an earlier run's result, linked in; nothing sent, US$0. */
  | { type: 'instance_reused'; step: string; instance: string; fromRunId: string }
  /**
   * The service took a submit (and charged it) but the journal could not record its answer: `id`
   * is all that finds the paid result again (`genpipe resume --adopt INSTANCE=ID`).
   */
  | { type: 'request_unjournaled'; step: string; instance: string; id: string; bodyHash: string }
  | { type: 'run_stopping'; reason: StopReason; message: string }
  /** `--accept-corrupt`: a damaged journal line, and the instance it provably was (none: any instance). */
  | { type: 'journal_corrupt_accepted'; line: number; instance: string | undefined }
  /** gallery.html could not be written (a view only: the run goes on). */
  | { type: 'gallery_failed'; message: string }
  | { type: 'run_finished'; summary: RunSummary };

export type StopReason =
  'budget' | 'fail_fast' | 'max_failures' | 'insufficient_credits' | 'retry_budget' | 'unreachable' | 'protocol' | 'stuck' | 'aborted';

export type RunOutcome = 'completed' | 'failed' | 'budget' | 'aborted' | 'stopped';

/** A run's outcome as people read it: one stopped by a signal (journaled `aborted`) is *interrupted* everywhere. */
export function outcomeWord(outcome: string): string {
  return outcome === 'aborted' ? 'interrupted' : outcome;
}

/** Counts of a run that has not started. */
export const emptyCounts = (): RunCounts => ({
  completed: 0,
  failed: 0,
  nsfw: 0,
  canceled: 0,
  unknown: 0,
  pending: 0,
  rerolled: 0,
  reused: 0,
  inFlight: 0,
});

export interface RunCounts {
  completed: number;
  failed: number;
  nsfw: number;
  canceled: number;
  /** Submits whose fate is unknown (no key, no answer): resubmitted only with --resubmit-unknown. */
  unknown: number;
  /** Not started because the run stopped (budget, fail-fast, abort): a resume does them. */
  pending: number;
  /** nsfw attempts re-rolled with a new seed over the run's life (each one refunded): the report's rerolls. */
  rerolled: number;
  /** Completed results reused from an earlier run (`--reuse`): nothing sent, US$0. */
  reused: number;
  /** Sent and not final when the run stopped (interrupted while followed): a resume follows them. */
  inFlight: number;
}

export interface RunSummary {
  runId: string;
  runDir: string;
  pipeline: string;
  outcome: RunOutcome;
  /** The sentence that explains a stop, when the run stopped. */
  message?: string | undefined;
  /** Why the run stopped early, when it did. */
  stopReason?: StopReason | undefined;
  counts: RunCounts;
  /** US$ committed over the run's whole life: charged, in flight, or unknown (the fold's committedUsd, the budget's measure). */
  estimatedUsd: number;
  /**
   * The net, unknown and unpriced of the run's fold of its journal (run-fold.ts, as the report sums
   * them): what the summary line says once the report is written (the session adds `provisional`).
   */
  money?: SpendFigures | undefined;
  durationMs: number;
  /**
   * Wall-clock ms of this start during which at least one request refused with 429 waited out its
   * Retry-After: route-limiter.ts throttledWallMs.
   */
  throttledMs?: number | undefined;
  /**
   * True when this start changed nothing (no instance record written) and the run had ended the
   * same way before: a resume of a finished run, which tells no one again.
   */
  unchanged?: boolean | undefined;
}

export type RunListener = (event: RunEvent) => void;
