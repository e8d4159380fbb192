/**
 * The figures genpipe exposes to monitoring systems, in the Prometheus text format (prom-client).
 *
 * Two kinds of figure:
 * - read from run directories on every scrape, through the functions `genpipe runs` and the cost
 *   report use (report/run-list.ts, report/cost-report.ts), never a second computation of money:
 *   runs by status, instances by status and model, money by kind and model;
 * - told live by the runs and the worker of this process (a RunObserver): requests by route and
 *   status, 429s, seconds waited on throttling, journal fsync latency.
 * With Redis, the queue's job counts and the workers' heartbeats (fleet/queue-admin.ts, as
 * `genpipe queue status` reads them).
 *
 * Labels stay bounded: pipeline, model, status, kind, route (ids replaced by `{id}`, at most
 * MAX_ROUTES of them), queue, state and worker name. No instance or request id, no secret: a route
 * is a method and a path, never a query or a header.
 */
import { stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join } from 'node:path';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { committedUsd, type ReportStatus } from '../report/cost-report.js';
import { listRuns, NO_FIGURES, runListing, type OnRunSummary, type RunListing, type RunSums, type SumsGroup } from '../report/run-list.js';
import type { RunObserver } from '../run/observer.js';
import { routeOf } from '../run/limits/route-limiter.js';
import { jsonUsd } from '../util/format-usd.js';
import { redact } from '../util/redact.js';
import { runFile } from '../run/files/run-layout.js';
import { DEFAULT_QUEUE, parseRedisUrl, type RedisTarget } from '../fleet/redis.js';

/** Distinct routes counted by name; any further one is counted as `other` (a path with an id that has no digit). */
export const MAX_ROUTES = 64;

/** Journal fsync latency buckets, in seconds: a local SSD syncs in well under a millisecond, a network disk in tens. */
const FSYNC_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

/** The kinds of money, in the one vocabulary (util/format-usd.ts), and the report's figure for each. */
const MONEY_KINDS: readonly [string, (g: SumsGroup) => number][] = [
  ['committed', (g) => committedUsd(g)],
  ['charged', (g) => g.estimatedUsd],
  ['net', (g) => g.netUsd],
  ['unknown', (g) => g.unknownUsd],
];

/**
 * The live figures of this process: what its runs and its worker tell as they go. One per
 * registry; its `observer` goes to RunOptions.observer (or a fleet worker's).
 */
export class LiveFigures implements RunObserver {
  readonly #requests: Counter<'route' | 'status'>;
  readonly #throttled: Counter<'route'>;
  readonly #fsync: Histogram;
  readonly #routes = new Set<string>();
  /** The per-route limiters of the runs going on: their waits, summed at each scrape. */
  readonly #limiters = new Set<{ readonly waitedMs: number }>();
  /** What the limiters of the ended runs waited, in ms: folded in when each ends, so a worker keeps no limiter per run. */
  #endedMs = 0;

