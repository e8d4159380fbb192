/**
 * Every retry decision of an attempt, as one pure function: given the phase that failed, its error
 * and where the phase stands, `classify()` says "try again after this delay" or names the fate the
 * attempt comes to. The loops that run the phases only carry the decision out (sleep, draw from
 * the run's retry budget, settle). The backoff is the HTTP transport's own (api/retry.ts), and
 * each phase's limits are data: RETRY_POLICIES.
 */
import { agentPollInterval, type TurnPollOptions } from '../../api/agent.js';
import { GenpipeError, IndeterminateSubmissionError } from '../../api/errors.js';
import { backoffDelay, type BackoffOptions } from '../../api/retry.js';
import { DownloadError } from '../files/download.js';
import type { AttemptFate } from './fate.js';

/** Codes that a later attempt may not meet again: the network, the service's own trouble. */
export const TRANSIENT: ReadonlySet<string> = new Set([
  'network',
  'timeout',
  'request_timeout',
  'server_error',
  'backend_unavailable',
  'rate_limited',
  'conflict',
  'invalid_response',
  'protocol',
]);

export interface RetryPolicy extends BackoffOptions {
  /** Tries in a row after which a failure that may pass is given up on. */
  maxTries: number;
}

/** The limits of each phase's retries. Every retry also draws from the run's retry budget. */
export const RETRY_POLICIES = {
  /** A keyed submit that failed in transit; a step's `retries` (default 3) replaces `maxTries`. */
  submit: { baseMs: 1_000, capMs: 30_000, maxTries: 3 },
  /** One look at a submission's status. In webhook mode a delivered request is looked at again at once, so the backoff keeps a failing look from going hot. */
  look: { baseMs: 200, capMs: 10_000, maxTries: 20 },
  /** One output's download from the CDN. */
  download: { baseMs: 200, capMs: 10_000, maxTries: 20 },
} as const satisfies Record<string, RetryPolicy>;

/** How long a submit waits for an agent session's running turn (409), growing by `factor`. */
export const BUSY_WAIT: TurnPollOptions = { initialMs: 2_000, maxMs: 10_000, factor: 1.5 };

export type Phase = 'submit' | 'look' | 'follow' | 'download';

export interface PhaseContext {
  /** Failures of this phase so far, in a row (a busy session's waits apart). */
  tries: number;
  /** Submit: the Idempotency-Key it sends (undefined: a keyless model). */
  key?: string | undefined;
  /** Submit: whether an earlier try may have reached the service (then it is never called unsent). */
  mayHaveArrived?: boolean | undefined;
  /** Submit: the step's `retries`. */
  maxTries?: number | undefined;
  /** Submit: waits for a busy agent session so far. */
  busyWaits?: number | undefined;
  random?: (() => number) | undefined;
}

export type Decision =
  | {
      kind: 'retry';
      delayMs: number;
      /** False for a refusal before processing (429, 409 busy): it does not count as one of the phase's tries. */
      counts: boolean;
      /** A 429: the retry waits `delayMs`, its Retry-After (or the submit policy's base when it gave none). */
      throttled?: { retryAfterMs: number | undefined } | undefined;
      /** A 409: the session is busy with a turn (the next wait grows). */
      busy?: boolean | undefined;
      /** The fate when the run's retry budget refuses the retry. */
      orElse: AttemptFate;
    }
  | { kind: 'fate'; fate: AttemptFate }
  /** Not the phase's to decide (an abort, or not a GenpipeError): thrown on to the run. */
  | { kind: 'throw' };

const fate = (f: AttemptFate): Decision => ({ kind: 'fate', fate: f });

export function classify(phase: Phase, error: unknown, ctx: PhaseContext): Decision {
  if (!(error instanceof GenpipeError)) return { kind: 'throw' };
  switch (phase) {
    case 'submit':
      return classifySubmit(error, ctx);
    case 'look':
      return classifyLook(error, ctx);
    case 'follow':
      return classifyFollow(error);
    case 'download':
      return classifyDownload(error, ctx);
  }
}

