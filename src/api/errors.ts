/**
 * One error root with a stable `code`. Callers branch on `code`, never on message text; the CLI
 * maps codes to exit codes and prints `message`, which is always one readable sentence and never
 * contains a secret.
 */
import { inspect, type InspectOptions } from 'node:util';
import { redact } from '../util/redact.js';

export type ErrorCode =
  // The service answered with an error status (spec §7).
  | 'bad_request' // 400
  | 'unauthorized' // 401: missing or invalid credentials
  | 'insufficient_credits' // 402: agent message reserve
  | 'forbidden' // 403: agent API not enabled
  | 'model_access' // 403 whose detail names model access: the account may not use the model (service spec §5)
  | 'not_found' // 404: request or session missing or owned by another account
  | 'model_unavailable' // 404 on the options catalog: model hidden or unavailable
  | 'session_busy' // 409 on agent messages
  | 'conflict' // 409 elsewhere (an Idempotency-Key still being processed)
  | 'idempotency_mismatch' // 422 on a reused Idempotency-Key with another body
  | 'unprocessable' // 422
  | 'request_timeout' // 408
  | 'rate_limited' // 429
  | 'backend_unavailable' // 502
  | 'server_error' // other 5xx
  | 'http_error' // any other unexpected status
  // The exchange did not complete.
  | 'network' // connection refused, reset, DNS, TLS
  | 'timeout' // connect, header or body timeout
  | 'aborted' // the caller's AbortSignal fired
  | 'indeterminate_submission' // a credit-spending POST may or may not have been processed
  | 'invalid_response' // the service answered with a body that breaks the spec
  | 'protocol' // a 2xx answer whose body is not the API's shape: likely not the Generation Service at all (a wrong base URL)
  | 'mismatch' // a followed request's answer is about another request (a resume must not take it as its own)
  // Local problems, found before anything is sent.
  | 'invalid_input' // a request body breaks a rule of the spec
  | 'invalid_file' // a local file is not an acceptable input
  | 'config' // configuration missing or malformed
  | 'credentials' // credentials missing, malformed or insecurely stored
  | 'locked' // another run of the pipeline holds its lock
  | 'disk' // the disk of the run directory refused a write (full, over quota, read-only, failing): exit 6
  | 'internal'; // a bug in genpipe found at run time (a stuck run): exit 70

export interface GenpipeErrorOptions {
  status?: number | undefined;
  detail?: string | undefined;
  requestId?: string | undefined;
  /** Seconds or milliseconds are not mixed: this is always milliseconds. */
  retryAfterMs?: number | undefined;
  /** True when the failure proves no attempt reached the service (connection refused, DNS). */
  neverSent?: boolean | undefined;
  cause?: unknown;
}

export class GenpipeError extends Error {
  override readonly name: string = 'GenpipeError';
  readonly code: ErrorCode;
  readonly status: number | undefined;
  /** `detail` of the service's ErrorResponse (spec §2.1), when it sent one. */
  readonly detail: string | undefined;
  readonly requestId: string | undefined;
  readonly retryAfterMs: number | undefined;
  /** True when no attempt of the request can have reached the service: nothing was created or charged. */
  readonly neverSent: boolean;

  constructor(code: ErrorCode, message: string, options: GenpipeErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.status = options.status;
    this.detail = options.detail;
    this.requestId = options.requestId;
    this.retryAfterMs = options.retryAfterMs;
    this.neverSent = options.neverSent === true;
  }

  /** `util.inspect` also shows the cause chain, whose messages come from elsewhere: scrub secrets from it. */
  [inspect.custom](_depth: number, options: InspectOptions): string {
    return redact(inspect(this, { ...options, customInspect: false }));
  }
}

/** One problem with an input, located by its path inside the body (or a file, in later layers). */
export interface InputIssue {
  path: string;
  message: string;
  /** The problem is the key at `path` itself (an unknown field), not its value. */
  atKey?: boolean | undefined;
}

/** A request body broke a rule of the spec; raised before any request is sent. */
export class InvalidInputError extends GenpipeError {
  override readonly name = 'InvalidInputError';
  readonly issues: readonly InputIssue[];