  constructor(registry: Registry) {
    const registers = [registry];
    this.#requests = new Counter({
      name: 'genpipe_requests_total',
      help: 'Requests to the Generation Service by route (method and path, ids as {id}) and HTTP status (error: no answer).',
      labelNames: ['route', 'status'],
      registers,
    });
    this.#throttled = new Counter({
      name: 'genpipe_throttled_requests_total',
      help: 'Requests the service answered 429 (throttled), by route.',
      labelNames: ['route'],
      registers,
    });
    const waitedMs = (): number => this.waitedMs;
    new Counter({
      name: 'genpipe_throttled_seconds_total',
      help: 'Wall-clock seconds spent waiting out throttling (a 429 Retry-After), while at least one request waited.',
      registers,
      collect() {
        this.reset();
        const ms = waitedMs();
        if (ms > 0) this.inc(ms / 1000);
      },
    });
    this.#fsync = new Histogram({
      name: 'genpipe_journal_fsync_seconds',
      help: 'How long each fsync of a run journal took, in seconds.',
      buckets: FSYNC_BUCKETS,
      registers,
    });
  }

  exchange(method: string, path: string, status: number | undefined): void {
    const route = this.#route(routeOf(method, path));
    this.#requests.inc({ route, status: status === undefined ? 'error' : String(status) });
    if (status === 429) this.#throttled.inc({ route });
  }

  journalSync(ms: number): void {
    this.#fsync.observe(ms / 1000);
  }

  /** Follows a run's limiter until its run ends; its waits then stay counted, in the ended runs' sum. */
  throttling(limiter: { readonly waitedMs: number }): () => void {
    this.#limiters.add(limiter);
    // A limiter's waits only grow, and they stay counted once its run ends: the counter never goes down.
    return () => {
      if (!this.#limiters.delete(limiter)) return;
      this.#endedMs += limiter.waitedMs;
    };
  }

  /** How long this process's runs waited on throttling, in ms: the ended ones' and those going on. */
  get waitedMs(): number {
    let ms = this.#endedMs;
    for (const limiter of this.#limiters) ms += limiter.waitedMs;
    return ms;
  }

  /** The limiters followed now: one per run going on (and the worker's own). */
  get followedLimiters(): number {
    return this.#limiters.size;
  }

  #route(route: string): string {
    if (this.#routes.has(route)) return route;
    if (this.#routes.size >= MAX_ROUTES) return 'other';
    this.#routes.add(route);
    return route;
  }
}

/** The figures read from run directories: set afresh from a list of runs and their cost summaries. */
export class RunFigures {
  readonly #runs: Gauge<'pipeline' | 'status'>;
  readonly #instances: Gauge<'pipeline' | 'model' | 'status'>;
  readonly #money: Gauge<'pipeline' | 'model' | 'kind'>;
  readonly #unpriced: Gauge<'pipeline' | 'model'>;

  constructor(registry: Registry) {
    const registers = [registry];
    this.#runs = new Gauge({
      name: 'genpipe_runs',
      help: 'Runs by pipeline and status (the status genpipe runs shows: completed, failed, budget, stopped, interrupted...; skipped and refused for ticks that did not start).',
      labelNames: ['pipeline', 'status'],
      registers,
    });
    this.#instances = new Gauge({
      name: 'genpipe_instances',
      help: 'Instances by pipeline, model and status, summed over the runs, as the cost report counts them.',
      labelNames: ['pipeline', 'model', 'status'],
      registers,
    });
    this.#money = new Gauge({
      name: 'genpipe_money_usd',
      help: "US$ by pipeline, model and kind (committed, charged, net, unknown), summed over the runs, as the cost report computes it: genpipe's own figures, not the service's ledger.",
      labelNames: ['pipeline', 'model', 'kind'],
      registers,
    });
    this.#unpriced = new Gauge({
      name: 'genpipe_unpriced_instances',
      help: 'Instances sent whose price is unknown (their cost is in no US$ figure), by pipeline and model.',
      labelNames: ['pipeline', 'model'],
      registers,
    });
  }

  /** Replaces every figure with those of `runs` (each with its cost summary, when it started). */
  set(runs: readonly { listing: RunListing; summary?: RunSums | undefined }[]): void {
    this.#runs.reset();
    this.#instances.reset();
    this.#money.reset();
    this.#unpriced.reset();
    const sums = new Map<string, number>();
    const add = (gauge: string, labels: Record<string, string>, value: number): void => {
      const key = JSON.stringify([gauge, labels]);
      sums.set(key, (sums.get(key) ?? 0) + value);
    };
    for (const { listing, summary } of runs) {
      // `skipped: overlap with run X` is one status, whatever run it names.
      add('runs', { pipeline: listing.pipeline, status: statusWord(listing.status) }, 1);
      if (!summary) continue;
      for (const group of summary.models) {
        const base = { pipeline: listing.pipeline, model: group.name };
        for (const [status, count] of Object.entries(group.counts) as [ReportStatus, number][])
          add('instances', { ...base, status }, count);
        for (const [kind, of] of MONEY_KINDS) add('money', { ...base, kind }, of(group));
        add('unpriced', base, group.unpricedInstances);
      }
    }
    for (const [key, value] of sums) {
      const [gauge, labels] = JSON.parse(key) as [string, Record<string, string>];
      if (gauge === 'runs') this.#runs.set(labels, value);
      else if (gauge === 'instances') this.#instances.set(labels, value);
      else if (gauge === 'money') this.#money.set(labels, jsonUsd(value));
      else this.#unpriced.set(labels, value);
    }
  }
}

/** The first word of a status (`skipped: overlap with run X` → `skipped`): a bounded label. */
export const statusWord = (status: string): string => (status.split(':')[0] ?? status).trim();

