/**
 * The local webhook receiver of a run (§6, reliability.md #11). It answers 2xx at once, before any
 * processing; accepts only the path carrying the run's random token; deduplicates by request_id for
 * the whole run; and never trusts a payload: a delivery only wakes the instance that waits for that
 * request, which then confirms the status with a GET. Polling stays on as a slow fallback, so a
 * delivery that never comes (rule 3) costs latency, not the result.
 *
 * The port may face the internet (--webhook-url is public), so every resource a stranger can hold is
 * bounded: connections (`maxConnections`), time to send the headers and the whole request, idle
 * keep-alive time, body size (the connection is cut the moment a body passes the cap, and a body
 * announced too large is refused with 413 unread), and the memory of request ids seen.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { GenpipeError } from '../../api/errors.js';
import { WebhookPayload } from '../../api/wire.js';
import { registerSecret } from '../../util/redact.js';

export interface WebhookReceiverOptions {
  /** Where to listen, e.g. 127.0.0.1:8787 (port 0 for any). */
  host: string;
  port: number;
  /** The public URL that reaches this receiver; the run's token is appended as a path segment. */
  publicUrl: string;
  /** Largest payload read, in bytes. Default 1 MiB. */
  maxBytes?: number;
  /** Most connections open at once; the server closes any beyond. Default 256. */
  maxConnections?: number;
  /** Time a client has to send the request headers, in ms. Default 10,000 (§6 rule 5's 10 s). */
  headersTimeoutMs?: number;
  /** Time a client has to send the whole request, body included, in ms. Default 30,000. */
  requestTimeoutMs?: number;
  /** How long an idle keep-alive connection stays open, in ms (Node adds about 1 s of margin). Default 5,000. */
  keepAliveTimeoutMs?: number;
  /** How long a request id is remembered for de-duplication, in ms. Default 2 hours (§7: the webhook retry window). */
  dedupeWindowMs?: number;
  /** Most request ids remembered; the oldest is forgotten first. Default 200,000. */
  maxRemembered?: number;
  /** Clock in ms, for the de-duplication window. Default `Date.now`. */
  now?: () => number;
}

/** The options with every default filled in (house style 7). */
interface ResolvedOptions {
  maxBytes: number;
  maxConnections: number;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
  dedupeWindowMs: number;
  maxRemembered: number;
  now: () => number;
}

const TWO_HOURS_MS = 2 * 60 * 60 * 1000;
/**
 * At the runner's default 20 requests per second, 2 hours finish 144,000 requests: 200,000 ids
 * (about 25 MB at worst) cover the whole window, so the cap only bites on much faster runs, and then
 * costs a duplicate wake-up (the instance confirms with a GET anyway), never a wrong result.
 */
const DEFAULT_MAX_REMEMBERED = 200_000;

function positiveInteger(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value <= 0)
    throw new GenpipeError('config', `The webhook receiver's ${name} must be a positive whole number, not ${value}.`);
  return value;
}

function resolveOptions(options: WebhookReceiverOptions): ResolvedOptions {
  const requestTimeoutMs = positiveInteger('requestTimeoutMs', options.requestTimeoutMs, 30_000);
  return {
    maxBytes: positiveInteger('maxBytes', options.maxBytes, 1024 * 1024),
    maxConnections: positiveInteger('maxConnections', options.maxConnections, 256),
    // Node refuses a headers timeout longer than the request timeout; the request one includes it anyway.
    headersTimeoutMs: Math.min(requestTimeoutMs, positiveInteger('headersTimeoutMs', options.headersTimeoutMs, 10_000)),
    requestTimeoutMs,
    keepAliveTimeoutMs: positiveInteger('keepAliveTimeoutMs', options.keepAliveTimeoutMs, 5_000),
    dedupeWindowMs: positiveInteger('dedupeWindowMs', options.dedupeWindowMs, TWO_HOURS_MS),
    maxRemembered: positiveInteger('maxRemembered', options.maxRemembered, DEFAULT_MAX_REMEMBERED),
    now: options.now ?? Date.now,
  };
}