  constructor(what: string, issues: readonly InputIssue[]) {
    const first = issues[0];
    const summary = first ? `${first.path ? `${first.path}: ` : ''}${first.message}` : 'invalid';
    const more = issues.length > 1 ? ` (and ${issues.length - 1} more)` : '';
    super('invalid_input', `Invalid ${what}: ${summary}${more}.`);
    this.issues = issues;
  }
}

/**
 * A credit-spending POST failed in a way that does not tell whether the service processed it.
 * It is never resent blindly: the runner reconciles it through the key and body hash.
 */
export class IndeterminateSubmissionError extends GenpipeError {
  override readonly name = 'IndeterminateSubmissionError';
  readonly idempotencyKey: string | undefined;
  readonly bodyHash: string;
  readonly method: string;
  readonly path: string;
  /** The answer was a 2xx whose body is not the API's shape (a protocol error): likely not the service at all. */
  readonly protocol: boolean;

  constructor(args: {
    method: string;
    path: string;
    idempotencyKey: string | undefined;
    bodyHash: string;
    status?: number | undefined;
    cause: unknown;
    protocol?: boolean | undefined;
  }) {
    super(
      'indeterminate_submission',
      args.protocol === true
        ? `${notTheService(args.method, args.path, args.status)}; it may still have been charged, so it was not resent, to avoid paying twice.`
        : `The submission to ${args.method} ${args.path} may or may not have been accepted by the service` +
            (args.status === undefined ? '' : ` (it answered ${args.status})`) +
            '; it was not resent, to avoid paying twice.',
      { status: args.status, cause: args.cause },
    );
    this.protocol = args.protocol === true;
    this.idempotencyKey = args.idempotencyKey;
    this.bodyHash = args.bodyHash;
    this.method = args.method;
    this.path = args.path;
  }
}

/** The start of a protocol error's sentence: the answer was not the Generation Service's. */
export const notTheService = (method: string, path: string, status: number | undefined): string =>
  `${method} ${path} got an answer${status === undefined ? '' : ` (${status})`} that is not the Generation Service's (check the base URL)`;

/**
 * A connection was refused before it was made: the host name resolves to an address inside the
 * machine or the local network (loopback, link-local, private), and its origin is none of the
 * service's (api/connect-guard.ts). Nothing was sent.
 */
export class InternalAddressError extends GenpipeError {
  override readonly name = 'InternalAddressError';
  readonly hostname: string;
  readonly address: string;

  constructor(hostname: string, address: string) {
    super(
      'invalid_response',
      `Refusing to connect to ${hostname}: it resolves to ${address}, a local or private address, and it is not one of the service's addresses (base_url, platform_url or cdn_url); nothing was sent there.`,
      { neverSent: true },
    );
    this.hostname = hostname;
    this.address = address;
  }
}

/**
 * A request genpipe follows (a resume, a status look) was answered about another one: the service
 * echoed another request or job-set id, or a job set's type or input_params differ from what was
 * sent (models/follow-check.ts). The answer must not be taken as this instance's: the attempt's
 * fate is unknown.
 */
export class FollowMismatchError extends GenpipeError {
  override readonly name = 'FollowMismatchError';
  /** `request` or `job set`. */
  readonly what: string;
  /** The id of the request or job set followed. */
  readonly followed: string;
  /** What the answer disagreed on: `request_id`, `status_url`, `cancel_url`, `id`, `type` or `input_params.<member>`. */
  readonly field: string;
  readonly expected: string;
  readonly returned: string;

  constructor(args: { what: 'request' | 'job set'; followed: string; field: string; expected: string; returned: string }) {
    const { what, followed, field, expected, returned } = args;
    const message =
      field === 'request_id' || field === 'id'
        ? `The service answered about ${what} ${returned} when asked about ${what} ${followed}; the answer was not used.`
        : field.endsWith('_url')
          ? `The service's answer about ${what} ${followed} has a ${field} for another request (${returned}); the answer was not used.`
          : `The service's answer about ${what} ${followed} has ${field} ${returned} where ${expected} was ${field === 'type' ? 'expected' : 'sent'}; the answer was not used.`;
    super('mismatch', message, what === 'request' ? { requestId: followed } : {});
    this.what = what;
    this.followed = followed;
    this.field = field;
    this.expected = expected;
    this.returned = returned;
  }
}

