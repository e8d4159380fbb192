/**
 * The HTTP transport: one place that sends requests, applies auth, timeouts and retries, and turns
 * every failure into a typed GenpipeError. The undici Dispatcher is injected (house style 8): a
 * keep-alive Agent by default, a MockAgent in unit tests.
 */
import { createHash } from 'node:crypto';
import { request, type Dispatcher } from 'undici';
import type * as z from 'zod';
import type { ClientConfig } from './config.js';
import { createGuardedAgent } from './connect-guard.js';
import { errorFromStatus, GenpipeError, IndeterminateSubmissionError, notTheService } from './errors.js';
import {
  backoffDelay,
  classifyTransportError,
  decideRetry,
  outcomeErrorCode,
  parseRetryAfter,
  type AttemptOutcome,
  type CallSafety,
} from './retry.js';
import { abortError, sleep } from './sleep.js';
import { readBodyBuffer } from './read-body.js';
import { ErrorResponse } from './wire.js';
import { redact } from '../util/redact.js';
import { issuesFromZod } from '../util/zod-issues.js';

export type AuthSurface = 'key' | 'legacy' | 'none';
export type HttpMethod = 'GET' | 'POST' | 'PUT';

/** Which endpoint family a call belongs to, where one status means different things (§7). */
export type EndpointKind = 'options-catalog' | 'agent-messages' | 'idempotent-submit' | 'other';

export interface CallOptions<T> {
  method: HttpMethod;
  /** Absolute URL. */
  url: string;
  auth: AuthSurface;
  /** JSON body. */
  json?: unknown;
  /** Raw body, for uploads. */
  bytes?: Uint8Array;
  headers?: Record<string, string>;
  /** Schema of a JSON success body; omit for bodies that are ignored. */
  schema?: z.ZodType<T>;
  safety: CallSafety;
  endpoint?: EndpointKind;
  /** The request this call is about, for error reporting. */
  requestId?: string;
  signal?: AbortSignal | undefined;
}

export interface CallResult<T> {
  status: number;
  data: T;
  headers: Record<string, string | string[] | undefined>;
}

/** One HTTP exchange, reported after it ends (for stats and debug logs; never carries headers). */
export interface ExchangeEvent {
  method: HttpMethod;
  url: string;
  attempt: number;
  status?: number;
  error?: string;
  durationMs: number;
}

/** A retry the transport is about to make: the failure's code and how long it would wait first. */
export interface RetryAsked {
  code: string;
  delayMs: number;
}
export type RetryGate = (retry: RetryAsked) => boolean;

/**
 * Paces requests route by route (run/limits/route-limiter.ts is the real one): asked before every
 * attempt, told every answer. `admit` returns undefined when the request may go at once.
 */
export interface RoutePacer {
  /** Resolves when a request of this method and path may be sent, and not before `waitMs` from now (a 429's Retry-After). */
  admit(method: string, path: string, signal: AbortSignal | undefined, waitMs?: number): Promise<void> | undefined;
  /** An attempt of this method and path was answered with `status`. */
  answered(method: string, path: string, status: number): void;
}

export interface TransportOptions {
  config: Pick<ClientConfig, 'credentials' | 'timeouts' | 'retry'>;
  dispatcher?: Dispatcher;
  random?: () => number;
  now?: () => number;
  onExchange?: (event: ExchangeEvent) => void;
  userAgent?: string;
}

/** Largest JSON response body accepted, in bytes. */
const MAX_JSON_BYTES = 16 * 1024 * 1024;

export const sha256Hex = (data: string | Uint8Array): string => createHash('sha256').update(data).digest('hex');

/**
 * Creates the default keep-alive dispatcher with the configured connect timeout. It refuses to
 * connect to a local or private address other than the service's own origins, whatever name leads
 * there (connect-guard.ts).
 */
export function createDefaultDispatcher(connectTimeoutMs: number): Dispatcher {
  return createGuardedAgent({ connectTimeoutMs });
}

export class Transport {
  readonly dispatcher: Dispatcher;
  readonly #ownsDispatcher: boolean;
  readonly #options: TransportOptions;
  readonly #random: () => number;
  readonly #now: () => number;
  readonly #throttleListeners = new Set<(retryAfterMs: number | undefined) => void>();
  readonly #retryGates = new Set<RetryGate>();
  readonly #exchangeListeners = new Set<(event: ExchangeEvent) => void>();
  #pacer: RoutePacer | undefined;

  constructor(options: TransportOptions) {
    this.#options = options;
    this.#ownsDispatcher = options.dispatcher === undefined;
    this.dispatcher = options.dispatcher ?? createDefaultDispatcher(options.config.timeouts.connectMs);
    this.#random = options.random ?? Math.random;
    this.#now = options.now ?? Date.now;
  }

