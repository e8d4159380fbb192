/**
 * The server of `genpipe ui`: pages over the run folders it is given, with live updates by
 * server-sent events. Every request passes the access rules first (access.ts); every answer
 * refuses framing (review/page-policy.ts), and each page runs only its own inline blocks.
 *
 * - `GET /` the runs page; `GET /api/runs` the list as JSON; `GET /api/events` its event stream
 *   (`runs`: the whole list, then `change`: the runs that changed and the keys of runs gone).
 * - `extraRoutes`: handlers asked, in order, after the access rules and before the ui's own
 *   routes; one that answers returns true (a `/metrics` of another module is mounted so).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';
import { FRAMING_REFUSED, pageHeaders } from '../review/page-policy.js';
import { send } from '../review/review-server.js';
import { accessRules, TOKEN_COOKIE } from './access.js';
import { runsPage } from './runs-page.js';
import { RunWatch, type RunChanges } from './run-watch.js';
import type { RemakeOptions } from './remake.js';
import { runRoutes, type RunRoutesOptions } from './run-routes.js';
import type { ExtraRoute, UiContext, UiRoute } from './ui-types.js';
import { compareRoutes } from './compare-routes.js';
import { EventStreams } from './event-stream.js';
import { fleetRoutes } from './fleet-routes.js';
import type { RedisTarget } from '../fleet/redis.js';
import type { ConfigFlags } from '../api/config.js';

export type { ExtraRoute } from './ui-types.js';

export interface UiServerOptions {
  /** The folders of run directories (`runs/`): each holds `<pipeline>/<run-id>/`. */
  runDirs: readonly string[];
  host: string;
  port: number;
  /** Fixes the token (tests); else a random one per start. */
  token?: string;
  extraRoutes?: readonly ExtraRoute[];
  /** More pages of the ui (compare, fleet), asked after a run's pages. */
  routes?: readonly UiRoute[];
  /**
   * What a remake's `genpipe resume` is given: its environment and connection flags (and, in tests,
   * a program that cannot run). Default: this process's environment. The run routes pass it on whole.
   */
  remake?: RunRoutesOptions & RemakeOptions;
  /** The fleet's Redis and queue, for the fleet page. */
  redis?: { target: RedisTarget; shown: string; queue: string };
  /** How often the fleet page's figures are read while a page follows them, in ms. Default 2,000. */
  fleetIntervalMs?: number;
  /** Connection flags, for the compare page's catalog reads (a manifest with selections). */
  flags?: ConfigFlags;
  /** How often the run folders are looked at while a page listens, in ms. Default 1,000. */
  watchIntervalMs?: number;
  /** Event streams open at once, the runs list's, run pages' and the fleet page's together; one more is refused with 503. Default 32. */
  maxStreams?: number;
}

export interface UiServer {
  readonly url: string;
  readonly token: string;
  /** True when every request needs the token (a non-loopback address). */
  readonly everyRequest: boolean;
  close(): Promise<void>;
}

const TEXT = 'text/plain; charset=utf-8';

export async function startUiServer(options: UiServerOptions): Promise<UiServer> {
  const roots = options.runDirs.map((dir) => resolve(dir));
  const access = accessRules(options.host, options.token);
  const watch = new RunWatch(roots, { intervalMs: options.watchIntervalMs ?? 1_000 });
  const page = runsPage(access.token, options.runDirs);
  const headers = pageHeaders(page);
  const streams = new EventStreams(options.maxStreams);
  const context: UiContext = { watch, roots, access, streams };
  const remake = options.remake ?? { env: process.env, connectionArgs: [] };
  const fleet = fleetRoutes({
    ...(options.redis ? { redis: options.redis } : {}),
    ...(options.fleetIntervalMs ? { intervalMs: options.fleetIntervalMs } : {}),
  });
  const routes: UiRoute[] = [
    runRoutes(remake),
    compareRoutes({ flags: options.flags ?? {}, env: remake.env }),
    fleet,
    ...(options.routes ?? []),
  ];
  let origin = '';

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // Framing refused on every answer, a mounted route's too (a page's own policy replaces the second).
    for (const [name, value] of Object.entries(FRAMING_REFUSED)) res.setHeader(name, value);
    const url = new URL(req.url ?? '/', origin);
    const refused = access.check(req, url);
    if (refused) return send(res, refused.status, TEXT, refused.message);
    if (access.tokenInQuery(url)) {
      // The token once in the address: kept in a cookie of this server, and the address cleaned.
      url.searchParams.delete('token');
      res.writeHead(303, {
        location: `${url.pathname}${url.search}`,
        'set-cookie': `${TOKEN_COOKIE}=${access.token}; HttpOnly; SameSite=Strict; Path=/`,
        'x-frame-options': 'DENY',
        'content-security-policy': "frame-ancestors 'none'",
      });
      res.end();
      return;
    }
    for (const route of options.extraRoutes ?? []) if (await route(req, res, url)) return;
    if (req.method === 'GET' && url.pathname === '/') return send(res, 200, 'text/html; charset=utf-8', page, headers);
    if (req.method === 'GET' && url.pathname === '/api/runs') return send(res, 200, 'application/json', JSON.stringify(await watch.runs()));
    if (req.method === 'GET' && url.pathname === '/api/events') return openStream(res);
    for (const route of routes) if (await route(req, res, url, context)) return;
    return send(res, req.method === 'GET' ? 404 : 405, TEXT, req.method === 'GET' ? 'not found' : 'method not allowed');
  }

  async function openStream(res: ServerResponse): Promise<void> {
    // Changes a look tells before the page has its first list are in that list: not sent twice.
    let listed = false;
    const stream = streams.open(res, (opened) =>
      watch.subscribe((changes: RunChanges) => {
        if (listed) opened.send('change', changes);
      }),
    );
    if (stream === undefined) return;
    await watch.look();
    // At once after the look: what any look found since is in the list, and what comes later is a change.
    stream.send('runs', watch.listed());
    listed = true;
  }

  const server: Server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) send(res, 500, TEXT, 'internal error');
      else res.destroy();
    });
  });
  await new Promise<void>((resolveListen, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => resolveListen());
  });
  const address = server.address() as AddressInfo;
  const shownHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  origin = `http://${shownHost}:${address.port}`;
  access.listening(address);
  return {
    url: origin,
    token: access.token,
    everyRequest: access.everyRequest,
    close: () =>
      new Promise<void>((resolveClose) => {
        watch.close();
        fleet.close();
        streams.closeAll();
        server.close(() => resolveClose());
        server.closeAllConnections();
      }),
  };
}