/** The listing of a run whose files could not be read: counted among the runs, with no figures. */
const UNREADABLE = { status: 'unreadable', ...NO_FIGURES };

/** A run as it was read, and the sizes and times of its files then. */
interface ReadRun {
  stamp: string;
  listing: RunListing;
  summary: RunSums;
}

/**
 * Reads runs as `genpipe runs` lists them (runListing), each again only when its journal or
 * plan.json changed since the last reading: a scrape of a folder of finished runs reads nothing.
 */
export class RunReader {
  #seen = new Map<string, ReadRun>();

  async read(runDirs: readonly string[]): Promise<{ listing: RunListing; summary?: RunSums | undefined }[]> {
    const seen = new Map<string, ReadRun>();
    const out: { listing: RunListing; summary?: RunSums | undefined }[] = [];
    const listOne = async (root: string, pipeline: string, runId: string, onSummary?: OnRunSummary): Promise<RunListing | undefined> => {
      const dir = join(root, pipeline, runId);
      const stamp = await stampOf(dir);
      const before = this.#seen.get(dir);
      if (before && stamp !== undefined && before.stamp === stamp) {
        seen.set(dir, before);
        onSummary?.(before.listing, before.summary);
        return before.listing;
      }
      try {
        return await runListing(root, pipeline, runId, (listing, summary) => {
          if (stamp !== undefined) seen.set(dir, { stamp, listing, summary });
          onSummary?.(listing, summary);
        });
      } catch {
        // One damaged run (a plan.json that is not one) is counted as unreadable; the scrape goes on.
        return { ...UNREADABLE, pipeline, runId, dir };
      }
    };
    for (const root of runDirs) {
      const summaries = new Map<string, RunSums>();
      const listings = await listRuns(root, undefined, { listOne, onSummary: (listing, summary) => summaries.set(listing.dir, summary) });
      for (const listing of listings) out.push({ listing, summary: summaries.get(listing.dir) });
    }
    // Runs gone from the folders are forgotten.
    this.#seen = seen;
    return out;
  }
}

/** The size and modification time of a run's journal and plan.json, or undefined when one cannot be read. */
async function stampOf(dir: string): Promise<string | undefined> {
  try {
    const files = await Promise.all((['journal', 'plan'] as const).map((file) => stat(runFile(dir, file))));
    // summary.json, which the listing reads first, changes after the journal's last record: its stamp too (absent in older runs).
    const summary = await stat(runFile(dir, 'summary')).catch(() => undefined);
    return [...files, summary].map((f) => (f === undefined ? '-' : `${f.size}:${f.mtimeMs}`)).join(',');
  } catch {
    return undefined;
  }
}

/** The runs under each folder, each with its cost summary: what `genpipe runs` lists. */
export function readRuns(runDirs: readonly string[]): Promise<{ listing: RunListing; summary?: RunSums | undefined }[]> {
  return new RunReader().read(runDirs);
}

/** The queue's job counts and its workers' heartbeats, read from Redis at each scrape. */
class FleetFigures {
  readonly #up: Gauge<'queue'>;
  readonly #jobs: Gauge<'queue' | 'state'>;
  readonly #workers: Gauge<'queue' | 'state'>;
  readonly #beat: Gauge<'queue' | 'worker'>;
  readonly #active: Gauge<'queue' | 'worker'>;

