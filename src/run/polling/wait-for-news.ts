/**
 * Waiting before the next look at a submission, shared by a local run's instance driver and a
 * fleet worker. With a webhook receiver, a request is looked at as soon as its delivery arrives (to
 * confirm it with a GET: a payload is never trusted), and otherwise only by slow fallback polls
 * (§6 rule 3: a delivery may never come). Once a look after the delivery found the request not
 * final (a forged or early payload), the delivery is spent: the caller says so and this polls,
 * never hot.
 */
import { abortError, sleep } from '../../api/sleep.js';
import type { Submission } from '../../models/adapter.js';
import { requestIdOf } from '../../models/submission.js';
import type { WebhookReceiver } from './webhook-receiver.js';

/** In webhook mode, how long to wait for a delivery before polling anyway. */
export const WEBHOOK_FALLBACK_POLL_MS = 30_000;

export async function waitForNews(
  receiver: WebhookReceiver | undefined,
  submission: Submission,
  delayMs: number,
  deliverySpent: boolean,
  signal: AbortSignal,
): Promise<void> {
  const requestId = requestIdOf(submission);
  if (!receiver || requestId === undefined || deliverySpent) return sleep(delayMs, signal);
  if (receiver.arrived(requestId)) return;
  const done = new AbortController();
  const either = AbortSignal.any([signal, done.signal]);
  try {
    await Promise.race([sleep(Math.max(delayMs, WEBHOOK_FALLBACK_POLL_MS), either).catch(() => {}), receiver.wait(requestId, either)]);
  } finally {
    done.abort();
  }
  if (signal.aborted) throw abortError(signal);
}

/** Whether the webhook for this submission has arrived (then the look it caused was exact, and any later one spends it). */
export const deliveryArrived = (receiver: WebhookReceiver | undefined, submission: Submission): boolean => {
  const requestId = requestIdOf(submission);
  return requestId !== undefined && receiver?.arrived(requestId) === true;
};
