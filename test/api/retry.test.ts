import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { errors } from 'undici';
import {
  backoffDelay,
  classifyTransportError,
  decideRetry,
  DEFAULT_MAX_RETRY_AFTER_MS,
  parseRetryAfter,
  type AttemptOutcome,
  type CallSafety,
} from '../../src/api/retry.js';
import { networkError } from './helpers.js';

describe('backoffDelay: full-jitter exponential backoff with a cap', () => {
  it('stays within [0, min(cap, base·2^n)] for arbitrary n, base, cap and random in [0,1) (property)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: -10, max: 5_000 }),
        fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 1_000_000 })),
        fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 10_000_000 })),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (n, base, cap, r) => {
          const delay = backoffDelay(n, { baseMs: base, capMs: cap }, () => r);
          const ceiling = base === 0 ? 0 : Math.min(cap, base * 2 ** Math.max(0, n));
          expect(Number.isFinite(delay)).toBe(true);
          expect(delay).toBeGreaterThanOrEqual(0);
          expect(delay).toBeLessThanOrEqual(ceiling);
        },
      ),
    );
  });

  it('grows with the attempt number until the cap (jitter drawn from the full range)', () => {
    const top = (): number => 0.999_999;
    expect(backoffDelay(0, { baseMs: 100, capMs: 1_000 }, top)).toBe(99);
    expect(backoffDelay(2, { baseMs: 100, capMs: 1_000 }, top)).toBe(399);
    expect(backoffDelay(10, { baseMs: 100, capMs: 1_000 }, top)).toBe(999);
    expect(backoffDelay(10, { baseMs: 100, capMs: 1_000 }, () => 0)).toBe(0);
  });

  it('a zero base gives zero delay even for a huge attempt number (no NaN)', () => {
    expect(backoffDelay(5_000, { baseMs: 0, capMs: 1_000 }, () => 0.5)).toBe(0);
  });
});

describe('parseRetryAfter: delay-seconds or an HTTP date, clamped', () => {
  const now = Date.parse('2025-03-01T12:00:00Z');

  it('"120" is 120,000 ms when the clamp allows it', () => {
    expect(parseRetryAfter('120', now, 600_000)).toBe(120_000);
  });

  it('"120" is clamped to the maximum (default 60 s)', () => {
    expect(parseRetryAfter('120', now)).toBe(DEFAULT_MAX_RETRY_AFTER_MS);
    expect(parseRetryAfter('120', now, 5_000)).toBe(5_000);
  });

  it('"0" means retry now', () => {
    expect(parseRetryAfter('0', now)).toBe(0);
  });

  it('an HTTP date is read relative to now', () => {
    expect(parseRetryAfter('Sat, 01 Mar 2025 12:00:30 GMT', now, 600_000)).toBe(30_000);
  });

  it('an HTTP date far ahead is clamped to the maximum', () => {
    expect(parseRetryAfter('Sat, 01 Mar 2025 13:00:00 GMT', now, 10_000)).toBe(10_000);
  });

  it('an HTTP date in the past means retry now (0), never a negative wait', () => {
    expect(parseRetryAfter('Sat, 01 Mar 2025 11:59:00 GMT', now)).toBe(0);
  });

  it('"-1", "abc", "1.5", empty and absent are ignored (undefined)', () => {
    expect(parseRetryAfter('-1', now)).toBeUndefined();
    expect(parseRetryAfter('abc', now)).toBeUndefined();
    expect(parseRetryAfter('1.5', now)).toBeUndefined();
    expect(parseRetryAfter('', now)).toBeUndefined();
    expect(parseRetryAfter(undefined, now)).toBeUndefined();
    expect(parseRetryAfter(null, now)).toBeUndefined();
  });
});

