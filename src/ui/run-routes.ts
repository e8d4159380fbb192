/**
 * The routes of a run's page, under `/run/<root>/<pipeline>/<run-id>/`:
 *
 * - `` the page; `api/state` its state as JSON; `api/events` its event stream (`state`, again
 *   each time the run's journal changes); `assets/uplot.js` the chart library;
 * - `api/estimate?selection=rejected|failed` what a remake would start and its estimate (a read);
 *   `POST api/remake {selection, confirm: true}` starts it (remake.ts);
 * - `gallery/...` the run's gallery with its review controls (review/review-server.ts's handler),
 *   built again when its page is asked and the run's journal changed since (run-gallery.ts).
 *
 * A run is found only by a key the watch lists: no path of the request reaches the disk.
 */
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { pageHeaders } from '../review/page-policy.js';
import { readBody, send } from '../review/review-server.js';
import type { EventStream } from './event-stream.js';
import { startRemake, type RemakeSelection } from './remake.js';
import { RunGalleries } from './run-gallery.js';
import { runPage } from './run-page.js';
import { remakeEstimate, RunFollower } from './run-state.js';
import type { UiRun } from './run-watch.js';
import type { UiContext, UiRoute } from './ui-types.js';

const TEXT = 'text/plain; charset=utf-8';
const RUN_PATH = /^\/run\/(\d+)\/([^/]+)\/([^/]+)(\/.*)?$/;
/** Followers and galleries kept at once; the oldest is let go past it. */
const MAX_KEPT = 16;

const requireHere = createRequire(import.meta.url);

/** uPlot's own minified build and style, read once. */
let uplot: Promise<{ script: string; style: string }> | undefined;
const uplotFiles = (): Promise<{ script: string; style: string }> =>
  (uplot ??= Promise.all([
    readFile(requireHere.resolve('uplot/dist/uPlot.iife.min.js'), 'utf8'),
    readFile(requireHere.resolve('uplot/dist/uPlot.min.css'), 'utf8'),
  ]).then(([script, style]) => ({ script, style })));

function kept<T>(map: Map<string, T>, key: string, make: () => T): T {
  let value = map.get(key);
  if (value === undefined) {
    value = make();
    map.set(key, value);
    if (map.size > MAX_KEPT) map.delete(map.keys().next().value as string);
  }
  return value;
}

export interface RunRoutesOptions {
  /** The environment of a remake's `genpipe resume` (the service's address and credentials). */
  env: NodeJS.ProcessEnv;
  /** Connection flags the ui was given, passed on to the resume. */
  connectionArgs: readonly string[];
}

export function runRoutes(options: RunRoutesOptions): UiRoute {
  const followers = new Map<string, RunFollower>();
  let galleries: RunGalleries | undefined;
  let page: { html: string; headers: Record<string, string> } | undefined;

  return async (req, res, url, context) => {
    const match = RUN_PATH.exec(url.pathname);
    if (!match) return false;
    let key: string;
    try {
      key = [match[1], decodeURIComponent(match[2] ?? ''), decodeURIComponent(match[3] ?? '')].join('/');
    } catch {
      return false;
    }
    const run = await context.watch.run(key);
    if (run === undefined || run.status.startsWith('skipped') || run.status.startsWith('refused')) return false;
    const rest = match[4] ?? '';
    if (rest === '') {
      res.writeHead(308, { location: `${url.pathname}/`, 'x-frame-options': 'DENY', 'content-security-policy': "frame-ancestors 'none'" });
      res.end();
      return true;
    }
    const follower = kept(followers, key, () => new RunFollower(run.dir));
    if (req.method === 'GET' && rest === '/') {
      page ??= await (async () => {
        const html = runPage(context.access.token, (await uplotFiles()).style);
        return { html, headers: pageHeaders(html) };
      })();
      send(res, 200, 'text/html; charset=utf-8', page.html, page.headers);
      return true;
    }
    if (req.method === 'GET' && rest === '/assets/uplot.js') {
      send(res, 200, 'text/javascript; charset=utf-8', (await uplotFiles()).script);
      return true;
    }
    if (req.method === 'GET' && rest === '/api/state') {
      send(res, 200, 'application/json', JSON.stringify(await follower.state(run)));
      return true;
    }
    if (req.method === 'GET' && rest === '/api/events') {
      await followRun(res, key, follower, context);
      return true;
    }
    if (req.method === 'GET' && rest === '/api/estimate') {
      const selection = selectionOf(url.searchParams.get('selection') ?? '');
      if (selection === undefined) send(res, 400, TEXT, 'selection is rejected, failed, or both (comma-separated)');
      else send(res, 200, 'application/json', JSON.stringify(await remakeEstimate(run.dir, selection)));
      return true;
    }
    if (req.method === 'POST' && rest === '/api/remake') {
      await remake(req, res, run);
      return true;
    }
    if (rest.startsWith('/gallery/')) {
      galleries ??= new RunGalleries(MAX_KEPT, `<meta name="genpipe-token" content="${context.access.token}">`);
      const handled = await galleries.handle(run, req, res, rest.slice('/gallery'.length));
      if (!handled) send(res, 404, TEXT, 'not found');
      return true;
    }
    return false;
  };

  async function remake(req: IncomingMessage, res: ServerResponse, run: UiRun): Promise<void> {
    const body = await readBody(req);
    let parsed: { selection?: unknown; confirm?: unknown } = {};
    try {
      parsed = JSON.parse(body ?? '') as typeof parsed;
    } catch {
      return send(res, 400, TEXT, 'the body is not JSON');
    }
    const selection = Array.isArray(parsed.selection) ? selectionOf(parsed.selection.join(',')) : undefined;
    if (selection === undefined) return send(res, 400, TEXT, 'selection is a list of rejected and failed');
    if (parsed.confirm !== true)
      return send(res, 400, TEXT, 'a remake spends credits: it starts only with confirm: true, once its estimate was shown');
    const started = await startRemake(run.dir, selection, options);
    send(res, started.started ? 202 : 409, 'application/json', JSON.stringify(started));
  }
}

function selectionOf(text: string): RemakeSelection[] | undefined {
  const parts = text.split(',').filter((p) => p !== '');
  if (parts.length === 0 || parts.some((p) => p !== 'rejected' && p !== 'failed')) return undefined;
  return [...new Set(parts)] as RemakeSelection[];
}

async function followRun(res: ServerResponse, key: string, follower: RunFollower, context: UiContext): Promise<void> {
  let sending = Promise.resolve();
  const sendState = (stream: EventStream, run: UiRun): void => {
    sending = sending
      // A large journal's chart follows the first screen: its state is sent again once read.
      .then(async () => stream.send('state', await follower.state(run, () => sendState(stream, run))))
      .catch(() => stream.close());
  };
  const stream = context.streams.open(res, (opened) =>
    context.watch.subscribe((changes) => {
      const run = changes.changed.find((r) => r.key === key);
      if (run !== undefined) sendState(opened, run);
    }),
  );
  if (stream === undefined) return;
  const run = await context.watch.run(key);
  if (run !== undefined) sendState(stream, run);
}