const STATUS_CODES: Record<number, ErrorCode> = {
  400: 'bad_request',
  401: 'unauthorized',
  402: 'insufficient_credits',
  403: 'forbidden',
  404: 'not_found',
  408: 'request_timeout',
  409: 'conflict',
  422: 'unprocessable',
  429: 'rate_limited',
  502: 'backend_unavailable',
};

const STATUS_SENTENCES: Partial<Record<ErrorCode, string>> = {
  bad_request: 'The service refused the request as malformed',
  unauthorized: 'The service refused the credentials (missing or invalid key id or secret)',
  insufficient_credits: 'The account has too few credits for this agent message',
  forbidden: 'The agent API is not enabled for this account',
  not_found: 'Not found, or owned by another account',
  session_busy: 'The agent session is busy with another turn',
  conflict: 'The service is still processing a request with this Idempotency-Key',
  idempotency_mismatch: 'This Idempotency-Key was already used with a different request body',
  unprocessable: 'The service refused the request body',
  request_timeout: 'The service timed out waiting for the request',
  rate_limited: 'The service is throttling requests (429)',
  backend_unavailable: 'The service backend is temporarily unavailable (502)',
  server_error: 'The service failed with a server error',
};

/**
 * Maps an error status of spec §7 to a typed error. `context` tells apart the cases where one
 * status means different things on different endpoints.
 */
export function errorFromStatus(
  status: number,
  detail: string | undefined,
  context: {
    endpoint: 'options-catalog' | 'agent-messages' | 'idempotent-submit' | 'other';
    retryAfterMs?: number | undefined;
    requestId?: string | undefined;
  },
): GenpipeError {
  // A service may echo what it was sent (an Authorization header, say): never let a secret through.
  detail = detail === undefined ? undefined : redact(detail);
  let code: ErrorCode = STATUS_CODES[status] ?? (status >= 500 ? 'server_error' : 'http_error');
  if (status === 404 && context.endpoint === 'options-catalog') code = 'model_unavailable';
  // Service spec §5 names model access and gives no status: a 403 whose detail says so.
  if (status === 403 && /model access/i.test(detail ?? '')) code = 'model_access';
  if (status === 409 && (context.endpoint === 'agent-messages' || detail?.includes('session_busy'))) code = 'session_busy';
  if (status === 422 && context.endpoint === 'idempotent-submit' && /idempot/i.test(detail ?? '')) code = 'idempotency_mismatch';
  if (code === 'model_access') return modelAccessError(detail, context.requestId);
  const sentence =
    code === 'model_unavailable'
      ? 'The character-sheet model is hidden or unavailable (the options catalog answered 404)'
      : (STATUS_SENTENCES[code] ?? `The service answered with status ${status}`);
  const message = detail ? `${sentence}: ${oneLine(detail)}` : sentence;
  return new GenpipeError(code, `${message.replace(/[.]$/, '')}.`, {
    status,
    detail,
    requestId: context.requestId,
    retryAfterMs: context.retryAfterMs,
  });
}

/** The model a model-access refusal names (`... may not use the character-sheet model`), when it names one. */
export function modelOfRefusal(detail: string | undefined): string | undefined {
  return /\b(?:use|to) (?:the )?([a-z0-9][a-z0-9._-]*) model\b/i.exec(detail ?? '')?.[1];
}

/** A 403 for model access: one sentence that names the model, not the agent API. */
function modelAccessError(detail: string | undefined, requestId: string | undefined): GenpipeError {
  const model = modelOfRefusal(detail);
  const message =
    model === undefined
      ? `The account has no access to the model it asked for (the service answered 403${detail ? `: ${oneLine(detail)}` : ''}).`
      : `The account has no access to the ${model} model (the service answered 403).`;
  return new GenpipeError('model_access', message, { status: 403, detail, requestId });
}

function oneLine(text: string): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > 300 ? `${flat.slice(0, 297)}...` : flat;
}

export const isGenpipeError = (error: unknown): error is GenpipeError => error instanceof GenpipeError;