  /**
   * Calls `listener` on every 429 any request meets, the ones this transport retries by itself
   * included, with its Retry-After in ms. Returns the unsubscribe function.
   */
  onThrottle(listener: (retryAfterMs: number | undefined) => void): () => void {
    this.#throttleListeners.add(listener);
    return () => this.#throttleListeners.delete(listener);
  }

  /** Calls `listener` after every exchange ends, as `onExchange` is (a run's metrics). Returns the unsubscribe function. */
  onExchange(listener: (event: ExchangeEvent) => void): () => void {
    this.#exchangeListeners.add(listener);
    return () => this.#exchangeListeners.delete(listener);
  }

  /**
   * Asks `gate` before every retry this transport would make by itself (after decideRetry said it
   * may): a run draws each one from its retry budget, so a service that refuses every request ends
   * the run instead of being retried without end, attempt by attempt. A gate
   * that answers false ends the call with its last failure. Returns the unsubscribe function.
   */
  retryGate(gate: RetryGate): () => void {
    this.#retryGates.add(gate);
    return () => this.#retryGates.delete(gate);
  }

  /**
   * Paces every request through `pacer`: a 429 slows its own route, and the throttled request's
   * retry waits for the pacer (which waits out its Retry-After) instead of sleeping here. One pacer
   * at a time; returns the function that removes it.
   */
  pace(pacer: RoutePacer): () => void {
    this.#pacer = pacer;
    return () => {
      if (this.#pacer === pacer) this.#pacer = undefined;
    };
  }

  #mayRetry(retry: RetryAsked): boolean {
    for (const gate of this.#retryGates) if (!gate(retry)) return false;
    return true;
  }

  /** Closes the dispatcher when the transport created it. */
  async close(): Promise<void> {
    if (this.#ownsDispatcher) await this.dispatcher.close();
  }

  async call<T = unknown>(options: CallOptions<T>): Promise<CallResult<T>> {
    const { config } = this.#options;
    const headers: Record<string, string> = {
      accept: 'application/json',
      'user-agent': this.#options.userAgent ?? 'genpipe/0.1',
      ...options.headers,
    };
    let body: string | Uint8Array | undefined;
    if (options.json !== undefined) {
      body = JSON.stringify(options.json);
      headers['content-type'] = 'application/json';
    } else if (options.bytes !== undefined) {
      body = options.bytes;
    }
    if (options.auth !== 'none') {
      const credentials = config.credentials;
      if (!credentials) throw new GenpipeError('credentials', 'This call needs credentials, and none are configured.');
      if (options.auth === 'key') headers.authorization = credentials.authorization();
      else Object.assign(headers, credentials.legacyHeaders());
    }
    const safety = options.safety;
    if (safety.kind === 'spends' && safety.idempotencyKey !== undefined) headers['idempotency-key'] = safety.idempotencyKey;
    const path = new URL(options.url).pathname;

    // Whether any attempt may have reached the service; a failure of a request none of whose attempts
    // left is marked neverSent, so the runner can say that nothing was created or charged.
    let mayHaveArrived = false;
    // A throttled attempt's retry waits this long first (its Retry-After), when a pacer waits for it.
    let throttledFor: number | undefined;
    for (let attempt = 0; ; attempt++) {
      if (options.signal?.aborted) throw abortError(options.signal);
      const pacer = this.#pacer;
      const admitted = pacer?.admit(options.method, path, options.signal, throttledFor);
      if (admitted !== undefined) await admitted;
      const started = this.#now();
      let outcome: AttemptOutcome;
      let failure: GenpipeError;
      let retryAfterMs: number | undefined;
      try {
        const response = await request(options.url, {
          method: options.method,
          headers,
          body: body ?? null,
          dispatcher: this.dispatcher,
          signal: options.signal ?? null,
          headersTimeout: config.timeouts.headersMs,
          bodyTimeout: config.timeouts.bodyMs,
        });
        const text = await readText(response.body, MAX_JSON_BYTES);
        const status = response.statusCode;
        pacer?.answered(options.method, path, status);
        this.#report({ method: options.method, url: options.url, attempt, status, durationMs: this.#now() - started });
        if (status >= 200 && status < 300) {
          let data: T;
          try {
            data = this.#parseSuccess(text, options, path);
          } catch (error) {
            // A 2xx whose body is not the API's shape: a protocol error, most likely another server at
            // the base URL. A keyless credit-spending POST may still have been charged: unknown. A keyed
            // one can be resent with its key, and a call that spends nothing is said as such.
            const keyed = safety.kind !== 'spends' || safety.idempotencyKey !== undefined;
            if (keyed) throw protocolError(error, options.method, path, status, safety.kind === 'spends' ? 'keyed' : 'safe');
            throw new IndeterminateSubmissionError({
              method: options.method,
              path,
              idempotencyKey: undefined,
              bodyHash: sha256Hex(body ?? ''),
              status,
              cause: error,
              protocol: true,
            });
          }
          return { status, data, headers: response.headers };
        }
        retryAfterMs = parseRetryAfter(headerValue(response.headers['retry-after']), this.#now(), config.retry.maxRetryAfterMs);
        outcome = { kind: 'status', status };
        mayHaveArrived = true;
        if (status === 429) for (const listener of this.#throttleListeners) listener(retryAfterMs);
        failure = errorFromStatus(status, detailOf(text), {
          endpoint: options.endpoint ?? 'other',
          retryAfterMs,
          requestId: options.requestId,
        });
      } catch (error) {
        if (error instanceof GenpipeError) throw error;
        outcome = classifyTransportError(error, options.signal?.aborted === true);
        this.#report({ method: options.method, url: options.url, attempt, error: outcome.kind, durationMs: this.#now() - started });
        if (outcome.kind === 'aborted') throw abortError(options.signal);
        const neverSent = 'neverSent' in outcome && outcome.neverSent;
        if (!neverSent) mayHaveArrived = true;
        failure = new GenpipeError(
          outcomeErrorCode(outcome),
          outcome.kind === 'timeout'
            ? `${options.method} ${path} timed out.`
            : `${options.method} ${path} failed: ${describeNetworkError(error)}.`,
          { cause: error, requestId: options.requestId, neverSent: neverSent && !mayHaveArrived },
        );
      }

      const decision = decideRetry(outcome, safety);
      if (decision.retry && attempt + 1 < config.retry.maxAttempts) {
        const delay = retryAfterMs ?? backoffDelay(attempt, config.retry, this.#random);
        if (this.#mayRetry({ code: failure.code, delayMs: delay })) {
          throttledFor = pacer !== undefined && outcome.kind === 'status' && outcome.status === 429 ? delay : undefined;
          if (throttledFor === undefined) await sleep(delay, options.signal);
          continue;
        }
      }
      if (!decision.retry && decision.indeterminate) {
        throw new IndeterminateSubmissionError({
          method: options.method,
          path,
          idempotencyKey: safety.kind === 'spends' ? safety.idempotencyKey : undefined,
          bodyHash: sha256Hex(body ?? ''),
          status: outcome.kind === 'status' ? outcome.status : undefined,
          cause: failure,
        });
      }
      throw failure;
    }
  }

  #parseSuccess<T>(text: string, options: CallOptions<T>, path: string): T {
    if (!options.schema) return undefined as T;
    let json: unknown;
    try {
      json = text === '' ? undefined : JSON.parse(text);
    } catch (error) {
      throw new GenpipeError('invalid_response', `${options.method} ${path} answered with a body that is not JSON.`, { cause: error });
    }
    const parsed = options.schema.safeParse(json);
    if (!parsed.success) {
      const issue = issuesFromZod(parsed.error)[0];
      throw new GenpipeError(
        'invalid_response',
        `${options.method} ${path} answered with a body that breaks the spec: ${issue?.path || '(body)'}: ${issue?.message ?? 'invalid'}.`,
        {
          cause: parsed.error,
        },
      );
    }
    return parsed.data;
  }

  #report(event: ExchangeEvent): void {
    this.#options.onExchange?.(event);
    for (const listener of this.#exchangeListeners) listener(event);
  }
}

/** A 2xx answer that is not the API's shape, said as a protocol error (code `protocol`), the reason kept. */
function protocolError(error: unknown, method: string, path: string, status: number, call: 'keyed' | 'safe'): GenpipeError {
  const why =
    error instanceof GenpipeError ? error.message.replace(/^\S+ \S+ answered with /, '').replace(/[.]$/, '') : 'an unreadable body';
  const resend =
    call === 'keyed' ? '; it carries an Idempotency-Key, so it can be resent safely' : '; it spends nothing, so it can be resent safely';
  return new GenpipeError('protocol', `${notTheService(method, path, status)}: ${why}${resend}.`, { status, cause: error });
}

async function readText(body: Dispatcher.ResponseData['body'], maxBytes: number): Promise<string> {
  const bytes = await readBodyBuffer(
    body,
    maxBytes,
    () => new GenpipeError('invalid_response', `The response body is larger than ${maxBytes} bytes.`),
  );
  return bytes.toString('utf8');
}

function detailOf(text: string): string | undefined {
  try {
    const parsed = ErrorResponse.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data.detail : undefined;
  } catch {
    return undefined;
  }
}

export function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

function describeNetworkError(error: unknown): string {
  const code = (error as { code?: unknown }).code;
  const message = error instanceof Error ? error.message : String(error);
  return redact(typeof code === 'string' ? `${code} (${message})` : message);
}
