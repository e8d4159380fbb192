/**
 * The review server of `genpipe review RUN_DIR`: the run's gallery with approve / reject / star
 * controls, on loopback only.
 *
 * - `GET /` the gallery page (rebuilt from the journal when the server starts, with the controls on),
 *   and `GET /gallery-data/<step>.<page>.js` its data files, built with it and held in memory: a
 *   path is answered only when it is one of theirs, exactly (no file is read for it).
 * - `GET /review.json` the decisions so far; `POST /api/decisions` one change (review-store.ts).
 * - `GET /outputs/...` and `/thumbs/...` the run's files, read only below those two folders: a
 *   path that leaves them (`..`, an encoded slash, a symlink out) is 404, as is anything else.
 * - A POST must come from the page itself (its Origin is the server's), so another site open in
 *   the same browser cannot decide for the reviewer.
 * - Every answer refuses to be framed, and the page runs only its own inline blocks and origin
 *   (page-policy.ts): a site that frames it under a bait gets nothing to click.
 * - Every request must name the server in its Host header (`127.0.0.1:PORT`, `localhost:PORT`,
 *   `[::1]:PORT`, as it listens): else 421 and no run data. A page of another site whose name its
 *   DNS points at 127.0.0.1 (DNS rebinding) is of that site's origin, so the browser lets it read
 *   the answers; its requests carry that name as Host, and that is what gives them away.
 */
import { createReadStream } from 'node:fs';
import { realpath, stat } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { extname, join, resolve, sep } from 'node:path';
import { GenpipeError } from '../api/errors.js';
import { GALLERY_DATA_DIR } from '../gallery/gallery-page.js';
import { GALLERY_FILE, galleryPageOf } from '../gallery/write-gallery.js';
import { DecisionChange, readReview, ReviewStore } from './review-store.js';
import { redactEveryForm } from '../util/redact.js';
import { readPlanFile } from '../run/files/run-dir.js';
import { FRAMING_REFUSED, originsOf, pageHeaders } from './page-policy.js';

const CONTENT_TYPES: Record<string, string> = {
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.webp': 'image/webp',
  '.gif': 'image/gif',
  '.mp4': 'video/mp4',
  '.webm': 'video/webm',
  '.mov': 'video/quicktime',
  '.wav': 'audio/wav',
  '.mp3': 'audio/mpeg',
  '.m4a': 'audio/mp4',
  '.md': 'text/markdown; charset=utf-8',
};

/** Largest decision body accepted, in bytes. */
const MAX_BODY = 64 * 1024;

export interface ReviewServer {
  readonly url: string;
  close(): Promise<void>;
}

/** The gallery routes of one run with review controls: what `genpipe review` serves, and `genpipe ui` mounts under a run's page. */
export interface ReviewHandler {
  /**
   * Answers `pathname` (relative to where the page is served: `/`, `/review.json`, ...) and returns
   * true, or returns false for a path it does not know. A POST is taken only when `writeAllowed`
   * said yes (the caller's rules: the review server's Origin, the ui's Origin and token).
   */
  handle(req: IncomingMessage, res: ServerResponse, pathname: string): Promise<boolean>;
}

export async function reviewHandler(
  runDir: string,
  options: {
    writeAllowed: (req: IncomingMessage) => boolean;
    pageHead?: string;
    /**
     * The run's decision store, when the caller keeps one across handlers (the ui builds a running
     * run's gallery again): one store writes review.json one decision at a time.
     */
    store?: ReviewStore;
  },
): Promise<ReviewHandler> {
  const root = await realpath(resolve(runDir));
  const store = options.store ?? new ReviewStore(root);
  await readReview(root);
  const built = await galleryPageOf(root, { review: true });
  if (built === undefined) throw new GenpipeError('invalid_input', `${runDir} is a run of too many instances to review on one page.`);
  // Already redacted as built; again here, as the page always was (a secret registered since).
  let page: string = redactEveryForm(built.get(GALLERY_FILE) ?? '');
  if (options.pageHead !== undefined) page = page.replace('<head>', `<head>${options.pageHead}`);
  const dataFiles = new Map(
    [...built].filter(([path]) => path.startsWith(`${GALLERY_DATA_DIR}/`)).map(([path, text]) => [`/${path}`, text]),
  );
  // Images of the page are its own, or from a sink's public prefix.
  const plan = await readPlanFile(root);
  const headers = pageHeaders(page, originsOf(plan.steps.flatMap((s) => (s.sink?.public_url === undefined ? [] : [s.sink.public_url]))));
  return {
    async handle(req, res, pathname) {
      if (req.method === 'GET' && (pathname === '/' || pathname === `/${GALLERY_FILE}`)) {
        send(res, 200, 'text/html; charset=utf-8', page, headers);
        return true;
      }
      const data = req.method === 'GET' ? dataFiles.get(pathname) : undefined;
      if (data !== undefined) {
        send(res, 200, 'text/javascript; charset=utf-8', redactEveryForm(data));
        return true;
      }
      if (req.method === 'GET' && pathname === '/review.json') {
        send(res, 200, 'application/json', JSON.stringify(await readReview(root)));
        return true;
      }
      if (req.method === 'POST' && pathname === '/api/decisions') {
        await decide(req, res);
        return true;
      }
      if (req.method === 'GET' && (pathname.startsWith('/outputs/') || pathname.startsWith('/thumbs/'))) {
        await serveFile(root, pathname, res);
        return true;
      }
      return false;
    },
  };

  async function decide(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!options.writeAllowed(req)) return send(res, 403, 'text/plain; charset=utf-8', 'decisions are taken from the review page only');
    const body = await readBody(req);
    if (body === undefined) return send(res, 413, 'text/plain; charset=utf-8', 'the body is too large');
    let json: unknown;
    try {
      json = JSON.parse(body);
    } catch {
      return send(res, 400, 'text/plain; charset=utf-8', 'the body is not JSON');
    }
    const change = DecisionChange.safeParse(json);
    if (!change.success)
      return send(
        res,
        400,
        'text/plain; charset=utf-8',
        'expected {instance, decision?: "approved" | "rejected" | null, starred?: boolean}',
      );
    return send(res, 200, 'application/json', JSON.stringify(await store.apply(change.data)));
  }
}

