// classify() (src/run/attempt/classify.ts): every phase × error class, from the rules in words.
import { describe, expect, it } from 'vitest';
import { GenpipeError, IndeterminateSubmissionError, type ErrorCode } from '../../../src/api/errors.js';
import { BUSY_WAIT, classify, RETRY_POLICIES, type Decision, type Phase } from '../../../src/run/attempt/classify.js';
import { DownloadError } from '../../../src/run/files/download.js';

const err = (code: ErrorCode, options: { neverSent?: boolean; retryAfterMs?: number } = {}): GenpipeError =>
  new GenpipeError(code, `${code}.`, options);
const indeterminate = new IndeterminateSubmissionError({
  method: 'POST',
  path: '/x',
  idempotencyKey: undefined,
  bodyHash: '',
  cause: new Error('reset'),
});
const fateKind = (d: Decision): string => (d.kind === 'fate' ? d.fate.kind : d.kind);
/** Upper edge of the backoff's range, so a delay is checked against its policy without relying on chance. */
const top = (): number => 0.999999;

describe('classify', () => {
  it('throws on anything that is not the phase to decide: not a GenpipeError, or an abort of a look or a download', () => {
    for (const phase of ['submit', 'look', 'follow', 'download'] as Phase[])
      expect(classify(phase, new Error('bug'), { tries: 0 }).kind).toBe('throw');
    expect(classify('look', err('aborted'), { tries: 0 }).kind).toBe('throw');
    expect(classify('download', err('aborted'), { tries: 0 }).kind).toBe('throw');
  });

  describe('submit', () => {
    const submit = (error: unknown, ctx: Partial<Parameters<typeof classify>[2]> = {}): Decision =>
      classify('submit', error, { tries: 0, ...ctx });

    it('an abort is an interruption, never sent only when the executor says so', () => {
      expect(submit(err('aborted'))).toEqual({ kind: 'fate', fate: { kind: 'interrupted', neverSent: false } });
      expect(submit(err('aborted', { neverSent: true }))).toEqual({ kind: 'fate', fate: { kind: 'interrupted', neverSent: true } });
    });

    it('an indeterminate submit is unknown: never resent blindly', () => {
      expect(fateKind(submit(indeterminate, { key: 'k' }))).toBe('unknown');
    });

    it('a refusal of the credentials or of the balance sends nothing more, and the balance stops the run', () => {
      const auth = submit(err('unauthorized'));
      expect(auth.kind === 'fate' && auth.fate).toMatchObject({ kind: 'not_sent', refused: 'unauthorized' });
      const credits = submit(err('insufficient_credits'));
      expect(credits.kind === 'fate' && credits.fate).toMatchObject({
        kind: 'not_sent',
        refused: 'insufficient_credits',
        stop: { reason: 'insufficient_credits' },
      });
    });

    it('429 and 409 busy are retried without counting as tries (never charged), and give up through the retry budget', () => {
      const throttled = submit(err('rate_limited', { retryAfterMs: 1_500 }), { tries: 99 });
      expect(throttled).toMatchObject({
        kind: 'retry',
        // Retried no earlier than its Retry-After; without one, after the submit policy's base.
        delayMs: 1_500,
        counts: false,
        throttled: { retryAfterMs: 1_500 },
        orElse: { kind: 'not_sent', refused: 'rate_limited' },
      });
      expect(submit(err('rate_limited'), {})).toMatchObject({ kind: 'retry', delayMs: RETRY_POLICIES.submit.baseMs });
      const busy = submit(err('session_busy'), { busyWaits: 2 });
      expect(busy).toMatchObject({
        kind: 'retry',
        counts: false,
        busy: true,
        delayMs: Math.round(BUSY_WAIT.initialMs * BUSY_WAIT.factor ** 2),
      });
      expect(submit(err('session_busy'), { busyWaits: 50 })).toMatchObject({ delayMs: BUSY_WAIT.maxMs });
    });

    it('never sent, and nothing before it may have arrived: not sent, and the run stops as unreachable', () => {
      const d = submit(err('network', { neverSent: true }));
      expect(d.kind === 'fate' && d.fate).toMatchObject({ kind: 'not_sent', refused: 'not_sent', stop: { reason: 'unreachable' } });
      // Once a try may have arrived, a later refused connection proves nothing about it.
      expect(fateKind(submit(err('network', { neverSent: true }), { mayHaveArrived: true, key: undefined }))).toBe('left_for_resume');
    });

    it('a transient failure is retried only with a key, within the step retries, with the submit backoff', () => {
      const keyed = submit(err('server_error'), { key: 'k', tries: 2, maxTries: 3, random: top });
      expect(keyed).toMatchObject({ kind: 'retry', counts: true, orElse: { kind: 'left_for_resume' } });
      expect(keyed.kind === 'retry' && keyed.delayMs).toBeLessThanOrEqual(
        Math.min(RETRY_POLICIES.submit.capMs, RETRY_POLICIES.submit.baseMs * 4),
      );
      expect(keyed.kind === 'retry' && keyed.delayMs).toBeGreaterThan(RETRY_POLICIES.submit.baseMs * 4 - 10);
      expect(fateKind(submit(err('server_error'), { key: 'k', tries: 3, maxTries: 3 }))).toBe('left_for_resume');
      // Keyless: a resend could pay twice.
      expect(fateKind(submit(err('server_error'), { key: undefined }))).toBe('left_for_resume');
    });

    it('a permanent refusal (400, 404, 422) fails the instance, refunded', () => {
      for (const code of ['bad_request', 'not_found', 'unprocessable', 'idempotency_mismatch'] as ErrorCode[])
        expect(fateKind(submit(err(code), { key: 'k' }))).toBe('refused');
    });
  });

  describe('look', () => {
    it('a failure that may pass is looked at again, within the look policy; any other is the follow’s to decide', () => {
      expect(classify('look', err('server_error'), { tries: 0 })).toMatchObject({ kind: 'retry', counts: true });
      expect(classify('look', err('server_error'), { tries: RETRY_POLICIES.look.maxTries }).kind).toBe('throw');
      expect(classify('look', err('not_found'), { tries: 0 }).kind).toBe('throw');
      const d = classify('look', err('network'), { tries: 3, random: top });
      expect(d.kind === 'retry' && d.delayMs).toBeLessThanOrEqual(RETRY_POLICIES.look.baseMs * 8);
    });
  });

  describe('follow', () => {
    it('says what a sent attempt comes to when its follow ends without a final status', () => {
      expect(fateKind(classify('follow', err('aborted'), { tries: 0 }))).toBe('interrupted');
      const auth = classify('follow', err('unauthorized'), { tries: 0 });
      expect(auth.kind === 'fate' && auth.fate).toMatchObject({ kind: 'in_flight', credentials: { code: 'unauthorized' } });
      const mismatch = classify('follow', err('mismatch'), { tries: 0 });
      expect(mismatch.kind === 'fate' && mismatch.fate).toMatchObject({ kind: 'unknown', forgotten: 'mismatch.' });
      const transient = classify('follow', err('timeout'), { tries: 0 });
      expect(transient.kind === 'fate' && transient.fate).toMatchObject({ kind: 'in_flight', failure: { code: 'timeout' } });
      expect(fateKind(classify('follow', err('not_found'), { tries: 0 }))).toBe('failed_here');
    });
  });

  describe('download', () => {
    it('retries a transient failure within the download policy, then leaves the files for a resume; a refusal is permanent', () => {
      expect(classify('download', err('network'), { tries: 0 })).toMatchObject({
        kind: 'retry',
        orElse: { kind: 'files_missing', permanent: false },
      });
      const over = classify('download', err('network'), { tries: RETRY_POLICIES.download.maxTries });
      expect(over.kind === 'fate' && over.fate).toMatchObject({ kind: 'files_missing', permanent: false });
      const refused = classify('download', new DownloadError('content_type', 'invalid_response', 'not an image'), { tries: 0 });
      expect(refused.kind === 'fate' && refused.fate).toMatchObject({ kind: 'files_missing', permanent: true });
      expect(classify('download', err('not_found'), { tries: 0 })).toMatchObject({ kind: 'fate', fate: { permanent: true } });
    });
  });
});
