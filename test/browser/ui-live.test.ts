/// <reference lib="dom" />
// The pages of `genpipe ui` in real Chromium, with room for one event stream: the first page takes
// it, and a page of another kind, refused its stream (503), says in one line that its live updates
// stopped rather than stand still like a quiet run. Closing the first page frees the place: a page
// reloaded then follows again and says nothing. Then genpipe ui stops: a following page says it is
// reconnecting, and follows again by itself once genpipe ui is started again on the same port.
import { readFileSync } from 'node:fs';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { parseRedisUrl } from '../../src/fleet/redis.js';
import { LIVE_RECONNECTING, LIVE_STOPPED } from '../../src/ui/page-live.js';
import { startUiServer, type UiServer, type UiServerOptions } from '../../src/ui/ui-server.js';
import { useTestRedis } from '../fleet/fleet-helpers.js';
import { cleanTemps, HF_KEY, sheetsManifest, tempDir } from '../run/runner-helpers.js';
import { launchChromium, watchPage } from './chromium.js';

const GUIDE = new URL('../../docs/guides/ui.md', import.meta.url).pathname;
const redis = useTestRedis();
let emu: Emulator;
let browser: Browser;
let server: UiServer;
let options: UiServerOptions;

beforeAll(async () => {
  browser = await launchChromium();
  emu = await startEmulator({ port: 0, timeScale: 0.001, log: () => {} });
  const out = tempDir();
  const io: CliIO = {
    out: () => {},
    write: async () => {},
    err: () => {},
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY },
    signal: new AbortController().signal,
  };
  expect(await main(['run', sheetsManifest(tempDir(), 2, { name: 'ended' }), '--out', out, '--quiet'], io)).toBe(0);
  const target = parseRedisUrl(redis.url);
  options = {
    runDirs: [out],
    host: '127.0.0.1',
    port: 0,
    watchIntervalMs: 200,
    redis: { target, shown: target.shown, queue: 'genpipe' },
    fleetIntervalMs: 500,
    maxStreams: 1,
  };
  server = await startUiServer(options);
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
  await emu?.close();
  cleanTemps();
});

const live = (page: Page): Promise<{ state: string | undefined; text: string; shown: boolean }> =>
  page.evaluate(() => {
    const line = document.getElementById('live')!;
    return { state: line.dataset.live, text: line.textContent ?? '', shown: line.getBoundingClientRect().height > 0 };
  });

/** Waits until the page's stream has opened or ended for good, and says which. */
async function settled(page: Page): Promise<{ state: string | undefined; text: string; shown: boolean }> {
  await expect.poll(async () => (await live(page)).state, { timeout: 15_000 }).toMatch(/^(open|stopped)$/);
  return live(page);
}

const STOPPED = { state: 'stopped', text: LIVE_STOPPED, shown: true };
const FOLLOWING = { state: 'open', text: '', shown: false };

describe('genpipe ui: a page refused its live updates', () => {
  it('says so in one line, on the runs list, a run page and the fleet page', { timeout: 90_000 }, async () => {
    // The runs list takes the one place.
    const runs = await browser.newPage();
    const runsProblems = watchPage(runs, server.url);
    await runs.goto(server.url);
    await runs.waitForSelector('html[data-ready=true]');
    expect(await settled(runs)).toEqual(FOLLOWING);
    const href = await runs.locator('tbody a').first().getAttribute('href');
    expect(href).toMatch(/^\/run\/0\/ended\//);

    // A run page and the fleet page are refused theirs, and say so.
    const run = await browser.newPage();
    await run.goto(server.url + href!);
    expect(await settled(run)).toEqual(STOPPED);
    expect(await run.getAttribute('html', 'data-ready')).toBeNull();
    const fleet = await browser.newPage();
    await fleet.goto(`${server.url}/fleet`);
    expect(await settled(fleet)).toEqual(STOPPED);
    expect(await fleet.getAttribute('html', 'data-ready')).toBeNull();
    // The runs list still follows, and says nothing.
    expect(await live(runs)).toEqual(FOLLOWING);
    // A second runs list is refused too.
    const second = await browser.newPage();
    await second.goto(server.url);
    expect(await settled(second)).toEqual(STOPPED);
    await second.close();

    // The runs list closed, the run page reloaded follows its run.
    await runs.close();
    await expect.poll(() => run.reload().then(() => settled(run)), { timeout: 15_000 }).toEqual(FOLLOWING);
    await run.waitForSelector('html[data-ready=true][data-status=completed]');
    await run.close();
    // And then the fleet page.
    await expect.poll(() => fleet.reload().then(() => settled(fleet)), { timeout: 15_000 }).toEqual(FOLLOWING);
    await fleet.waitForSelector('html[data-ready=true]');
    await fleet.close();
    expect(runsProblems).toEqual([]);
  });

  it('says it is reconnecting once genpipe ui stops', { timeout: 30_000 }, async () => {
    const runs = await browser.newPage();
    await runs.goto(server.url);
    await runs.waitForSelector('html[data-ready=true]');
    expect(await settled(runs)).toEqual(FOLLOWING);
    await server.close();
    await expect.poll(() => live(runs), { timeout: 15_000 }).toEqual({ state: 'reconnecting', text: LIVE_RECONNECTING, shown: true });
    // Still trying, a few seconds later: the browser goes on retrying a server that is gone.
    await runs.waitForTimeout(5_000);
    expect((await live(runs)).state).toBe('reconnecting');
    // genpipe ui started again on the same port: the page follows again by itself.
    await runs.evaluate(() => document.documentElement.removeAttribute('data-ready'));
    server = await startUiServer({ ...options, port: Number(new URL(server.url).port) });
    await expect.poll(() => live(runs), { timeout: 15_000 }).toEqual(FOLLOWING);
    await runs.waitForSelector('html[data-ready=true]');
    await runs.close();
  });

  it("the guide quotes the page's sentence", () => {
    expect(readFileSync(GUIDE, 'utf8')).toContain(`> ${LIVE_STOPPED}\n`);
  });
});
