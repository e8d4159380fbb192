/**
 * What became of an attempt, as data. Each phase of an attempt (submit, follow, download, deliver)
 * returns its result or one of these, and settles nothing itself: `settle()` (settle.ts) is the one
 * place where an attempt's money is kept or refunded, a count moves, and its record and event are
 * written. A new way for an attempt to end is a new member here and a new row there.
 *
 * Rows later work is expected to need, so the table's shape fits them: an upload conflict (a sink
 * object with other bytes at the key), an adopted request id (`resume --adopt`), a keyless remake
 * of a rejected result, a protocol error (a 2xx answer that is not the service's), a skipped CSV row.
 */
import type { StopReason } from '../events.js';
import type { GenpipeError } from '../../api/errors.js';
import type { Submission } from '../../models/adapter.js';

export type AttemptFate =
  /** Generated, every file fetched (and delivered, or pending at its sink: `upload_pending`). */
  | { kind: 'completed' }
  /** The service ended it failed, nsfw or canceled, and refunds it; an nsfw one may be re-rolled instead. */
  | { kind: 'refunded'; status: 'failed' | 'nsfw' | 'canceled' }
  /** An nsfw result (refunded) goes on as a new attempt with a seed no other instance has. */
  | { kind: 'rerolled'; attempt: number; seed: number; round?: number | undefined }
  /**
   * A rejected result is made again (`--retry rejected`): the completed attempt keeps its money.
   * A seeded model sends a new seed (`seed`); a model without one sends a new attempt (`retry`:
   * its number, hence a new key) whose intent is journaled before its POST, as every attempt's is.
   */
  | { kind: 'remade'; attempt: number; round: number; seed: number; retry?: undefined }
  | { kind: 'remade'; attempt: number; round: number; seed?: undefined; retry: number; judged: string | undefined }
  /** It may or may not have reached the service: its price stays counted, nothing is resent. */
  | { kind: 'unknown'; message: string; forgotten?: string | undefined }
  /**
   * Nothing reached the service, or the service refused it before creating anything: nothing was
   * charged. `refused` journals the refusal (so a resume sends it as new); `stop` ends the run;
   * `credentials`: the service refused the run's credentials, and the run stops, resumable.
   */
  | {
      kind: 'not_sent';
      refused?: string | undefined;
      stop?: { reason: StopReason; message: string } | undefined;
      credentials?: GenpipeError | undefined;
    }
  /** The submit kept failing in transit and may have arrived: its intent stays journaled, and a resume resends it with its key. */
  | { kind: 'left_for_resume'; code: string; message: string }
  /** Sent and not final, and this process stops following it: a resume follows it. */
  | { kind: 'in_flight'; failure?: { code: string; message: string }; credentials?: GenpipeError }
  /**
   * A 2xx answer whose body is not the API's shape (likely another server at the base URL). A keyed
   * submit can be resent safely: nothing is counted, and a resume sends it again with its key. A
   * keyless one may have spent: unknown, its price kept. Three in a row stop the run.
   */
  | { kind: 'protocol'; keyed: boolean; message: string }
  /**
   * The account may not use the step's model (a 403 naming model access): nothing was charged, and
   * the step sends no more. `sent`: the submit the service refused; the others were not sent.
   */
  | { kind: 'no_model_access'; sent: boolean }
  /**
   * The service refused the submit for good (a 400, a 422), or genpipe would not send it (`unpriced`:
   * its step's price rule gives no price for a re-roll's body): nothing was charged, the instance failed.
   */
  | { kind: 'refused'; code: string; message: string }
  /** Sent, then failed here (its status could not be read for good): its price stays counted. */
  | { kind: 'failed_here'; code: string; message: string }
  /** Completed at the service, but a file could not be fetched (`permanent`: refused, not left for a resume). */
  | { kind: 'files_missing'; code: string; message: string; permanent: boolean }
  /** Completed, every file fetched, and its sink did not take them all: they wait on disk for a resume. `reusedFrom`: an earlier run's result. */
  | { kind: 'upload_pending'; message: string; reusedFrom?: string | undefined }
  /**
   * Completed, every file fetched, and another object with other bytes at a key of its sink
   * (`on_conflict: fail`): nothing overwritten, the file stays on disk, the run exits 1. `keys`:
   * those objects (`s3://BUCKET/KEY`); `pending`: why another of its files waits for a resume too.
   */
  | { kind: 'upload_conflict'; keys: string[]; pending?: string | undefined; reusedFrom?: string | undefined }
  /**
   * `resume --adopt INSTANCE=ID`: a submit the service took (and charged) whose answer the journal
   * could not record. Its submission is journaled (`submitted`, `adopted: true`) and followed; its
   * price is already in what the journal committed (its intent), so it is charged once.
   */
  | { kind: 'adopted'; submission: Submission }
  /** An earlier run's result, linked in (`--reuse`): nothing sent, US$0. */
  | { kind: 'reused'; fromRunId: string }
  /** An earlier start failed it for good: a failure again, for the failure policies. */
  | { kind: 'failed_before' }
  /** An earlier start saw it end failed, nsfw or canceled at the service: it stays so. */
  | { kind: 'ended_before'; status: 'failed' | 'nsfw' | 'canceled' }
  /** A rejected result that cannot be made again (an agent turn): kept as it was, said, and the run ends failed. */
  | { kind: 'kept'; reason: string }
  /**
   * Stopped on its way (Ctrl-C, a lost lock): left as the journal has it. `neverSent`:
   * withdrawn before any worker began to send it; `canceled`: a cancel on abort the service took.
   */
  | { kind: 'interrupted'; neverSent?: boolean | undefined; canceled?: string | undefined };

export type FateKind = AttemptFate['kind'];
export type FateOf<K extends FateKind> = Extract<AttemptFate, { kind: K }>;

const KINDS = new Set<string>([
  'completed',
  'refunded',
  'rerolled',
  'remade',
  'unknown',
  'not_sent',
  'left_for_resume',
  'in_flight',
  'protocol',
  'no_model_access',
  'refused',
  'failed_here',
  'files_missing',
  'upload_pending',
  'upload_conflict',
  'adopted',
  'reused',
  'failed_before',
  'ended_before',
  'kept',
  'interrupted',
] satisfies FateKind[]);

/** True for a fate, false for a phase's result (a submission's kinds are request, job_set and agent_turn). */
export function isFate(value: unknown): value is AttemptFate {
  return typeof value === 'object' && value !== null && KINDS.has((value as { kind?: unknown }).kind as string);
}
