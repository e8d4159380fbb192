/**
 * A small HTTP server for `/metrics` (`genpipe worker --metrics HOST:PORT`). It listens on
 * loopback unless another host is named: `--metrics 9464` is 127.0.0.1:9464, and a host that
 * reaches other machines (0.0.0.0, a LAN address) must be written out. It serves figures only,
 * never takes a write, and answers 404 to any other path.
 *
 * On loopback a request must name the server in its Host header (`127.0.0.1:PORT`,
 * `localhost:PORT`, `[::1]:PORT`), else 421: a page of another site whose name its DNS points at
 * 127.0.0.1 (DNS rebinding) could otherwise read the worker's names and counts. Its requests carry
 * that name as Host (the review server's and the ui's rule).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { GenpipeError } from '../api/errors.js';
import { allowedHosts } from '../review/review-server.js';
import { isLoopbackHost } from '../util/loopback-host.js';
import type { Metrics } from './metrics.js';

export interface MetricsAddress {
  host: string;
  port: number;
}

/** `9464`, `127.0.0.1:9464`, `[::1]:9464`, `0.0.0.0:9464`: where to listen; a bare port is loopback's. */
export function parseMetricsAddress(value: string, flag = '--metrics'): MetricsAddress {
  const match = /^(?:(?:\[([^\]]+)\]|([^:[\]]+)):)?(\d{1,5})$/.exec(value.trim());
  const port = Number(match?.[3]);
  if (!match || !(port >= 0 && port <= 65_535))
    throw new GenpipeError('invalid_input', `${flag} takes PORT or HOST:PORT, such as 9464 or 127.0.0.1:9464, not "${value}".`);
  return { host: match[1] ?? match[2] ?? '127.0.0.1', port };
}

/** True when a host serves other machines too: said once, as the figures then reach whoever can connect. */
export const reachableFromOutside = (host: string): boolean => !isLoopbackHost(host);

export interface MetricsServer {
  readonly host: string;
  readonly port: number;
  /** `http://HOST:PORT/metrics`. */
  readonly url: string;
  close(): Promise<void>;
}

export async function serveMetrics(metrics: Metrics, address: MetricsAddress): Promise<MetricsServer> {
  // Set once the server listens: the Host headers that name it, on loopback; undefined elsewhere.
  let hosts: ReadonlySet<string> | undefined;
  const server: Server = createServer((req, res) => {
    const named = req.headers.host?.toLowerCase();
    if (hosts !== undefined && (named === undefined || !hosts.has(named))) {
      res.writeHead(421, { 'content-type': 'text/plain; charset=utf-8' }).end(`This server answers only to ${[...hosts].join(', ')}.\n`);
      return;
    }
    // Whatever one request does, the worker it serves beside goes on: a failure ends that answer only.
    metrics.handle(req, res).then(
      (handled) => {
        if (!handled) res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('Only /metrics is served here.\n');
      },
      () => res.destroy(),
    );
  });
  // A scraper keeps its connection; closing the server must not wait for it.
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error) =>
      reject(
        new GenpipeError('invalid_input', `Could not listen for metrics on ${address.host}:${address.port}: ${error.message}.`, {
          cause: error,
        }),
      ),
    );
    server.listen(address.port, address.host, () => resolve());
  });
  const bound = server.address();
  const port = typeof bound === 'object' && bound ? bound.port : address.port;
  if (isLoopbackHost(address.host)) hosts = allowedHosts(bound as AddressInfo, address.host);
  const shown = address.host.includes(':') ? `[${address.host}]` : address.host;
  return {
    host: address.host,
    port,
    url: `http://${shown}:${port}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
