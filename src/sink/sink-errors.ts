/**
 * What an S3 store's failures mean to a run: one redacted sentence each, a GenpipeError code, and
 * whether trying again may help (the store down or busy) or cannot (a missing bucket, refused
 * credentials). The SDK's own messages are never shown whole: some stores echo the request in them.
 */
import { GenpipeError, type ErrorCode } from '../api/errors.js';
import { redact } from '../util/redact.js';
import { clip } from '../util/zod-issues.js';

/** An upload that did not complete: the file stays on disk and its upload is pending (a resume tries again). */
export class SinkUploadError extends GenpipeError {
  override readonly name = 'SinkUploadError';
  constructor(
    code: ErrorCode,
    message: string,
    /** True when the store was down or busy (the retries ran out); false when trying again cannot help. */
    readonly transient: boolean,
    readonly key: string,
  ) {
    super(code, message);
  }
}

/**
 * The store answered for other bytes than the file's (an ETag that is not the file's MD5, or the
 * object read back): damaged on the way or by the store. Transient: the upload is tried again.
 */
export class StoredBytesMismatch extends GenpipeError {
  override readonly name = 'StoredBytesMismatch';
  constructor(
    readonly key: string,
    /** `object`, or `part N` of a multipart upload. */
    readonly what: string,
    /** How it was found: `etag` or `read_back`. */
    readonly evidence: 'etag' | 'read_back',
  ) {
    super('server_error', `The store holds other bytes than the file's for ${what === 'object' ? key : `${what} of ${key}`}.`);
  }
}

/** What the SDK's errors carry, as far as this file reads them. */
interface SdkError {
  name?: string;
  code?: string;
  message?: string;
  $fault?: string;
  $metadata?: { httpStatusCode?: number };
  cause?: unknown;
}

/** Status codes and error names a later attempt may get past. */
const TRANSIENT_NAMES = new Set([
  'RequestTimeout',
  'RequestTimeoutException',
  'SlowDown',
  'InternalError',
  'ServiceUnavailable',
  'Throttling',
  'ThrottlingException',
  'TimeoutError',
  'RequestTimeTooSkewed',
  'BadDigest',
  'XAmzContentSHA256Mismatch',
  'IncompleteBody',
]);
const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ECONNABORTED',
  'UND_ERR_SOCKET',
]);
/** Names that mean the credentials were refused or are missing. */
const CREDENTIAL_NAMES = new Set([
  'InvalidAccessKeyId',
  'SignatureDoesNotMatch',
  'AccessDenied',
  'Forbidden',
  'InvalidToken',
  'ExpiredToken',
  'TokenRefreshRequired',
  'CredentialsProviderError',
  'AuthorizationHeaderMalformed',
  'AllAccessDisabled',
]);

export const statusOf = (error: unknown): number | undefined => (error as SdkError | undefined)?.$metadata?.httpStatusCode;
export const nameOf = (error: unknown): string | undefined => (error as SdkError | undefined)?.name;

/** The Node network error code somewhere in the error's cause chain (ECONNREFUSED...), if any. */
export function networkCodeOf(error: unknown): string | undefined {
  for (let current: unknown = error, depth = 0; current && depth < 5; depth++) {
    const code = (current as SdkError).code;
    if (typeof code === 'string' && NETWORK_CODES.has(code)) return code;
    current = (current as SdkError).cause;
  }
  const message = (error as SdkError | undefined)?.message ?? '';
  return /socket hang up|other side closed/i.test(message) ? 'ECONNRESET' : undefined;
}

/** True when trying again may succeed: the store unreachable, overloaded, slow, or a body damaged on the way. */
export function isTransient(error: unknown): boolean {
  if (error instanceof GenpipeError) return error.code === 'network' || error.code === 'timeout' || error.code === 'server_error';
  if (networkCodeOf(error) !== undefined) return true;
  const name = nameOf(error);
  if (name !== undefined && TRANSIENT_NAMES.has(name)) return true;
  const status = statusOf(error);
  return status !== undefined && (status === 408 || status === 429 || status >= 500);
}

export const isNotFound = (error: unknown): boolean =>
  statusOf(error) === 404 || nameOf(error) === 'NotFound' || nameOf(error) === 'NoSuchKey' || nameOf(error) === 'NoSuchBucket';
export const isCredentialProblem = (error: unknown): boolean =>
  statusOf(error) === 403 || (nameOf(error) !== undefined && CREDENTIAL_NAMES.has(nameOf(error) as string));

/**
 * The store's words for an error, short and redacted: its error name and status (`AccessDenied,
 * HTTP 403`), or the network code. Never the SDK's message text: a store may put the request's
 * string-to-sign or a presigned URL in it.
 */
export function describeSdkError(error: unknown): string {
  // genpipe's own words (an abort, a HEAD refused): already one short sentence without a secret.
  if (error instanceof GenpipeError && !(error instanceof StoredBytesMismatch)) return redact(clip(error.message.replace(/[.]$/, ''), 200));
  if (error instanceof StoredBytesMismatch) {
    const what = error.what === 'object' ? 'the object' : error.what;
    return error.evidence === 'etag' ? `the store's ETag for ${what} is not the file's MD5` : `${what} read back is not the file`;
  }
  const network = networkCodeOf(error);
  if (network !== undefined) return network;
  const name = nameOf(error);
  const status = statusOf(error);
  const parts = [
    name && name !== 'Error' && name !== 'UnknownError' ? clip(name) : undefined,
    status === undefined ? undefined : `HTTP ${status}`,
  ].filter((p) => p !== undefined);
  if (parts.length > 0) return redact(parts.join(', '));
  // No name or status: a local failure (a file that vanished, a missing region); its message is ours or Node's.
  return redact(clip(((error as SdkError | undefined)?.message ?? String(error)).split('\n')[0] ?? '', 120));
}

/** The GenpipeError code for a store failure. */
export function codeOf(error: unknown): ErrorCode {
  if (error instanceof GenpipeError) return error.code;
  if (networkCodeOf(error) !== undefined) return 'network';
  if (nameOf(error) === 'TimeoutError') return 'timeout';
  if (isCredentialProblem(error)) return 'credentials';
  const status = statusOf(error);
  if (status !== undefined && status >= 500) return 'server_error';
  if (status === 429) return 'rate_limited';
  if (status === 404) return 'not_found';
  return 'http_error';
}