export async function startReviewServer(runDir: string, options: { host: string; port: number }): Promise<ReviewServer> {
  let origin = '';
  let hosts: ReadonlySet<string> = new Set();
  let origins: ReadonlySet<string> = new Set();
  const review = await reviewHandler(runDir, { writeAllowed: (req) => origins.has(req.headers.origin?.toLowerCase() ?? '') });
  const server: Server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) send(res, 500, 'text/plain; charset=utf-8', 'internal error');
      else res.destroy();
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const named = req.headers.host?.toLowerCase();
    if (named === undefined || !hosts.has(named))
      return send(res, 421, 'text/plain; charset=utf-8', `this server answers only to ${[...hosts].join(', ')}`);
    const url = new URL(req.url ?? '/', origin);
    if (await review.handle(req, res, url.pathname)) return;
    if (req.method === 'GET') return send(res, 404, 'text/plain; charset=utf-8', 'not found');
    return send(res, 405, 'text/plain; charset=utf-8', 'method not allowed');
  }

  await new Promise<void>((resolveListen, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => resolveListen());
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  origin = `http://${host}:${address.port}`;
  hosts = allowedHosts(address, options.host);
  origins = new Set([...hosts].map((h) => `http://${h}`));
  return {
    url: origin,
    close: () =>
      new Promise<void>((resolveClose) => {
        server.close(() => resolveClose());
        server.closeAllConnections();
      }),
  };
}

/**
 * The Host headers that name this server: its address and port, and localhost on its port when it
 * listens on a loopback address of the family localhost resolves to (either, in practice).
 */
export function allowedHosts(address: AddressInfo, asked: string): ReadonlySet<string> {
  const port = address.port;
  const own = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const out = new Set([`${own}:${port}`.toLowerCase()]);
  if (own === '127.0.0.1' || own === '[::1]') out.add(`localhost:${port}`);
  if (asked.toLowerCase() === 'localhost') out.add(`localhost:${port}`);
  return out;
}

export async function serveFile(root: string, pathname: string, res: ServerResponse): Promise<void> {
  let relative: string;
  try {
    relative = decodeURIComponent(pathname).replace(/^\/+/, '');
  } catch {
    return send(res, 404, 'text/plain; charset=utf-8', 'not found');
  }
  const top = relative.split('/')[0];
  const type = CONTENT_TYPES[extname(relative).toLowerCase()];
  if ((top !== 'outputs' && top !== 'thumbs') || type === undefined || relative.includes('\0') || relative.includes('\\'))
    return send(res, 404, 'text/plain; charset=utf-8', 'not found');
  let real: string;
  try {
    // The real path, symlinks resolved, must still lie below outputs/ or thumbs/ of the run.
    real = await realpath(join(root, relative));
    if (!real.startsWith(`${join(root, top)}${sep}`) || !(await stat(real)).isFile()) throw new Error('outside');
  } catch {
    return send(res, 404, 'text/plain; charset=utf-8', 'not found');
  }
  res.writeHead(200, { ...FRAMING_REFUSED, 'content-type': type, 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' });
  createReadStream(real)
    .on('error', () => res.destroy())
    .pipe(res);
}

export function send(
  res: ServerResponse,
  status: number,
  type: string,
  body: string,
  headers: Record<string, string> = FRAMING_REFUSED,
): void {
  res.writeHead(status, { ...headers, 'content-type': type, 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' });
  res.end(body);
}

export async function readBody(req: IncomingMessage): Promise<string | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY) return undefined;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}
