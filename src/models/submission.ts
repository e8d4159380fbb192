/**
 * What a view or the runner may ask of a submission without knowing which model made it. The
 * kinds of Submission (adapter.ts) are the models' business: code outside this folder reads a
 * submission through these functions, never by switching over its kind.
 */
import type { Submission } from './adapter.js';

/** The id the service gave the submission: a request id, a job set id, or an agent turn's message id. */
export function submissionId(submission: Submission): string {
  if (submission.kind === 'request') return submission.requestId;
  if (submission.kind === 'job_set') return submission.jobSetId;
  return submission.messageId;
}

/** The column of outputs.csv that holds submissionId(): job sets have their own, the rest share request_id. */
export const submissionIdColumn = (submission: Submission): 'request_id' | 'job_set_id' =>
  submission.kind === 'job_set' ? 'job_set_id' : 'request_id';

/**
 * The id of the one request behind a submission, or undefined for a job set or an agent turn. Only
 * such a request is named by a webhook delivery and timed from submit to completion.
 */
export const requestIdOf = (submission: Submission | { readonly kind: string; readonly requestId?: unknown }): string | undefined =>
  submission.kind === 'request' && typeof submission.requestId === 'string' ? submission.requestId : undefined;

/** The agent session a conversation's submission belongs to, or undefined for a model without sessions. */
export const sessionOf = (submission: Submission): string | undefined =>
  submission.kind === 'agent_turn' ? submission.sessionId : undefined;
