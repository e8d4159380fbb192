/**
 * The local webhook receiver of a run (§6, reliability.md #11). It answers 2xx at once, before any
 * processing; accepts only the path carrying the run's random token; deduplicates by request_id for
 * the whole run; and never trusts a payload: a delivery only wakes the instance that waits for that
 * request, which then confirms the status with a GET. Polling stays on as a slow fallback, so a
 * delivery that never comes (rule 3) costs latency, not the result.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { GenpipeError } from '../api/errors.js';
import { WebhookPayload } from '../api/wire.js';
import { registerSecret } from '../util/redact.js';

export interface WebhookReceiverOptions {
  /** Where to listen, e.g. 127.0.0.1:8787 (port 0 for any). */
  host: string;
  port: number;
  /** The public URL that reaches this receiver; the run's token is appended as a path segment. */
  publicUrl: string;
  /** Largest payload read, in bytes. Default 1 MiB. */
  maxBytes?: number;
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
}

/** Parses `HOST:PORT` (IPv6 as `[::1]:PORT`). */
export function parseListen(value: string): { host: string; port: number } {
  const match = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(value);
  const port = Number(match?.[3]);
  if (!match || !(port >= 0 && port <= 65_535)) throw new GenpipeError('invalid_input', `--listen takes HOST:PORT, such as 127.0.0.1:8787, not "${value}".`);
  return { host: match[1] ?? match[2] ?? '', port };
}

export class WebhookReceiver {
  readonly stats: WebhookStats = { received: 0, duplicates: 0, refused: 0, malformed: 0 };
  /** The URL to hand to the service: the public URL plus the run's token. */
  readonly url: string;
  readonly #token: string;
  readonly #seen = new Set<string>();
  readonly #waiters = new Map<string, () => void>();
  readonly #server: Server;
  readonly #maxBytes: number;

  private constructor(server: Server, token: string, url: string, maxBytes: number) {
    this.#server = server;
    this.#token = token;
    this.url = url;
    this.#maxBytes = maxBytes;
  }

  static async start(options: WebhookReceiverOptions): Promise<WebhookReceiver> {
    const token = randomBytes(24).toString('hex');
    // The token is what keeps strangers from waking the run: treat it as a secret.
    registerSecret(token);
    let base: URL;
    try {
      base = new URL(options.publicUrl);
    } catch {
      throw new GenpipeError('invalid_input', `--webhook-url is not a URL: "${options.publicUrl}".`);
    }
    if (base.protocol !== 'https:' && base.protocol !== 'http:') throw new GenpipeError('invalid_input', '--webhook-url must be an http or https URL.');
    const url = `${base.toString().replace(/\/+$/, '')}/${token}`;
    let receiver: WebhookReceiver | undefined;
    const server = createServer((req, res) => receiver?.handle(req, res));
    receiver = new WebhookReceiver(server, token, url, options.maxBytes ?? 1024 * 1024);
    await new Promise<void>((resolve, reject) => {
      server.once('error', (error: NodeJS.ErrnoException) => reject(new GenpipeError('invalid_input', `Cannot listen on ${options.host}:${options.port} for webhooks: ${error.code ?? error.message}.`, { cause: error })));
      server.listen(options.port, options.host, () => resolve());
    });
    return receiver;
  }

  /** The port actually bound (for --listen HOST:0). */
  get port(): number {
    return (this.#server.address() as AddressInfo).port;
  }

  /** True once a delivery for this request arrived (it may have come before anyone waited). */
  arrived(requestId: string): boolean {
    return this.#seen.has(requestId);
  }

  /** Resolves when a delivery for `requestId` arrives (at once if it already did), or on abort. */
  wait(requestId: string, signal: AbortSignal): Promise<void> {
    if (this.#seen.has(requestId) || signal.aborted) return Promise.resolve();
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
      res.writeHead(req.method !== 'POST' && last === this.#token ? 405 : 404).end();
      req.resume();
      return;
    }
    // Acknowledge first (§6 rule 5: answer within 10 s): nothing below can delay the 2xx.
    res.writeHead(204).end();
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= this.#maxBytes) chunks.push(chunk);
    });
    req.on('end', () => this.#accept(size <= this.#maxBytes ? Buffer.concat(chunks).toString('utf8') : ''));
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
    if (this.#seen.has(payload.request_id)) {
      this.stats.duplicates++;
      return;
    }
    this.#seen.add(payload.request_id);
    this.#waiters.get(payload.request_id)?.();
  }
}