  constructor(
    registry: Registry,
    readonly redis: RedisTarget,
    readonly queue: string,
  ) {
    const registers = [registry];
    this.#up = new Gauge({
      name: 'genpipe_redis_up',
      help: "1 when the fleet's Redis answered this scrape, else 0.",
      labelNames: ['queue'],
      registers,
    });
    this.#jobs = new Gauge({
      name: 'genpipe_queue_jobs',
      help: 'Jobs in the fleet queue by state (waiting, active, delayed, completed, failed): waiting is the queue depth.',
      labelNames: ['queue', 'state'],
      registers,
    });
    this.#workers = new Gauge({
      name: 'genpipe_workers',
      help: 'Fleet workers by state: live, or lost (no heartbeat within the lock lease; its record stays a few minutes).',
      labelNames: ['queue', 'state'],
      registers,
    });
    this.#beat = new Gauge({
      name: 'genpipe_worker_heartbeat_timestamp_seconds',
      help: "Unix time of each worker's last heartbeat (alert on time() minus this).",
      labelNames: ['queue', 'worker'],
      registers,
    });
    this.#active = new Gauge({
      name: 'genpipe_worker_active_jobs',
      help: 'Jobs each worker ran at its last heartbeat.',
      labelNames: ['queue', 'worker'],
      registers,
    });
  }

  async read(): Promise<void> {
    const { queueStatus } = await import('../fleet/queue-admin.js');
    const queue = this.queue;
    for (const gauge of [this.#jobs, this.#workers, this.#beat, this.#active]) gauge.reset();
    try {
      const status = await queueStatus(this.redis, queue, { byRun: false });
      this.#up.set({ queue }, 1);
      for (const [state, count] of Object.entries(status.totals)) this.#jobs.set({ queue, state }, count);
      const lost = status.workers.filter((w) => w.lost).length;
      this.#workers.set({ queue, state: 'live' }, status.workers.length - lost);
      this.#workers.set({ queue, state: 'lost' }, lost);
      for (const w of status.workers) {
        this.#beat.set({ queue, worker: w.name }, Date.parse(w.at) / 1000);
        this.#active.set({ queue, worker: w.name }, w.active);
      }
    } catch {
      // A scrape still answers when Redis does not: genpipe_redis_up says why the fleet's figures are missing.
      this.#up.set({ queue }, 0);
    }
  }
}

/** prom-client's default gauges whose names end in _total (a counter's suffix): left out. */
const LINTED_DEFAULTS = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'];

export interface MetricsOptions {
  /** Folders of run directories (`runs/` holds `<pipeline>/<run-id>/`), read at each scrape. */
  runDirs: readonly string[];
  /** The fleet's Redis (a redis:// URL, or a parsed one) and queue (default genpipe): its job counts and workers. */
  redis?: { target: RedisTarget | string; queue?: string | undefined } | undefined;
  /** Node's own process figures (CPU, memory, event loop), named genpipe_process_... Default true. */
  processMetrics?: boolean | undefined;
}

export interface Metrics {
  readonly registry: Registry;
  /** Give it to the runs and the worker of this process (RunOptions.observer): the live figures. */
  readonly observer: RunObserver;
  /** Answers GET and HEAD /metrics and returns true; any other path is left alone (false), for the caller's router. */
  handle(req: IncomingMessage, res: ServerResponse): Promise<boolean>;
  /** The exposition, figures read now. Scrapes that overlap share one reading. */
  render(): Promise<string>;
}

export function createMetrics(options: MetricsOptions): Metrics {
  const registry = new Registry();
  if (options.processMetrics !== false) {
    collectDefaultMetrics({ register: registry, prefix: 'genpipe_' });
    // Gauges that prom-client names with _total, which promtool's lint refuses for a gauge.
    for (const name of LINTED_DEFAULTS) registry.removeSingleMetric(`genpipe_${name}`);
  }
  const observer = new LiveFigures(registry);
  const runs = new RunFigures(registry);
  const reader = new RunReader();
  const redis = options.redis;
  const target = typeof redis?.target === 'string' ? parseRedisUrl(redis.target) : redis?.target;
  const fleet = target ? new FleetFigures(registry, target, redis?.queue ?? DEFAULT_QUEUE) : undefined;
  let reading: Promise<string> | undefined;
  const render = (): Promise<string> =>
    (reading ??= (async () => {
      try {
        runs.set(await reader.read(options.runDirs));
        await fleet?.read();
        return await registry.metrics();
      } finally {
        reading = undefined;
      }
    })());
  return {
    registry,
    observer,
    render,
    async handle(req, res) {
      // The path alone, split off by hand: a request-target that is no URL (`//[`) is simply not /metrics.
      if ((req.url ?? '/').split('?')[0] !== '/metrics') return false;
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain; charset=utf-8' }).end('Only GET and HEAD read /metrics.\n');
        return true;
      }
      let body: string;
      try {
        body = await render();
      } catch (error) {
        const why = redact(error instanceof Error ? error.message : String(error));
        res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end(`Could not read the figures: ${why}\n`);
        return true;
      }
      res.writeHead(200, { 'content-type': registry.contentType, 'cache-control': 'no-store' });
      res.end(req.method === 'HEAD' ? undefined : body);
      return true;
    },
  };
}
