/**
 * The HTTP server: routing, per-request stats, fault injection around the handlers, and writing
 * answers. Faults apply in this order: reset before processing, latency, 429/5xx instead of
 * processing, then (after the handler ran) reset after processing, 502/504 after processing, or a
 * slow body. A foreign answer (`foreign_status`) replaces the handler: the route's `foreign`
 * handler answers about another request.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { NO_FAULT, type FaultEngine } from './faults.js';
import { HttpError, readBody, type EmuResponse } from './http-util.js';
import { isLoopbackAddress } from './loopback.js';
import type { Router } from './router.js';
import type { Scheduler } from './scheduler.js';
import type { Stats } from './stats.js';

const DEFAULT_MAX_BODY = 1024 * 1024;
const JSON_HEADERS = { 'content-type': 'application/json' };

export interface ServerDeps {
  router: Router;
  faults: FaultEngine;
  stats: Stats;
  scheduler: Scheduler;
  /** Routes whose handler deals with an injected 502 itself (the agent's refunded 502). */
  backendFaultRoutes: ReadonlySet<string>;
  log?: (line: string) => void;
}

export function createEmulatorServer(d: ServerDeps): Server {
  const server = createServer({ keepAliveTimeout: 5_000 }, (req, res) => {
    handle(d, req, res).catch((error: unknown) => {
      d.log?.(`emulator: internal error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
      if (!res.headersSent && !res.destroyed) write(res, { status: 500, json: { detail: 'internal emulator error' } });
    });
  });
  return server;
}

async function handle(d: ServerDeps, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const rawUrl = req.url ?? '/';
  const q = rawUrl.indexOf('?');
  const path = q < 0 ? rawUrl : rawUrl.slice(0, q);
  const method = req.method ?? 'GET';
  const match = d.router.match(method, path);
  if (match === undefined) return finish(res, { status: 404, json: { detail: `no route for ${method} ${path}` } });
  if (!('route' in match))
    return finish(res, {
      status: 405,
      json: { detail: `method ${method} not allowed here` },
      headers: { allow: match.methods.join(', ') },
    });

  const { route } = match;
  d.stats.begin(match.name);
  res.once('close', () => d.stats.end(res.statusCode));

  if (route.cls === 'inspection' && !isLoopbackAddress(req.socket.remoteAddress)) {
    return finish(res, { status: 403, json: { detail: 'the /_emulator endpoints answer loopback clients only' } });
  }
  let fault = route.cls === 'inspection' ? NO_FAULT : d.faults.decide(route.cls, { echoesId: route.foreign !== undefined });
  // On a backend route a 502 means the message is refunded (service spec §7): the turn must not
  // start, so a 502 drawn "after processing" is the plain refunded 502 there. A 504 stays after.
  if (fault.statusAfter === 502 && d.backendFaultRoutes.has(match.name)) fault = { ...fault, status: 502, statusAfter: undefined };
  if (fault.resetBefore) {
    req.socket.destroy();
    return;
  }
  if (fault.latencyMs > 0) await d.scheduler.sleep(fault.latencyMs);
  if (fault.status === undefined && route.cls !== 'inspection') {
    const retryAfterS = d.faults.rateLimit(route.cls, accountOf(req.headers));
    if (retryAfterS !== undefined)
      return finish(res, {
        status: 429,
        json: { detail: 'rate limited (emulated): too many requests per second for this account; retry after the Retry-After delay' },
        headers: { 'retry-after': String(retryAfterS) },
      });
  }
  if (fault.status !== undefined && !(fault.status === 502 && d.backendFaultRoutes.has(match.name))) {
    const headers: Record<string, string> = fault.status === 429 ? { 'retry-after': String(fault.retryAfterS) } : {};
    return finish(res, {
      status: fault.status,
      json: {
        detail:
          fault.status === 429 ? 'rate limited (emulated); retry after the Retry-After delay' : `emulated server error ${fault.status}`,
      },
      headers,
    });
  }

  let answer: EmuResponse;
  try {
    const body = method === 'POST' || method === 'PUT' ? await readBody(req, route.maxBody ?? DEFAULT_MAX_BODY) : EMPTY;
    const foreign = fault.foreign && route.cls !== 'inspection' ? route.foreign : undefined;
    answer = await (foreign ?? route.handler)({
      method,
      url: new URL(rawUrl, 'http://emulator.local'),
      params: match.params,
      headers: req.headers,
      body,
      remoteAddress: req.socket.remoteAddress,
      fault,
    });
    if (foreign && answer.status === 200 && route.cls !== 'inspection') d.faults.noteApplied(route.cls, 'foreign_status');
  } catch (error) {
    if (!(error instanceof HttpError)) throw error;
    answer = { status: error.status, json: { detail: error.message }, headers: error.headers };
  }
  if (fault.status === 502 && answer.status !== 502 && answer.status >= 400) {
    // A backend route refused before doing anything (401, 404, 409, 422...): the injected 502 still
    // answers, so a fault counted in the stats is always a fault applied.
    answer = { status: 502, json: { detail: 'emulated server error 502' } };
  }
  if (fault.resetAfter) {
    // The dangerous one: processed, but the client never hears of it.
    req.socket.destroy();
    return;
  }
  if (fault.statusAfter !== undefined) {
    // The gateway failure: the work is done and charged, and the client hears only 502 or 504.
    answer = {
      status: fault.statusAfter,
      json: {
        detail: fault.statusAfter === 502 ? 'bad gateway (emulated, after processing)' : 'gateway timeout (emulated, after processing)',
      },
    };
  }
  if (fault.slowChunkMs > 0) return slowWrite(d.scheduler, res, answer, fault.slowChunkMs);
  write(res, answer);
}

const EMPTY = Buffer.alloc(0);

/** The key id a request claims (unchecked: the limiter runs before authentication, as a gateway's does). */
function accountOf(headers: IncomingHttpHeaders): string {
  const legacy = headers['hf-api-key'];
  if (typeof legacy === 'string') return legacy;
  const auth = headers.authorization;
  const m = typeof auth === 'string' ? /^Key\s+([^:\s]+):/.exec(auth.trim()) : null;
  return m?.[1] ?? 'anonymous';
}

function finish(res: ServerResponse, answer: EmuResponse): void {
  write(res, answer);
}

function encode(answer: EmuResponse): { headers: Record<string, string>; body: Uint8Array } {
  if (answer.json !== undefined) return { headers: { ...JSON_HEADERS, ...answer.headers }, body: Buffer.from(JSON.stringify(answer.json)) };
  return { headers: { ...answer.headers }, body: answer.bytes ?? EMPTY };
}

function write(res: ServerResponse, answer: EmuResponse): void {
  if (res.destroyed) return;
  const { headers, body } = encode(answer);
  headers['content-length'] = String(body.length);
  res.writeHead(answer.status, headers);
  res.end(body);
}

async function slowWrite(scheduler: Scheduler, res: ServerResponse, answer: EmuResponse, chunkMs: number): Promise<void> {
  const { headers, body } = encode(answer);
  headers['content-length'] = String(body.length);
  res.writeHead(answer.status, headers);
  const pieces = 4;
  const size = Math.ceil(body.length / pieces);
  for (let i = 0; i < pieces; i++) {
    if (res.destroyed || scheduler.closed) return;
    res.write(body.subarray(i * size, (i + 1) * size));
    if (i < pieces - 1) await scheduler.sleep(chunkMs);
  }
  res.end();
}