function classifySubmit(error: GenpipeError, ctx: PhaseContext): Decision {
  // Stopped before it was sent (a fleet job withdrawn from the queue): nothing was created or charged.
  if (error.code === 'aborted') return fate({ kind: 'interrupted', neverSent: error.neverSent });
  // A 2xx answer that is not the service's: unknown only when it may have spent (a keyless submit).
  if (error instanceof IndeterminateSubmissionError)
    return fate(error.protocol ? { kind: 'protocol', keyed: false, message: error.message } : { kind: 'unknown', message: error.message });
  if (error.code === 'protocol') return fate({ kind: 'protocol', keyed: true, message: error.message });
  // The account may not use the model (service spec §5): nothing was created; the step sends no more.
  if (error.code === 'model_access') return fate({ kind: 'no_model_access', sent: true });
  if (error.code === 'unauthorized') return fate({ kind: 'not_sent', refused: error.code, credentials: error });
  if (error.code === 'insufficient_credits')
    return fate({
      kind: 'not_sent',
      refused: error.code,
      stop: { reason: 'insufficient_credits', message: `${error.message} Top up the account, then resume the run.` },
    });
  // Refusals before processing, never charged (service spec §7): a 409 waits for the running turn,
  // a 429 is retried no earlier than its Retry-After. Either way the retry draws from the run's budget, so a service
  // that never stops refusing ends the run (exit 5) instead of looping forever.
  if (error.code === 'session_busy')
    return {
      kind: 'retry',
      delayMs: agentPollInterval(ctx.busyWaits ?? 0, BUSY_WAIT),
      counts: false,
      busy: true,
      orElse: { kind: 'not_sent', refused: error.code },
    };
  if (error.code === 'rate_limited')
    return {
      kind: 'retry',
      delayMs: error.retryAfterMs ?? RETRY_POLICIES.submit.baseMs,
      counts: false,
      throttled: { retryAfterMs: error.retryAfterMs },
      orElse: { kind: 'not_sent', refused: error.code },
    };
  if (error.neverSent && ctx.mayHaveArrived !== true) {
    // Provably never reached the service (connection refused, DNS), after the transport's own
    // retries: nothing was created or charged. A service that cannot be reached at all ends the
    // run (exit 5), resumable.
    return fate({
      kind: 'not_sent',
      refused: 'not_sent',
      stop: {
        reason: 'unreachable',
        message: `The service could not be reached (${error.message.replace(/[.]$/, '')}); nothing was sent. Resume the run once it is reachable.`,
      },
    });
  }
  if (!TRANSIENT.has(error.code)) return fate({ kind: 'refused', code: error.code, message: error.message });
  // Resumable: the intent stays in the journal without an answer.
  const left: AttemptFate = { kind: 'left_for_resume', code: error.code, message: error.message };
  // A keyed submit that kept failing in transit is safe to repeat with the same key; a keyless one is not.
  const policy = RETRY_POLICIES.submit;
  if (ctx.key === undefined || ctx.tries >= (ctx.maxTries ?? policy.maxTries)) return fate(left);
  return { kind: 'retry', delayMs: backoffDelay(ctx.tries, policy, ctx.random), counts: true, orElse: left };
}

function classifyLook(error: GenpipeError, ctx: PhaseContext): Decision {
  if (error.code === 'aborted' || !TRANSIENT.has(error.code) || ctx.tries >= RETRY_POLICIES.look.maxTries) return { kind: 'throw' };
  // The follow's caller decides what a look that keeps failing makes of the attempt ('follow').
  return {
    kind: 'retry',
    delayMs: backoffDelay(ctx.tries, RETRY_POLICIES.look, ctx.random),
    counts: true,
    orElse: { kind: 'in_flight' },
  };
}

/** A follow that ended without a final status: what the attempt, already sent, comes to. */
function classifyFollow(error: GenpipeError): Decision {
  if (error.code === 'aborted') return fate({ kind: 'interrupted' });
  if (error.code === 'unauthorized') return fate({ kind: 'in_flight', credentials: error });
  // The service answered about another request: its output is never taken for this one. The
  // attempt is unknown (its money stays counted, up to its price), journaled so a resume does not
  // follow it again and `--retry unknown` sends it anew.
  if (error.code === 'mismatch')
    return fate({
      kind: 'unknown',
      forgotten: error.message,
      message: `${error.message} The attempt is left unknown; \`genpipe resume --retry unknown\` sends it again.`,
    });
  if (TRANSIENT.has(error.code)) return fate({ kind: 'in_flight', failure: { code: error.code, message: error.message } });
  return fate({ kind: 'failed_here', code: error.code, message: error.message });
}

function classifyDownload(error: GenpipeError, ctx: PhaseContext): Decision {
  if (error.code === 'aborted') return { kind: 'throw' };
  // A refusal (content type, size, unsafe path, a different existing file) would only repeat.
  const transient = TRANSIENT.has(error.code) && !(error instanceof DownloadError);
  if (!transient) return fate({ kind: 'files_missing', code: error.code, message: error.message, permanent: true });
  const left: AttemptFate = {
    kind: 'files_missing',
    code: error.code,
    message: `${error.message} (the download is left for a resume)`,
    permanent: false,
  };
  if (ctx.tries >= RETRY_POLICIES.download.maxTries) return fate(left);
  return { kind: 'retry', delayMs: backoffDelay(ctx.tries, RETRY_POLICIES.download, ctx.random), counts: true, orElse: left };
}
