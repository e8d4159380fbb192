/**
 * The fleet page of `genpipe ui --redis URL`: the workers (active, idle, lost, last seen), the jobs
 * waiting and active per run, and the caps set with `genpipe queue limits` with how full they are.
 * Its figures are `genpipe queue status`'s (fleet/queue-admin.ts: queueStatus), read again every
 * FLEET_INTERVAL_MS while a page follows them (`/api/fleet/events`), and not at all otherwise.
 * Without --redis the page says how to get one.
 */
import type { ServerResponse } from 'node:http';
import type { QueueStatus } from '../fleet/queue-admin.js';
import type { RedisTarget } from '../fleet/redis.js';
import { pageHeaders } from '../review/page-policy.js';
import { send } from '../review/review-server.js';
import { formatCount } from '../util/format-usd.js';
import { LIVE_LINE, PAGE_LIVE } from './page-live.js';
import { UI_STYLE } from './ui-style.js';
import type { UiContext, UiRoute } from './ui-types.js';

export const FLEET_INTERVAL_MS = 2_000;

/** A worker as the page shows it. */
export interface FleetWorker {
  name: string;
  host: string;
  pid: number;
  state: 'active' | 'idle' | 'lost';
  active: number;
  concurrency: number;
  done: number;
  lastSeenS: number;
}

export interface FleetView {
  queue: string;
  workers: FleetWorker[];
  runs: QueueStatus['runs'];
  caps: { concurrency: string; rate: string; inUse: string };
  error?: string;
}

export function fleetView(status: QueueStatus): FleetView {
  const { limits, liveWorkers } = status;
  return {
    queue: status.queue,
    workers: status.workers.map((w) => ({
      name: w.name,
      host: w.host,
      pid: w.pid,
      state: w.lost ? 'lost' : w.active > 0 ? 'active' : 'idle',
      active: w.active,
      concurrency: w.concurrency,
      done: w.done,
      lastSeenS: w.lastSeenS,
    })),
    runs: status.runs,
    caps: {
      concurrency: limits.concurrency === null ? 'none' : formatCount(limits.concurrency),
      rate: limits.ratePerSecond === null ? 'none' : `${limits.ratePerSecond} jobs per second`,
      inUse:
        limits.concurrency === null
          ? `${formatCount(liveWorkers.active)} jobs active on ${formatCount(liveWorkers.count)} live workers`
          : `${formatCount(liveWorkers.active)} of ${formatCount(limits.concurrency)} (${Math.round((100 * liveWorkers.active) / Math.max(1, limits.concurrency))}% full) on ${formatCount(liveWorkers.count)} live workers`,
    },
  };
}

const SCRIPT = String.raw`
(() => {
  'use strict';
${PAGE_LIVE}
  const $ = (id) => document.getElementById(id);
  const row = (cells, attrs) => {
    const tr = document.createElement('tr');
    for (const [k, v] of Object.entries(attrs || {})) tr.setAttribute(k, v);
    for (const c of cells) {
      const td = document.createElement('td');
      td.textContent = String(c);
      tr.appendChild(td);
    }
    return tr;
  };
  function draw(view) {
    $('error').textContent = view.error || '';
    $('queue').textContent = view.queue;
    $('caps').textContent = 'concurrency cap ' + view.caps.concurrency + ', rate cap ' + view.caps.rate + '; in use: ' + view.caps.inUse + '.';
    $('workers').replaceChildren(...view.workers.map((w) => row([w.name, w.host, w.pid, w.state, w.active + '/' + w.concurrency, w.done, w.lastSeenS + ' s ago'], { 'data-worker': w.name, 'data-state': w.state })));
    $('runs').replaceChildren(...view.runs.map((r) => row([r.runId, r.counts.waiting, r.counts.active, r.counts.delayed, r.counts.completed, r.counts.failed], { 'data-run': r.runId })));
    document.documentElement.dataset.ready = 'true';
  }
  const events = followLive('/api/fleet/events');
  events.addEventListener('fleet', (e) => draw(JSON.parse(e.data)));
})();
`;

