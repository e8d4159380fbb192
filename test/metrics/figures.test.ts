// The rules that keep the figures' labels bounded and the worker's server on loopback by default,
// each on its own.
import { mkdirSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { LiveFigures, MAX_ROUTES, RunFigures, RunReader, readRuns, statusWord } from '../../src/metrics/metrics.js';
import { startEmulator } from '../../src/emulator/index.js';
import { parseMetricsAddress, serveMetrics } from '../../src/metrics/serve.js';
import { createMetrics } from '../../src/metrics/metrics.js';
import { connect } from 'node:net';
import { cleanTemps, findRunDir, HF_KEY, runCli, sheetsManifest, tempDir } from '../run/runner-helpers.js';
import { startRun } from '../../src/session/run-session.js';
import { FAST_POLLING } from '../fleet/fleet-helpers.js';

afterEach(() => cleanTemps());

describe('metrics labels', () => {
  it('a route is a method and a path with ids as {id}, and at most MAX_ROUTES of them are named', async () => {
    const registry = new Registry();
    const live = new LiveFigures(registry);
    live.exchange('GET', '/requests/3f2a9c1e-0000-4000-8000-000000000001/status', 200);
    live.exchange('GET', '/requests/77aa0c1e-0000-4000-8000-000000000002/status', 429);
    // Paths with ids that have no digit: each would be a route of its own, so past the cap they are `other`.
    for (let i = 0; i < MAX_ROUTES + 20; i++)
      live.exchange('PUT', `/uploads/${'abcdefghij'[i % 10]}${'klmnopqrst'[Math.floor(i / 10) % 10]}x`, 200);
    const text = await registry.metrics();
    expect(text).toContain('genpipe_requests_total{route="GET /requests/{id}/status",status="200"} 1');
    expect(text).toContain('genpipe_throttled_requests_total{route="GET /requests/{id}/status"} 1');
    const routes = new Set([...text.matchAll(/genpipe_requests_total\{route="([^"]+)"/g)].map((m) => m[1]));
    expect(routes.size).toBe(MAX_ROUTES + 1);
    expect(routes.has('other')).toBe(true);
  });

  it('a tick that did not start is counted by its first word, never by the run it names', async () => {
    const root = tempDir('genpipe-metrics-runs-');
    mkdirSync(join(root, 'nightly'), { recursive: true });
    const lines = ['a', 'b'].map((id) =>
      JSON.stringify({
        id,
        status: 'skipped',
        reason: 'overlap',
        overlap_with: `20261203T0${id === 'a' ? 1 : 2}0000Z-aaaa`,
        at: '2026-12-03T01:00:00Z',
      }),
    );
    writeFileSync(join(root, 'nightly', 'not-started.jsonl'), `${lines.join('\n')}\n`);
    const runs = await readRuns([root]);
    const registry = new Registry();
    new RunFigures(registry).set(runs);
    const text = await registry.metrics();
    expect(runs).toHaveLength(2);
    expect(text).toContain('genpipe_runs{pipeline="nightly",status="skipped"} 2');
    expect(statusWord('refused: no service address is set')).toBe('refused');
  });

  it('--metrics PORT listens on loopback; another host is taken only when named', () => {
    expect(parseMetricsAddress('9464')).toEqual({ host: '127.0.0.1', port: 9464 });
    expect(parseMetricsAddress('0.0.0.0:9464')).toEqual({ host: '0.0.0.0', port: 9464 });
    expect(parseMetricsAddress('[::1]:0')).toEqual({ host: '::1', port: 0 });
    expect(() => parseMetricsAddress('localhost')).toThrow(/PORT or HOST:PORT/);
    expect(() => parseMetricsAddress('1.2.3.4:70000')).toThrow(/PORT or HOST:PORT/);
  });

  it('a request whose target is no URL gets 404, and the server goes on answering /metrics', async () => {
    const metrics = createMetrics({ runDirs: [tempDir()], processMetrics: false });
    const server = await serveMetrics(metrics, { host: '127.0.0.1', port: 0 });
    try {
      const raw = (target: string): Promise<string> =>
        new Promise((resolve, reject) => {
          const socket = connect(server.port, '127.0.0.1', () =>
            socket.end(`GET ${target} HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n\r\n`),
          );
          let text = '';
          socket.on('data', (chunk: Buffer) => (text += chunk.toString()));
          socket.on('end', () => resolve(text));
          socket.on('error', reject);
          socket.setTimeout(5_000, () => socket.destroy(new Error('no answer within 5 s')));
        });
      expect(await raw('//[')).toMatch(/^HTTP\/1\.1 404 /);
      expect(await raw('/other')).toMatch(/^HTTP\/1\.1 404 /);
      const scrape = await fetch(server.url);
      expect(scrape.status).toBe(200);
      expect(await scrape.text()).toMatch(/^# HELP genpipe_/m);
    } finally {
      await server.close();
    }
  });

  it('on loopback, answers 421 with no figure to a Host that is not its own (DNS rebinding), and its own names', async () => {
    const metrics = createMetrics({ runDirs: [tempDir()], processMetrics: false });
    metrics.observer.exchange?.('GET', '/requests/3f2a9c1e-0000-4000-8000-000000000001/status', 200);
    const server = await serveMetrics(metrics, { host: '127.0.0.1', port: 0 });
    try {
      const raw = (host: string | undefined): Promise<string> =>
        new Promise((resolve, reject) => {
          const head = host === undefined ? '' : `Host: ${host}\r\n`;
          const socket = connect(server.port, '127.0.0.1', () => socket.write(`GET /metrics HTTP/1.1\r\n${head}Connection: close\r\n\r\n`));
          let text = '';
          socket.on('data', (chunk: Buffer) => (text += chunk.toString()));
          socket.on('end', () => resolve(text));
          socket.on('error', reject);
          socket.setTimeout(5_000, () => socket.destroy(new Error('no answer within 5 s')));
        });
      const port = server.port;
      for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `LOCALHOST:${port}`]) {
        const answer = await raw(host);
        expect(answer, host).toMatch(/^HTTP\/1\.1 200 /);
        expect(answer).toContain('genpipe_requests_total{route="GET /requests/{id}/status",status="200"} 1');
      }
      for (const host of [`evil.test:${port}`, 'evil.test', `127.0.0.1:${port + 1}`, `127.0.0.1.evil.test:${port}`, '127.0.0.1']) {
        const answer = await raw(host);
        expect(answer, host).toMatch(/^HTTP\/1\.1 421 /);
        expect(answer).toContain(`This server answers only to 127.0.0.1:${port}, localhost:${port}.`);
        expect(answer).not.toContain('genpipe_');
      }
      // HTTP/1.1 needs a Host: Node answers 400 to none, before the server sees it.
      expect(await raw(undefined)).toMatch(/^HTTP\/1\.1 (400|421) /);
      // The server goes on answering its own name.
      expect((await fetch(server.url)).status).toBe(200);
    } finally {
      await server.close();
    }
  });

  it('a scrape reads a run again only when its journal or plan changed', async () => {
    const emu = await startEmulator({ port: 0, timeScale: 0.001, log: () => {} });
    try {
      const dir = tempDir('genpipe-metrics-reader-');
      const out = join(dir, 'runs');
      const run = await runCli(['run', sheetsManifest(dir, 2, { name: 'cached', extra: FAST_POLLING }), '--out', out, '--quiet'], {
        env: { GENPIPE_BASE_URL: emu.url },
      });
      expect(run.code, run.stderr).toBe(0);
      const plan = join(findRunDir(out, 'cached'), 'plan.json');
      const { atime, mtime, size } = statSync(plan);
      // Whole milliseconds, as utimes sets them.
      utimesSync(plan, atime, mtime);
      const reader = new RunReader();
      const netOf = async (): Promise<number | undefined> => (await reader.read([out]))[0]?.summary?.total.netUsd;
      const net = await netOf();
      expect(net).toBeGreaterThan(0);
      // plan.json's bytes changed, but not its size or time: the reading before stands (nothing is read).
      writeFileSync(plan, 'x'.repeat(size));
      utimesSync(plan, atime, mtime);
      expect(await netOf()).toBe(net);
      // Its time changed: read again, and a plan.json that is not one makes the run unreadable, not the scrape.
      utimesSync(plan, atime, new Date(mtime.getTime() + 1_000));
      const again = await reader.read([out]);
      expect(again.map((r) => [r.listing.status, r.summary])).toEqual([['unreadable', undefined]]);
    } finally {
      await emu.close();
    }
  }, 60_000);
  it('a run that ended leaves no limiter behind: its wait on throttling is folded into the sum, unchanged', async () => {
    const emu = await startEmulator({ port: 0, timeScale: 0.001, log: () => {} });
    try {
      const registry = new Registry();
      const live = new LiveFigures(registry);
      const dir = tempDir('genpipe-metrics-limiters-');
      const throttledSeconds = async (): Promise<number> =>
        Number(/^genpipe_throttled_seconds_total (\S+)$/m.exec(await registry.metrics())?.[1] ?? 0);
      let waitedMs = 0;
      for (let i = 0; i < 3; i++) {
        // The first run's first submit is answered 429 (Retry-After 1 s) and waits it out.
        if (i === 0) emu.faults.force('submit', 'rate_429');
        const result = await startRun(sheetsManifest(dir, 2, { name: `limited-${i}`, extra: FAST_POLLING }), {
          env: { GENPIPE_BASE_URL: emu.url, HF_KEY },
          outDir: join(dir, 'runs'),
          quiet: true,
          observer: live,
        });
        expect(result.exitCode).toBe(0);
        waitedMs += result.summary.throttledMs ?? 0;
        expect(live.followedLimiters, `after run ${i + 1}`).toBe(0);
        expect(await throttledSeconds()).toBeCloseTo(waitedMs / 1000, 6);
      }
      expect(waitedMs).toBeGreaterThan(500);
      // A run going on is followed until it ends.
      const limiter = { waitedMs: 250 };
      const ended = live.throttling(limiter);
      expect(live.followedLimiters).toBe(1);
      expect(await throttledSeconds()).toBeCloseTo((waitedMs + 250) / 1000, 6);
      ended();
      ended();
      expect(live.followedLimiters).toBe(0);
      expect(await throttledSeconds()).toBeCloseTo((waitedMs + 250) / 1000, 6);
    } finally {
      await emu.close();
    }
  }, 60_000);
});
