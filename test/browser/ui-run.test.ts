/// <reference lib="dom" />
// A run's page of `genpipe ui` in real Chromium, against the emulator: progress and the spend chart
// move while the run runs; a remake is refused while the run holds its lock; then a reject in the
// gallery and a confirmed remake start `genpipe resume --retry rejected` as a child process, and
// the report of the run then equals what the emulator's ledger took.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { buildCostReport } from '../../src/report/cost-report.js';
import { startUiServer, type UiServer } from '../../src/ui/ui-server.js';
import { cleanTemps, HF_KEY, sheetsManifest, spentUsd, tempDir } from '../run/runner-helpers.js';
import { launchChromium, watchPage } from './chromium.js';

const IMAGES = new URL('../../docs/images/', import.meta.url).pathname;

let emu: Emulator;
let browser: Browser;
let out: string;
let server: UiServer;

beforeAll(async () => {
  browser = await launchChromium();
  emu = await startEmulator({ port: 0, timeScale: 0.1, log: () => {} });
  out = tempDir();
  server = await startUiServer({
    runDirs: [out],
    host: '127.0.0.1',
    port: 0,
    watchIntervalMs: 200,
    remake: { env: { ...process.env, GENPIPE_BASE_URL: emu.url, HF_KEY }, connectionArgs: [] },
  });
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
  await emu?.close();
  cleanTemps();
});

const io = (): CliIO => ({
  out: () => {},
  write: async () => {},
  err: () => {},
  env: { GENPIPE_BASE_URL: emu.url, HF_KEY },
  signal: new AbortController().signal,
});

const figures = (page: Page): Promise<{ points: number; done: number; committed: number }> =>
  page.evaluate(() => ({
    points: Number(document.getElementById('chart')!.dataset.points ?? 0),
    done: Number(document.querySelector('[data-step=sheets]')?.getAttribute('data-done') ?? 0),
    committed: Number(document.getElementById('chart')!.dataset.last ?? 0),
  }));

let runPageUrl = '';

describe("genpipe ui: a run's page", () => {
  it('shows progress and the spend chart moving while the run runs', { timeout: 120_000 }, async () => {
    const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
    const problems = watchPage(page, server.url);
    await page.goto(server.url);
    await page.waitForSelector('html[data-ready=true]');
    const finished = main(
      ['run', sheetsManifest(tempDir(), 6, { name: 'charted' }), '--out', out, '--quiet', '--concurrency', '1', '--budget', '1'],
      io(),
    );
    const link = page.locator('tr[data-status=running] a');
    await link.waitFor({ timeout: 30_000 });
    await link.click();
    await page.waitForSelector('html[data-ready=true][data-status=running]');
    runPageUrl = page.url();
    await page.waitForSelector('#chart canvas');
    const first = await figures(page);
    await expect.poll(async () => (await figures(page)).done, { timeout: 30_000 }).toBeGreaterThan(first.done);
    await expect.poll(async () => (await figures(page)).points, { timeout: 30_000 }).toBeGreaterThan(first.points);
    const later = await figures(page);
    expect(later.committed).toBeGreaterThan(first.committed);
    expect(await page.getAttribute('html', 'data-status')).toBe('running');
    // While the run holds its pipeline's lock, a remake is refused.
    const refused = await page.evaluate(async () => {
      const token = document.querySelector('meta[name=genpipe-token]')!.getAttribute('content')!;
      const r = await fetch('api/remake', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-genpipe-token': token },
        body: JSON.stringify({ selection: ['failed'], confirm: true }),
      });
      return { status: r.status, body: await r.text() };
    });
    expect(refused.status).toBe(409);
    expect(refused.body).toContain('holds the lock');
    await page.screenshot({ path: join(IMAGES, 'ui-run.png'), fullPage: true });
    expect(await finished).toBe(0);
    await page.waitForSelector('html[data-status=completed]', { timeout: 30_000 });
    expect(await page.locator('[data-step=sheets]').getAttribute('data-done')).toBe('6');
    expect(await page.locator('#money').textContent()).toContain('committed US$0.30 of US$1.00 budget');
    // The refused remake above is the one error the page logged.
    expect(problems).toEqual(['console: Failed to load resource: the server responded with a status of 409 (Conflict)']);
    await page.close();
  });

  it('a reject in the gallery and a confirmed remake: the report then equals the ledger', { timeout: 120_000 }, async () => {
    expect(runPageUrl).not.toBe('');
    const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
    const problems = watchPage(page, server.url);
    await page.goto(`${runPageUrl}gallery/`);
    await page.waitForSelector('html[data-ready=true]');
    await page.locator('[data-instance="sheets[seed=2]"] [data-action=reject]').click();
    await page.waitForSelector('[data-instance="sheets[seed=2]"][data-decision=rejected]');
    await page.goto(runPageUrl);
    await page.waitForSelector('html[data-ready=true][data-status=completed]');
    const before = spentUsd(emu);
    await page.click('#remake-rejected');
    await expect.poll(() => page.locator('#estimate').textContent()).toContain('1 instance: US$0.05');
    // Nothing is spent until the confirmation.
    expect(spentUsd(emu)).toBe(before);
    await page.click('#confirm');
    await page.waitForSelector('#remake-result[data-started=true]', { timeout: 10_000 });
    const runs = (await (await fetch(`${server.url}/api/runs`)).json()) as { dir: string; pipeline: string }[];
    const dir = runs.find((r) => r.pipeline === 'charted')!.dir;
    // The resume runs on its own, past the ui; its journal tells when it ended.
    const finishes = (): number =>
      readFileSync(join(dir, 'journal.jsonl'), 'utf8')
        .split('\n')
        .filter((l) => l.includes('"run_finished"')).length;
    await expect.poll(finishes, { timeout: 60_000 }).toBe(2);
    // The page follows: the remade instance's US$0.05 on top of the first US$0.30.
    await expect.poll(() => page.locator('#money').textContent(), { timeout: 30_000 }).toContain('net US$0.35');
    const report = await buildCostReport(dir);
    expect(report.total.unknownUsd).toBe(0);
    expect(report.total.netUsd).toBe(spentUsd(emu));
    expect(spentUsd(emu)).toBe(0.35);
    expect(readFileSync(join(dir, 'ui-remake.log'), 'utf8')).not.toContain('rror');
    expect(problems).toEqual([]);
    await page.close();
  });
});