export interface WebhookStats {
  /** Deliveries accepted (right token, POST). */
  received: number;
  /** Deliveries for a request already seen: acknowledged and ignored. */
  duplicates: number;
  /** Deliveries refused: wrong path or token, wrong method. */
  refused: number;
  /** Deliveries whose body is not a §6 payload: acknowledged and ignored. */
  malformed: number;
  /** Deliveries cut off because the body passed `maxBytes` (413 when announced, else the connection is closed). */
  oversized: number;
}

/** Parses `HOST:PORT` (IPv6 as `[::1]:PORT`). */
export function parseListen(value: string): { host: string; port: number } {
  const match = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(value);
  const port = Number(match?.[3]);
  if (!match || !(port >= 0 && port <= 65_535))
    throw new GenpipeError('invalid_input', `--listen takes HOST:PORT, such as 127.0.0.1:8787, not "${value}".`);
  return { host: match[1] ?? match[2] ?? '', port };
}

/**
 * `--webhook-url URL --listen HOST:PORT`, which go together: the receiver's options, or undefined
 * when neither is given.
 */
export function webhookFlags(url: string | undefined, listen: string | undefined): WebhookReceiverOptions | undefined {
  if ((url === undefined) !== (listen === undefined))
    throw new GenpipeError(
      'invalid_input',
      '--webhook-url and --listen go together: the service posts to the URL, which must reach the receiver listening on HOST:PORT.',
    );
  if (url === undefined || listen === undefined) return undefined;
  return { ...parseListen(listen), publicUrl: url };
}

export class WebhookReceiver {
  readonly stats: WebhookStats = { received: 0, duplicates: 0, refused: 0, malformed: 0, oversized: 0 };
  /** The URL to hand to the service: the public URL plus the run's token. */
  readonly url: string;
  readonly #token: string;
  /** Request id → when its first delivery came. A Map iterates in insertion order: oldest first. */
  readonly #seen = new Map<string, number>();
  readonly #waiters = new Map<string, () => void>();
  readonly #server: Server;
  readonly #o: ResolvedOptions;

  private constructor(server: Server, token: string, url: string, options: ResolvedOptions) {
    this.#server = server;
    this.#token = token;
    this.url = url;
    this.#o = options;
  }

  static async start(options: WebhookReceiverOptions): Promise<WebhookReceiver> {
    const resolved = resolveOptions(options);
    const token = randomBytes(24).toString('hex');
    // The token is what keeps strangers from waking the run: treat it as a secret.
    registerSecret(token);
    let base: URL;
    try {
      base = new URL(options.publicUrl);
    } catch {
      throw new GenpipeError('invalid_input', `--webhook-url is not a URL: "${options.publicUrl}".`);
    }
    if (base.protocol !== 'https:' && base.protocol !== 'http:')
      throw new GenpipeError('invalid_input', '--webhook-url must be an http or https URL.');
    const url = `${base.toString().replace(/\/+$/, '')}/${token}`;
    const server = createServer(
      {
        headersTimeout: resolved.headersTimeoutMs,
        requestTimeout: resolved.requestTimeoutMs,
        // Node enforces both timeouts only when it checks its connections (every 30 s by default),
        // which would stretch a 10 s limit to 40 s: check a few times per (shorter) timeout.
        connectionsCheckingInterval: Math.max(10, Math.min(1_000, Math.floor(resolved.headersTimeoutMs / 4))),
      },
      // The server listens only once `receiver` exists (below), so no request comes before it.
      (req, res) => receiver.handle(req, res),
    );
    server.keepAliveTimeout = resolved.keepAliveTimeoutMs;
    // Beyond this, Node closes each new connection as it comes: a flood cannot exhaust descriptors.
    server.maxConnections = resolved.maxConnections;
    const receiver = new WebhookReceiver(server, token, url, resolved);
    await new Promise<void>((resolve, reject) => {
      server.once('error', (error: NodeJS.ErrnoException) =>
        reject(
          new GenpipeError(
            'invalid_input',
            `Cannot listen on ${options.host}:${options.port} for webhooks: ${error.code ?? error.message}.`,
            { cause: error },
          ),
        ),
      );
      server.listen(options.port, options.host, () => resolve());
    });
    return receiver;
  }