function fleetPage(redisShown: string | undefined): string {
  const body =
    redisShown === undefined
      ? '<p>No Redis: start <code>genpipe ui --redis redis://HOST:6379</code> (or set <code>redis_url</code> in the config file) to see a fleet.</p>'
      : `<p class="note">Queue <strong id="queue"></strong> on ${redisShown.replace(/[&<>"]/g, '')}. <span id="error" class="error"></span></p>
${LIVE_LINE}
<p id="caps"></p>
<h2>Workers</h2><table><thead><tr><th>name</th><th>host</th><th>pid</th><th>state</th><th>active</th><th>done</th><th>last seen</th></tr></thead><tbody id="workers"></tbody></table>
<h2>Jobs by run</h2><table><thead><tr><th>run</th><th>waiting</th><th>active</th><th>delayed</th><th>completed</th><th>failed</th></tr></thead><tbody id="runs"></tbody></table>
<script>${SCRIPT}</script>`;
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>genpipe ui: fleet</title><style>${UI_STYLE}</style></head>
<body><header><h1>Fleet</h1><nav><a href="/">runs</a> <a href="/compare">compare</a></nav></header>${body}</body></html>`;
}

/** One poll of the queue shared by every page that follows it. */
class FleetPoll {
  readonly #listeners = new Set<(view: FleetView) => void>();
  #timer: NodeJS.Timeout | undefined;
  #reading = false;
  #last: FleetView | undefined;

  constructor(
    readonly redis: RedisTarget,
    readonly queue: string,
    readonly intervalMs: number,
  ) {}

  async read(): Promise<FleetView> {
    try {
      // BullMQ is loaded only for a ui with --redis.
      const { queueStatus } = await import('../fleet/queue-admin.js');
      this.#last = fleetView(await queueStatus(this.redis, this.queue));
    } catch (error) {
      this.#last = {
        ...(this.#last ?? { queue: this.queue, workers: [], runs: [], caps: { concurrency: '', rate: '', inUse: '' } }),
        error: `Redis: ${(error as Error).message}`,
      };
    }
    return this.#last;
  }

  subscribe(listener: (view: FleetView) => void): () => void {
    this.#listeners.add(listener);
    this.#schedule(0);
    return () => {
      this.#listeners.delete(listener);
      if (this.#listeners.size === 0 && this.#timer !== undefined) {
        clearTimeout(this.#timer);
        this.#timer = undefined;
      }
    };
  }

  #schedule(delay: number): void {
    // One poll at a time: a page that comes while a read is under way is told by that read.
    if (this.#timer !== undefined || this.#reading || this.#listeners.size === 0) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#reading = true;
      void this.read().then((view) => {
        this.#reading = false;
        for (const listener of this.#listeners) listener(view);
        this.#schedule(this.intervalMs);
      });
    }, delay);
    this.#timer.unref();
  }

  close(): void {
    this.#listeners.clear();
    if (this.#timer !== undefined) clearTimeout(this.#timer);
  }
}

export function fleetRoutes(options: {
  redis?: { target: RedisTarget; shown: string; queue: string };
  intervalMs?: number;
}): UiRoute & { close(): void } {
  const poll =
    options.redis === undefined
      ? undefined
      : new FleetPoll(options.redis.target, options.redis.queue, options.intervalMs ?? FLEET_INTERVAL_MS);
  const html = fleetPage(options.redis?.shown);
  const headers = pageHeaders(html);
  const route = async (req: { method?: string | undefined }, res: ServerResponse, url: URL, context: UiContext): Promise<boolean> => {
    if (req.method !== 'GET') return false;
    if (url.pathname === '/fleet') {
      send(res, 200, 'text/html; charset=utf-8', html, headers);
      return true;
    }
    if (url.pathname === '/api/fleet') {
      if (poll === undefined) send(res, 404, 'text/plain; charset=utf-8', 'genpipe ui was started without --redis');
      else send(res, 200, 'application/json', JSON.stringify(await poll.read()));
      return true;
    }
    if (url.pathname === '/api/fleet/events' && poll !== undefined) {
      context.streams.open(res, (stream) => poll.subscribe((view) => stream.send('fleet', view)));
      return true;
    }
    return false;
  };
  return Object.assign(route, { close: () => poll?.close() });
}
