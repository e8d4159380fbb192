/// <reference lib="dom" />
// The fleet page of `genpipe ui --redis` in real Chromium: two `genpipe worker` processes on a
// redis-server of the test's own show as idle; one is killed with SIGKILL (no goodbye), and the
// page marks it lost once its heartbeat is older than a job lock's lease, while the other stays.
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { parseRedisUrl } from '../../src/fleet/redis.js';
import { setQueueLimits } from '../../src/fleet/queue-admin.js';
import { startUiServer, type UiServer } from '../../src/ui/ui-server.js';
import { killAll, startWorkerProcess, useTestRedis, type WorkerProcess } from '../fleet/fleet-helpers.js';
import { cleanTemps, tempDir } from '../run/runner-helpers.js';
import { launchChromium, watchPage } from './chromium.js';

const IMAGES = new URL('../../docs/images/', import.meta.url).pathname;
const redis = useTestRedis();
let emu: Emulator;
let browser: Browser;
let server: UiServer;
const workers: WorkerProcess[] = [];

beforeAll(async () => {
  browser = await launchChromium();
  emu = await startEmulator({ port: 0, timeScale: 0.001, log: () => {} });
  const target = parseRedisUrl(redis.url);
  // The caps `genpipe queue limits` sets, as the page shows them.
  await setQueueLimits(target, 'genpipe', { concurrency: 4, ratePerSecond: 10 });
  server = await startUiServer({
    runDirs: [tempDir()],
    host: '127.0.0.1',
    port: 0,
    redis: { target, shown: target.shown, queue: 'genpipe' },
    fleetIntervalMs: 500,
  });
  workers.push(await startWorkerProcess(redis.url, emu.url, 'steady'), await startWorkerProcess(redis.url, emu.url, 'doomed'));
}, 60_000);

afterAll(async () => {
  await killAll(workers);
  await browser?.close();
  await server?.close();
  await emu?.close();
  cleanTemps();
});

describe('genpipe ui: the fleet page', () => {
  it('marks a worker killed with SIGKILL as lost, and keeps the other idle', { timeout: 60_000 }, async () => {
    const page = await browser.newPage({ viewport: { width: 1000, height: 500 } });
    const problems = watchPage(page, server.url);
    await page.goto(`${server.url}/fleet`);
    await page.waitForSelector('[data-worker=steady][data-state=idle]');
    await page.waitForSelector('[data-worker=doomed][data-state=idle]');
    expect(await page.locator('#caps').textContent()).toBe(
      'concurrency cap 4, rate cap 10 jobs per second; in use: 0 of 4 (0% full) on 2 live workers.',
    );
    workers[1]!.child.kill('SIGKILL');
    await workers[1]!.exited;
    await page.waitForSelector('[data-worker=doomed][data-state=lost]', { timeout: 30_000 });
    expect(await page.locator('[data-worker=steady]').getAttribute('data-state')).toBe('idle');
    await page.screenshot({ path: join(IMAGES, 'ui-fleet.png') });
    expect(problems).toEqual([]);
    await page.close();
  });
});
