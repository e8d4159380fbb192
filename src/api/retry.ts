/**
 * Retry decisions as pure functions, kept apart from the loops that use them so that each rule
 * can be tested on its own (house style 5; AWS "Exponential Backoff and Jitter").
 */
import type { ErrorCode } from './errors.js';

export interface BackoffOptions {
  /** First delay ceiling, in milliseconds. */
  baseMs: number;
  /** Largest delay ceiling, in milliseconds. */
  capMs: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 250, capMs: 20_000 };

/**
 * Full-jitter exponential backoff: a delay drawn uniformly from `[0, min(cap, base·2^attempt)]`.
 * `attempt` counts from 0; `random` returns a number in `[0, 1)`.
 */
export function backoffDelay(attempt: number, options: BackoffOptions = DEFAULT_BACKOFF, random: () => number = Math.random): number {
  // The exponent is bounded so that a zero base never meets 2^n = Infinity (0·Infinity is NaN).
  const ceiling = Math.min(options.capMs, options.baseMs * 2 ** Math.min(Math.max(0, attempt), 1023));
  return Math.floor(random() * ceiling);
}

/** Longest `Retry-After` we honour; a larger value is clamped to it. */
export const DEFAULT_MAX_RETRY_AFTER_MS = 60_000;

/**
 * Parses a `Retry-After` header (RFC 9110 §10.2.3): delay-seconds or an HTTP date. Returns the wait
 * in milliseconds clamped to `[0, maxMs]`, or `undefined` when the value is absent or malformed
 * (`-1`, `abc`), in which case the caller falls back to its own backoff.
 */
export function parseRetryAfter(
  value: string | null | undefined,
  nowMs: number = Date.now(),
  maxMs: number = DEFAULT_MAX_RETRY_AFTER_MS,
): number | undefined {
  if (value == null) return undefined;
  const text = value.trim();
  if (text === '') return undefined;
  if (/^\d+$/.test(text)) return Math.min(Number(text) * 1000, maxMs);
  if (/^[+-]?\d/.test(text)) return undefined; // negative or fractional seconds: malformed
  const date = Date.parse(text);
  if (Number.isNaN(date)) return undefined;
  return Math.min(Math.max(0, date - nowMs), maxMs);
}

/** What happened on one attempt, as far as the retry decision needs to know. */
export type AttemptOutcome =
  | { kind: 'status'; status: number }
  | { kind: 'network'; neverSent: boolean }
  | { kind: 'timeout'; neverSent: boolean }
  | { kind: 'aborted' };

/** How safe a call is to repeat. */
export type CallSafety =
  /** Reads, cancels, interrupts: repeating them cannot spend credits. */
  | { kind: 'safe' }
  /** A POST that spends credits. */
  | { kind: 'spends'; idempotencyKey?: string | undefined; noChargeStatuses?: readonly number[] | undefined };

/** Statuses that are never retried: the same request would fail the same way. */
export const NEVER_RETRY_STATUSES: ReadonlySet<number> = new Set([400, 401, 403, 404, 422]);
/** Statuses a safe or idempotent call retries. */
export const isRetryableStatus = (status: number): boolean => status === 408 || status === 429 || status >= 500;

export type RetryDecision = { retry: true } | { retry: false; indeterminate: boolean };

/**
 * Decides whether to try again after a failed attempt.
 * - A user abort is never retried.
 * - 400, 401, 403, 404 and 422 are never retried.
 * - A safe call, or a credit-spending POST that carries an Idempotency-Key, is retried on 408, 429,
 *   5xx, timeouts and network errors; a keyed POST also on 409 (its key is still being processed).
 * - A credit-spending POST without a key is retried only when the failure proves the request never
 *   left (connection refused, DNS), or the status proves it was not charged (`noChargeStatuses`,
 *   such as the agent's 502). Any other failure is *indeterminate*: it may have been processed.
 */
export function decideRetry(outcome: AttemptOutcome, safety: CallSafety): RetryDecision {
  if (outcome.kind === 'aborted') return { retry: false, indeterminate: false };
  const repeatable = safety.kind === 'safe' || safety.idempotencyKey !== undefined;
  if (outcome.kind === 'status') {
    const { status } = outcome;
    if (NEVER_RETRY_STATUSES.has(status)) return { retry: false, indeterminate: false };
    if (safety.kind === 'spends' && safety.noChargeStatuses?.includes(status)) return { retry: true };
    // 409 on a keyed submit: the first request with this key is still being processed; the same key
    // asked again later returns that request instead of creating a second one.
    if (status === 409 && safety.kind === 'spends' && safety.idempotencyKey !== undefined) return { retry: true };
    if (!isRetryableStatus(status)) return { retry: false, indeterminate: false };
    if (repeatable) return { retry: true };
    // 429 is a refusal before processing; a 408 or 5xx may come after the work was done.
    if (status === 429) return { retry: false, indeterminate: false };
    return { retry: false, indeterminate: true };
  }
  if (repeatable || outcome.neverSent) return { retry: true };
  return { retry: false, indeterminate: true };
}

/** Network error codes that prove the request never reached the service. */
const NEVER_SENT_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'UND_ERR_CONNECT_TIMEOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

/** Classifies a transport exception (undici or Node) into an attempt outcome. */
export function classifyTransportError(error: unknown, aborted: boolean): AttemptOutcome {
  if (aborted) return { kind: 'aborted' };
  const code = errorCodeOf(error);
  if (code === 'UND_ERR_CONNECT_TIMEOUT') return { kind: 'timeout', neverSent: true };
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') return { kind: 'timeout', neverSent: false };
  return { kind: 'network', neverSent: code !== undefined && NEVER_SENT_CODES.has(code) };
}

function errorCodeOf(error: unknown): string | undefined {
  for (let current: unknown = error, depth = 0; current && depth < 5; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string' && (code.startsWith('E') || code.startsWith('UND_'))) return code;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

export const outcomeErrorCode = (outcome: AttemptOutcome): ErrorCode =>
  outcome.kind === 'aborted' ? 'aborted' : outcome.kind === 'timeout' ? 'timeout' : 'network';
