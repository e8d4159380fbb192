/**
 * What travels through the queue: one job per instance attempt, its data written by the
 * coordinator (the prepared body and Idempotency-Key, never a credential) and by the worker that
 * holds it (the intent before the POST, the submission after it), and the result the worker hands
 * back (a final status with output URLs, or why there is none).
 */
import { createHash } from 'node:crypto';
import type { ErrorCode } from '../api/errors.js';
import type { Submission } from '../models/adapter.js';
import type { FinalTrack } from '../run/polling/follow.js';

export const INSTANCE_JOB = 'instance';

export interface InstanceJobData {
  v: 1;
  runId: string;
  instance: string;
  model: string;
  body: unknown;
  idempotencyKey: string | null;
  /** Which attempt of the instance (attempt-ref.ts); jobs queued before it was written are attempt 0.0. */
  retry?: number | undefined;
  reroll?: number | undefined;
  /** The manifest's `defaults.polling`, for the worker that follows the submission. */
  poll?: JobPolling | undefined;
  /**
   * Written to Redis by the worker before its POST. A worker that finds it set without a
   * submission knows an earlier holder died mid-submit: a keyed submit is resent with its key, a
   * keyless one is *unknown* and never resent (see worker.ts).
   */
  intentAt?: number | undefined;
  /**
   * The submission as workers before 2026-11-27 wrote it, beside the job's progress. Workers now
   * write it only as progress (SubmittedProgress), one command instead of two: read it with
   * `submissionOf`, which knows both.
   */
  submission?: Submission | undefined;
}

export interface JobPolling {
  baseMs?: number | undefined;
  capMs?: number | undefined;
  floorMs?: number | undefined;
}

export type InstanceJobResult =
  /** `durationMs`: the worker's poll schedule's duration of the request (older workers left it out). */
  | { kind: 'final'; submission: Submission; result: FinalTrack; durationMs?: number | undefined }
  | {
      kind: 'submit_error';
      code: ErrorCode;
      message: string;
      neverSent: boolean;
      status?: number | undefined;
      retryAfterMs?: number | undefined;
    }
  /** `protocol`: a keyless submit's 2xx answer was not the service's (a wrong base URL); it may still have spent. */
  | { kind: 'unknown'; message: string; protocol?: true | undefined }
  | { kind: 'track_error'; submission: Submission; code: ErrorCode; message: string }
  /** Its coordinator withdrew it (withdrawnKey) before this worker sent it: nothing was sent. */
  | { kind: 'withdrawn' };

/**
 * The Redis key that marks a job withdrawn by its coordinator (a run that stopped while the job
 * waited). The coordinator sets it before it looks at the job; a worker looks for it after taking
 * the job and before sending anything. So a job the coordinator saw still waiting is never sent,
 * whatever the timing, and only such a job is journaled as not sent.
 */
export const withdrawnKey = (queue: { readonly name: string; readonly opts: { prefix?: string | undefined } }, jobId: string): string =>
  `${queue.opts.prefix ?? 'bull'}:${queue.name}:withdrawn:${jobId}`;
/** How long a withdrawal mark lasts: far longer than any job waits for a worker. */
export const WITHDRAWN_TTL_S = 7 * 24 * 3600;

/**
 * What the worker reports once the submit is answered: the job's progress, kept in the job (a later
 * holder follows it, a resumed coordinator reads it) and sent as an event (the coordinator waiting).
 */
export interface SubmittedProgress {
  submission: Submission;
}

/** The submission a job's progress (kept in the job, or sent as an event) carries; undefined for any other progress. */
export function submittedIn(progress: unknown): Submission | undefined {
  return typeof progress === 'object' && progress !== null ? (progress as Partial<SubmittedProgress>).submission || undefined : undefined;
}

/** The submission a job knows: its progress, or its data as older workers wrote it; undefined before the service answered. */
export function submissionOf(job: { readonly data: InstanceJobData; readonly progress: unknown }): Submission | undefined {
  return submittedIn(job.progress) ?? job.data.submission;
}

/**
 * The job id of one attempt of an instance of a run: a re-enqueue of the same attempt (a resumed
 * coordinator) is a no-op, and a new attempt (`--retry`, a re-roll) is a new job. Hex only: BullMQ
 * refuses ids with a colon and ids that read as numbers.
 */
export function jobIdOf(runId: string, instance: string, attempt: string): string {
  return `g${createHash('sha256').update(`${runId}\u0000${instance}\u0000${attempt}`).digest('hex').slice(0, 40)}`;
}
