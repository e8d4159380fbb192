// A real Prometheus scrapes what genpipe exposes: a `genpipe worker --metrics` process and a
// standalone createMetrics server over a runs folder, both on loopback free ports; the test reads
// figures back through Prometheus's HTTP API. `promtool check metrics` passes on each exposition.
// These run the built binary (`npm test` builds first).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { parseRedisUrl } from '../../src/fleet/redis.js';
import { createMetrics } from '../../src/metrics/metrics.js';
import { serveMetrics, type MetricsServer } from '../../src/metrics/serve.js';
import { cleanTemps, findRunDir, freePort, runCli, SECRET, spentUsd, tempDir } from '../run/runner-helpers.js';
import { fastSheets, killAll, startWorkerProcess, type WorkerProcess } from '../fleet/fleet-helpers.js';
import { startTestRedis, type TestRedis } from '../fleet/redis-server.js';
import { promtoolCheck, startPrometheus, type TestPrometheus } from './prometheus-server.js';

const QUEUE = 'metrics';
const COUNT = 6;

let redis: TestRedis;
let emu: Emulator;
let worker: WorkerProcess;
let workerMetrics: string;
let standalone: MetricsServer;
let prometheus: TestPrometheus;
let out: string;

beforeAll(async () => {
  redis = await startTestRedis();
  emu = await startEmulator({ port: 0, timeScale: 0.001, log: () => {} });
  const port = await freePort();
  worker = await startWorkerProcess(redis.url, emu.url, 'metrics-worker', ['--queue', QUEUE, '--metrics', `127.0.0.1:${port}`]);
  workerMetrics = `127.0.0.1:${port}`;
  out = join(tempDir('genpipe-metrics-'), 'runs');
  const metrics = createMetrics({ runDirs: [out], redis: { target: parseRedisUrl(redis.url), queue: QUEUE } });
  standalone = await serveMetrics(metrics, { host: '127.0.0.1', port: 0 });
  prometheus = await startPrometheus([
    { job: 'worker', address: workerMetrics },
    { job: 'standalone', address: `127.0.0.1:${standalone.port}` },
  ]);
}, 60_000);

afterAll(async () => {
  await prometheus?.stop();
  await killAll(worker ? [worker] : []);
  await standalone?.close();
  await emu?.close();
  await redis?.dispose();
  cleanTemps();
});

const total = (samples: { value: number }[]): number => samples.reduce((sum, s) => sum + s.value, 0);

describe('Prometheus scrapes genpipe', () => {
  it('reads back the worker’s requests and the runs folder’s money, equal to the report and the ledger', async () => {
    const dir = join(out, '..');
    const run = await runCli(
      ['run', fastSheets(dir, COUNT, 'scraped'), '--out', out, '--redis', redis.url, '--queue', QUEUE, '--no-local-worker', '--quiet'],
      { env: { GENPIPE_BASE_URL: emu.url }, timeoutMs: 60_000 },
    );
    expect(run.code, run.stderr).toBe(0);
    const report = JSON.parse(readFileSync(join(findRunDir(out, 'scraped'), 'report.json'), 'utf8')) as { total: { netUsd: number } };
    expect(report.total.netUsd).toBeGreaterThan(0);
    expect(report.total.netUsd).toBeCloseTo(spentUsd(emu), 6);

    // Every submit went through the worker (--no-local-worker): its counter has each of them.
    const submits = await prometheus.waitFor(
      'sum(genpipe_requests_total{job="worker",route=~"POST .*",status="200"})',
      (s) => total(s) === COUNT,
    );
    expect(total(submits)).toBe(COUNT);
    const live = await prometheus.waitFor('genpipe_workers{job="worker",state="live"}', (s) => total(s) >= 1);
    expect(total(live)).toBeGreaterThanOrEqual(1);
    const beat = await prometheus.waitFor(
      'genpipe_worker_heartbeat_timestamp_seconds{job="worker",worker="metrics-worker"}',
      (s) => s.length === 1,
    );
    expect(Math.abs((beat[0]?.value ?? 0) - Date.now() / 1000)).toBeLessThan(60);

    // The standalone server reads the runs folder: its net is the report's, to the cent.
    const net = await prometheus.waitFor(
      'sum(genpipe_money_usd{job="standalone",pipeline="scraped",kind="net"})',
      (s) => Math.abs(total(s) - report.total.netUsd) < 1e-6,
    );
    expect(total(net)).toBeCloseTo(report.total.netUsd, 6);
    const runs = await prometheus.waitFor('genpipe_runs{job="standalone",pipeline="scraped",status="completed"}', (s) => total(s) === 1);
    expect(total(runs)).toBe(1);
    const done = await prometheus.waitFor(
      'sum(genpipe_instances{job="standalone",pipeline="scraped",status="completed"})',
      (s) => total(s) === COUNT,
    );
    expect(total(done)).toBe(COUNT);
    // The queue, read from Redis: it answered, and nothing is left waiting once the run is done.
    const up = await prometheus.waitFor('genpipe_redis_up{job="standalone",queue="metrics"}', (s) => total(s) === 1);
    expect(total(up)).toBe(1);
    const waiting = await prometheus.waitFor('genpipe_queue_jobs{job="worker",queue="metrics",state="waiting"}', (s) => s.length === 1);
    expect(waiting.map((s) => s.value)).toEqual([0]);
  }, 120_000);

  it('every exposition passes promtool check metrics, and none carries the secret or an id', async () => {
    for (const url of [`http://${workerMetrics}/metrics`, standalone.url]) {
      const res = await fetch(url);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
      const text = await res.text();
      expect(text).toContain('# TYPE genpipe_requests_total counter');
      const check = promtoolCheck(text);
      expect(check.output).toBe('');
      expect(check.status).toBe(0);
      expect(text).not.toContain(SECRET);
      // Request ids are replaced by {id} in routes: no label value holds a UUID.
      expect(text).not.toMatch(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-/);
    }
    const other = await fetch(`http://${workerMetrics}/other`);
    expect(other.status).toBe(404);
  });
});