  /** The port actually bound (for --listen HOST:0). */
  get port(): number {
    return (this.#server.address() as AddressInfo).port;
  }

  /** How many request ids are remembered for de-duplication (never more than `maxRemembered`). */
  get remembered(): number {
    return this.#seen.size;
  }

  /**
   * True once a delivery for this request arrived (it may have come before anyone waited), within
   * the de-duplication window: a forgotten one costs the waiter a fallback poll, not its result.
   */
  arrived(requestId: string): boolean {
    this.#forgetExpired();
    return this.#seen.has(requestId);
  }

  /** Resolves when a delivery for `requestId` arrives (at once if it already did), or on abort. */
  wait(requestId: string, signal: AbortSignal): Promise<void> {
    if (this.arrived(requestId) || signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        signal.removeEventListener('abort', done);
        this.#waiters.delete(requestId);
        resolve();
      };
      this.#waiters.set(requestId, done);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  async close(): Promise<void> {
    for (const wake of [...this.#waiters.values()]) wake();
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const path = (req.url ?? '').split('?')[0] ?? '';
    const last = path.split('/').pop() ?? '';
    if (req.method !== 'POST' || last !== this.#token) {
      this.stats.refused++;
      // Close instead of draining the body: a stranger's upload must not cost us its length.
      res.writeHead(req.method !== 'POST' && last === this.#token ? 405 : 404, { connection: 'close' }).end();
      return;
    }
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > this.#o.maxBytes) {
      this.stats.oversized++;
      // Answered before a byte of the body is read; `connection: close` makes Node drop the socket
      // once the answer is out instead of reading the body to reuse the connection.
      res.writeHead(413, { connection: 'close' }).end();
      return;
    }
    // Acknowledge first (§6 rule 5: answer within 10 s): nothing below can delay the 2xx.
    res.writeHead(204).end();
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= this.#o.maxBytes) {
        chunks.push(chunk);
        return;
      }
      // Passed the cap (a chunked body, or a Content-Length that lied): cut the connection now
      // rather than read the rest, which could be endless. No 'end' follows, so nothing is accepted.
      this.stats.oversized++;
      chunks.length = 0;
      req.destroy();
    });
    req.on('end', () => this.#accept(Buffer.concat(chunks).toString('utf8')));
    req.on('error', () => {});
  }

  #accept(text: string): void {
    this.stats.received++;
    let payload: WebhookPayload;
    try {
      payload = WebhookPayload.parse(JSON.parse(text));
    } catch {
      this.stats.malformed++;
      return;
    }
    if (this.arrived(payload.request_id)) {
      this.stats.duplicates++;
      return;
    }
    this.#remember(payload.request_id);
    this.#waiters.get(payload.request_id)?.();
  }

  #remember(requestId: string): void {
    // Bounded: each turn removes one id, and there were at most `maxRemembered` before this one.
    while (this.#seen.size >= this.#o.maxRemembered) {
      const oldest = this.#seen.keys().next();
      if (oldest.done === true) break;
      this.#seen.delete(oldest.value);
    }
    this.#seen.set(requestId, this.#o.now());
  }

  /** Forgets ids first seen a whole window ago: the service stops retrying them (§6 rule 2). */
  #forgetExpired(): void {
    const cutoff = this.#o.now() - this.#o.dedupeWindowMs;
    // Bounded by the map's size; insertion order is age order, so the first fresh id ends it.
    for (const [id, at] of this.#seen) {
      if (at > cutoff) break;
      this.#seen.delete(id);
    }
  }
}
