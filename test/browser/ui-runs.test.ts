/// <reference lib="dom" />
// `genpipe ui`'s runs page in real Chromium: a run started against the emulator appears as running
// while it runs and as completed once it ends, without a reload; a page of another origin that
// frames the ui gets nothing, and a name that DNS points at 127.0.0.1 (rebinding) gets a 421.
import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startUiServer, type UiServer } from '../../src/ui/ui-server.js';
import { cleanTemps, HF_KEY, sheetsManifest, tempDir } from '../run/runner-helpers.js';
import { launchChromium, watchPage } from './chromium.js';

const IMAGES = new URL('../../docs/images/', import.meta.url).pathname;

let emu: Emulator;
let browser: Browser;
let out: string;
let server: UiServer;
let bait: Server;
let baitUrl: string;

const io = (): CliIO => ({
  out: () => {},
  write: async () => {},
  err: () => {},
  env: { GENPIPE_BASE_URL: emu.url, HF_KEY },
  signal: new AbortController().signal,
});

beforeAll(async () => {
  browser = await launchChromium(['--host-resolver-rules=MAP evil.test 127.0.0.1']);
  // Slow enough that the run is seen running: each sheet takes a second or so.
  emu = await startEmulator({ port: 0, timeScale: 0.1, log: () => {} });
  out = tempDir();
  // A skipped night beside the runs: listed with why.
  mkdirSync(join(out, 'nightly'), { recursive: true });
  writeFileSync(
    join(out, 'nightly', 'not-started.jsonl'),
    `${JSON.stringify({ id: '20261201T020000Z-0000', at: '2026-12-01T02:00:00.000Z', status: 'skipped', exit_code: 0, reason: 'overlap', overlap_with: '20261201T010000Z-aaaa' })}\n`,
  );
  server = await startUiServer({ runDirs: [out], host: '127.0.0.1', port: 0, watchIntervalMs: 200 });
  bait = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(`<!doctype html><title>bait</title><iframe id="victim" src="${server.url}/" width="1000" height="600"></iframe>`);
  });
  await new Promise<void>((r) => bait.listen(0, '127.0.0.1', r));
  baitUrl = `http://127.0.0.1:${(bait.address() as AddressInfo).port}/`;
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
  await new Promise((r) => bait?.close(r));
  await emu?.close();
  cleanTemps();
});

describe('genpipe ui: the runs page', () => {
  it('shows a run as running while it runs and completed once it ends, without a reload', { timeout: 90_000 }, async () => {
    const page = await browser.newPage({ viewport: { width: 1800, height: 420 } });
    const problems = watchPage(page, server.url);
    await page.goto(server.url);
    await page.waitForSelector('html[data-ready=true]');
    await page.waitForSelector('tr[data-status=skipped]');
    expect(await page.locator('tr[data-status=skipped] td').nth(2).textContent()).toBe('skipped: overlap with run 20261201T010000Z-aaaa');
    expect(await page.locator('tr[data-status=running]').count()).toBe(0);
    const finished = main(
      ['run', sheetsManifest(tempDir(), 6, { name: 'live' }), '--out', out, '--quiet', '--concurrency', '1', '--budget', '2'],
      io(),
    );
    const running = page.locator('tr[data-status=running]');
    await running.waitFor({ timeout: 30_000 });
    expect(await running.locator('td').nth(1).textContent()).toBe('live');
    await page.screenshot({ path: join(IMAGES, 'ui-runs.png') });
    expect(await finished).toBe(0);
    const done = page.locator('tr[data-status=completed]');
    await done.waitFor({ timeout: 30_000 });
    const cells = await done.locator('td').allTextContents();
    // done, reused, failed, unknown, committed, charged, net, unknown US$, unpriced, budget.
    expect(cells.slice(3, 13)).toEqual(['6/6', '0', '0', '0', 'US$0.30', 'US$0.30', 'US$0.30', 'US$0.00', '0', 'US$2.00']);
    // Newest first: the run of today above the night skipped on 2026-12-01.
    expect(await page.locator('tbody tr').first().getAttribute('data-status')).toBe('completed');
    // The status filter.
    await page.selectOption('#f-status', 'skipped');
    expect(await page.locator('tbody tr').count()).toBe(1);
    await page.selectOption('#f-status', '');
    await page.fill('#f-to', '2026-12-01');
    expect(await page.locator('tbody tr').count()).toBe(1);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('framed by a page of another origin, it draws nothing', { timeout: 30_000 }, async () => {
    const page = await browser.newPage();
    const answered: Record<string, string>[] = [];
    page.on('response', (r) => {
      if (r.url() === `${server.url}/`) answered.push(r.headers());
    });
    await page.goto(baitUrl);
    await expect.poll(() => answered.length, { timeout: 10_000 }).toBe(1);
    await page.waitForTimeout(500);
    const frame = page.frames().find((f) => f !== page.mainFrame());
    expect(frame).toBeDefined();
    expect(frame!.url().startsWith(server.url)).toBe(false);
    expect(await frame!.locator('tbody tr').count()).toBe(0);
    expect(answered[0]).toMatchObject({ 'x-frame-options': 'DENY' });
    await page.close();
  });

  it('a name DNS points at 127.0.0.1 gets 421 and no run', { timeout: 30_000 }, async () => {
    const page = await browser.newPage();
    const port = new URL(server.url).port;
    const response = await page.goto(`http://evil.test:${port}/api/runs`);
    expect(response!.status()).toBe(421);
    expect(await page.content()).not.toContain('live');
    await page.close();
  });
});
