import type { ErrorCode } from '../api/errors.js';

/** Exit codes of every genpipe command; the README documents each one. */
export const EXIT = {
  ok: 0,
  /** Some instances failed, or the service refused the operation (not found, too late to cancel). */
  failed: 1,
  /** Invalid input: flags, manifest, CSV, config or credentials. Nothing was sent. */
  invalidInput: 2,
  /** The budget stopped the run. */
  budget: 3,
  /** Another run holds the pipeline's lock. */
  locked: 4,
  /** The service could not be reached, refused the credentials, or kept failing. */
  unavailable: 5,
  /** The disk of the run directory refused a write: full, over its quota, read-only or failing. */
  disk: 6,
  /** A bug in genpipe: an unexpected error. */
  internal: 70,
  /** Interrupted by Ctrl-C or SIGTERM. */
  interrupted: 130,
} as const;

export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

const BY_ERROR: Record<ErrorCode, ExitCode> = {
  invalid_input: EXIT.invalidInput,
  invalid_file: EXIT.invalidInput,
  config: EXIT.invalidInput,
  credentials: EXIT.invalidInput,
  unauthorized: EXIT.unavailable,
  forbidden: EXIT.unavailable,
  network: EXIT.unavailable,
  timeout: EXIT.unavailable,
  request_timeout: EXIT.unavailable,
  rate_limited: EXIT.unavailable,
  backend_unavailable: EXIT.unavailable,
  server_error: EXIT.unavailable,
  invalid_response: EXIT.unavailable,
  protocol: EXIT.unavailable,
  http_error: EXIT.unavailable,
  bad_request: EXIT.failed,
  not_found: EXIT.failed,
  model_unavailable: EXIT.failed,
  model_access: EXIT.failed,
  insufficient_credits: EXIT.failed,
  session_busy: EXIT.failed,
  conflict: EXIT.failed,
  idempotency_mismatch: EXIT.failed,
  unprocessable: EXIT.failed,
  indeterminate_submission: EXIT.failed,
  mismatch: EXIT.failed,
  aborted: EXIT.interrupted,
  locked: EXIT.locked,
  disk: EXIT.disk,
  internal: EXIT.internal,
};

export const exitCodeFor = (code: ErrorCode): ExitCode => BY_ERROR[code];
