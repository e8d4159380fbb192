/**
 * Posts a run's end notifications: every target at once (a few at a time, p-limit), each retried
 * with backoff (0.5, 1, 2, 4, 8 s) on a network error, a timeout, 408, 425, 429 or a 5xx, all of
 * it inside one deadline (30 s). Delivery never throws and never changes how the run ended: each
 * target's result is returned (and journaled by the caller) and a failure is one warning line.
 */
import pLimit from 'p-limit';
import { Agent, request } from 'undici';
import { sleep } from '../api/sleep.js';
import { redact, redactEveryForm, redactingReplacer } from '../util/redact.js';
import { notifyBody, type NotifySummary } from './notify-message.js';
import type { NotifyEvent, NotifyFormat, ResolvedTarget } from './notify-targets.js';

export const DEFAULT_RETRY_DELAYS_MS: readonly number[] = [500, 1_000, 2_000, 4_000, 8_000];
/** Every delivery of a run's end is over (delivered or given up) within this. */
export const DEFAULT_DEADLINE_MS = 30_000;
/** One attempt's longest wait for an answer. */
const ATTEMPT_TIMEOUT_MS = 10_000;
/** Targets posted to at once. */
const PARALLEL = 4;

export interface DeliveryResult {
  /** The target's redacted URL. */
  target: string;
  format: NotifyFormat;
  event: NotifyEvent;
  delivered: boolean;
  attempts: number;
  /** The last HTTP status answered, if any. */
  status?: number | undefined;
  /** Why it was not delivered: one sentence, with no secret in it. */
  error?: string | undefined;
  durationMs: number;
}

export interface DeliverOptions {
  retryDelaysMs?: readonly number[];
  deadlineMs?: number;
  now?: () => number;
}

const RETRIED_STATUSES = new Set([408, 425, 429]);

/** Posts `summary` to every target that asked for its event; resolves with one result per such target. */
export async function deliverNotifications(
  targets: readonly ResolvedTarget[],
  summary: NotifySummary,
  options: DeliverOptions = {},
): Promise<DeliveryResult[]> {
  const wanted = targets.filter((t) => t.events.has(summary.event));
  if (wanted.length === 0) return [];
  const deadline = AbortSignal.timeout(options.deadlineMs ?? DEFAULT_DEADLINE_MS);
  // Its own pool: a notification never waits behind, or keeps open, the run's connections.
  const dispatcher = new Agent({ connections: PARALLEL, headersTimeout: ATTEMPT_TIMEOUT_MS, bodyTimeout: ATTEMPT_TIMEOUT_MS });
  const limit = pLimit(PARALLEL);
  try {
    return await Promise.all(wanted.map((t) => limit(() => deliverOne(t, summary, dispatcher, deadline, options))));
  } finally {
    await dispatcher.close().catch(() => undefined);
  }
}

async function deliverOne(
  target: ResolvedTarget,
  summary: NotifySummary,
  dispatcher: Agent,
  deadline: AbortSignal,
  options: DeliverOptions,
): Promise<DeliveryResult> {
  const now = options.now ?? Date.now;
  const started = now();
  const delays = options.retryDelaysMs ?? DEFAULT_RETRY_DELAYS_MS;
  // Each string redacted before it is encoded (its spelling changes in JSON), then the body as sent.
  const body = redactEveryForm(notifyBody(target.format, JSON.parse(JSON.stringify(summary, redactingReplacer)) as typeof summary));
  const result = (fields: Pick<DeliveryResult, 'delivered' | 'attempts' | 'status' | 'error'>): DeliveryResult => ({
    target: target.label,
    format: target.format,
    event: summary.event,
    ...fields,
    durationMs: now() - started,
  });
  let status: number | undefined;
  let error: string;
  for (let attempt = 1; ; attempt++) {
    try {
      const response = await request(target.url, {
        method: 'POST',
        dispatcher,
        headers: { 'content-type': 'application/json', 'user-agent': 'genpipe/0.1 (notify)' },
        body,
        signal: AbortSignal.any([deadline, AbortSignal.timeout(ATTEMPT_TIMEOUT_MS)]),
      });
      status = response.statusCode;
      await response.body.dump().catch(() => undefined);
      if (status >= 200 && status < 300) return result({ delivered: true, attempts: attempt, status });
      error = `it answered HTTP ${status}`;
      if (!(status >= 500 || RETRIED_STATUSES.has(status))) return result({ delivered: false, attempts: attempt, status, error });
    } catch (caught) {
      error = deadline.aborted ? `no answer within ${(options.deadlineMs ?? DEFAULT_DEADLINE_MS) / 1000} s` : describe(caught);
    }
    const delay = delays[attempt - 1];
    if (delay === undefined || deadline.aborted) return result({ delivered: false, attempts: attempt, status, error });
    try {
      await sleep(delay, deadline);
    } catch {
      return result({
        delivered: false,
        attempts: attempt,
        status,
        error: `${error}; gave up after ${(options.deadlineMs ?? DEFAULT_DEADLINE_MS) / 1000} s`,
      });
    }
  }
}

/** A network error as a short sentence, never with the URL (undici puts it in some messages). */
function describe(error: unknown): string {
  const code = (error as { code?: unknown }).code;
  const cause = (error as { cause?: { code?: unknown } }).cause?.code;
  const name = typeof cause === 'string' ? cause : typeof code === 'string' ? code : error instanceof Error ? error.name : 'error';
  if (name === 'ECONNREFUSED') return 'the connection was refused';
  if (name === 'UND_ERR_HEADERS_TIMEOUT' || name === 'UND_ERR_BODY_TIMEOUT' || name === 'TimeoutError')
    return `no answer within ${ATTEMPT_TIMEOUT_MS / 1000} s`;
  if (name === 'ENOTFOUND' || name === 'EAI_AGAIN') return 'its host name did not resolve';
  return redact(`the request failed (${name})`);
}