describe('decideRetry', () => {
  const safe: CallSafety = { kind: 'safe' };
  const keyed: CallSafety = { kind: 'spends', idempotencyKey: 'key-1' };
  const unkeyed: CallSafety = { kind: 'spends' };
  const status = (s: number): AttemptOutcome => ({ kind: 'status', status: s });
  const reset: AttemptOutcome = { kind: 'network', neverSent: false };
  const refused: AttemptOutcome = { kind: 'network', neverSent: true };
  const headersTimeout: AttemptOutcome = { kind: 'timeout', neverSent: false };

  it.each([408, 429, 500, 502, 503, 504])('a GET is retried on %i', (s) => {
    expect(decideRetry(status(s), safe)).toEqual({ retry: true });
  });

  it('a GET is retried on network errors and timeouts', () => {
    expect(decideRetry(reset, safe)).toEqual({ retry: true });
    expect(decideRetry(refused, safe)).toEqual({ retry: true });
    expect(decideRetry(headersTimeout, safe)).toEqual({ retry: true });
  });

  it.each([400, 401, 403, 404, 422])('%i is never retried, with or without a key', (s) => {
    for (const safety of [safe, keyed, unkeyed]) expect(decideRetry(status(s), safety)).toEqual({ retry: false, indeterminate: false });
  });

  it('a user abort is never retried', () => {
    for (const safety of [safe, keyed, unkeyed])
      expect(decideRetry({ kind: 'aborted' }, safety)).toEqual({ retry: false, indeterminate: false });
  });

  it('a credit-spending POST with an Idempotency-Key is retried on 408, 429, 5xx, resets and timeouts', () => {
    for (const outcome of [status(408), status(429), status(500), status(502), status(503), reset, headersTimeout, refused]) {
      expect(decideRetry(outcome, keyed)).toEqual({ retry: true });
    }
  });

  it('a credit-spending POST without a key is retried only when the request never left (ECONNREFUSED, DNS)', () => {
    expect(decideRetry(refused, unkeyed)).toEqual({ retry: true });
    expect(decideRetry({ kind: 'timeout', neverSent: true }, unkeyed)).toEqual({ retry: true });
  });

  it('a credit-spending POST without a key is indeterminate after a reset, a headers timeout, 500, 502, 503 or 408', () => {
    for (const outcome of [reset, headersTimeout, status(500), status(502), status(503), status(408)]) {
      expect(decideRetry(outcome, unkeyed)).toEqual({ retry: false, indeterminate: true });
    }
  });

  it('a credit-spending POST without a key is not resent on 429 either, and 429 is not indeterminate (refused before processing)', () => {
    expect(decideRetry(status(429), unkeyed)).toEqual({ retry: false, indeterminate: false });
  });

  it('a status the service documents as not charged (agent 502) is retried without a key', () => {
    expect(decideRetry(status(502), { kind: 'spends', noChargeStatuses: [502] })).toEqual({ retry: true });
    expect(decideRetry(status(500), { kind: 'spends', noChargeStatuses: [502] })).toEqual({ retry: false, indeterminate: true });
  });

  it('409 without a key (agent session_busy) is neither retried nor indeterminate', () => {
    expect(decideRetry(status(409), safe)).toEqual({ retry: false, indeterminate: false });
    expect(decideRetry(status(409), unkeyed)).toEqual({ retry: false, indeterminate: false });
  });

  it('409 on a keyed submit (the key is still being processed) is retried with the same key (reliability #4)', () => {
    expect(decideRetry(status(409), { kind: 'spends', idempotencyKey: 'gp1-abc' })).toEqual({ retry: true });
  });
});

describe('classifyTransportError', () => {
  it('ECONNREFUSED and DNS failures (ENOTFOUND, EAI_AGAIN) prove the request never left', () => {
    for (const code of ['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN']) {
      expect(classifyTransportError(networkError(code), false)).toEqual({ kind: 'network', neverSent: true });
    }
  });

  it('a connect timeout never left; a headers or body timeout may have been processed', () => {
    expect(classifyTransportError(new errors.ConnectTimeoutError(), false)).toEqual({ kind: 'timeout', neverSent: true });
    expect(classifyTransportError(new errors.HeadersTimeoutError(), false)).toEqual({ kind: 'timeout', neverSent: false });
    expect(classifyTransportError(new errors.BodyTimeoutError(), false)).toEqual({ kind: 'timeout', neverSent: false });
  });

  it('ECONNRESET, UND_ERR_SOCKET and errors without a code may have been processed', () => {
    expect(classifyTransportError(networkError('ECONNRESET'), false)).toEqual({ kind: 'network', neverSent: false });
    expect(classifyTransportError(new errors.SocketError('other side closed'), false)).toEqual({ kind: 'network', neverSent: false });
    expect(classifyTransportError(new Error('mystery'), false)).toEqual({ kind: 'network', neverSent: false });
  });

  it('finds the code on a wrapped cause', () => {
    const wrapped = new Error('fetch failed', { cause: networkError('ECONNREFUSED') });
    expect(classifyTransportError(wrapped, false)).toEqual({ kind: 'network', neverSent: true });
  });

  it('anything while the caller aborted is an abort', () => {
    expect(classifyTransportError(networkError('ECONNRESET'), true)).toEqual({ kind: 'aborted' });
  });
});
