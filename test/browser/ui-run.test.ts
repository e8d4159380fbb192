/// <reference lib="dom" />
// A run's page of `genpipe ui` in real Chromium, against the emulator: progress, the ETA and the
// spend chart move while the run runs; a remake is refused while the run holds its lock; the time
// waited on a 429 is the report's; then a reject in the gallery and a confirmed remake start
// `genpipe resume --retry rejected` as a child process, and the report of the run then equals what
// the emulator's ledger took. A run with nsfw re-rolls, opened by a ui started after it ended, shows
// its whole spend curve from the journal, and committed (the budget's measure) below what was charged.
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { buildCostReport, committedUsd } from '../../src/report/cost-report.js';
import { throttledSentence } from '../../src/report/render.js';
import { formatUsd } from '../../src/util/format-usd.js';
import { STALE_TOKEN } from '../../src/ui/access.js';
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

/** Rejects `instance` in the run's gallery, then opens the run's page, completed. */
async function rejectInGallery(page: Page, runUrl: string, instance: string): Promise<void> {
  await page.goto(`${runUrl}gallery/`);
  await page.waitForSelector('html[data-ready=true]');
  await page.locator(`[data-instance="${instance}"] [data-action=reject]`).click();
  await page.waitForSelector(`[data-instance="${instance}"][data-decision=rejected]`);
  await page.goto(runUrl);
  await page.waitForSelector('html[data-ready=true][data-status=completed]');
}

/** Asks the run's page for the remake of its rejected instances, and waits for the estimate to say `estimate`. */
async function askRemake(page: Page, estimate: string): Promise<void> {
  await page.click('#remake-rejected');
  await expect.poll(() => page.locator('#estimate').textContent()).toContain(estimate);
}

let runPageUrl = '';

describe("genpipe ui: a run's page", () => {
  it('shows progress and the spend chart moving while the run runs', { timeout: 120_000 }, async () => {
    const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
    const problems = watchPage(page, server.url);
    await page.goto(server.url);
    await page.waitForSelector('html[data-ready=true]');
    // The first submit is answered 429 (Retry-After 1 s): the run waits it out, and its report says how long.
    emu.forceFaults('submit', 'rate_429');
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
    // Committed grows as the run sends.
    await expect.poll(async () => (await figures(page)).committed, { timeout: 30_000 }).toBeGreaterThan(first.committed);
    expect(await page.getAttribute('html', 'data-status')).toBe('running');
    // The ETA while it runs, as progress says it (etaText: 4s, 1m05s), once an instance has ended.
    await expect.poll(() => page.locator('#eta').getAttribute('data-eta'), { timeout: 30_000 }).toMatch(/^(\d+s|\d+m\d\ds|\d+h\d\dm)$/);
    expect(await page.locator('#eta').textContent()).toMatch(/^ETA \S+: [1-6]\/6 ended(, [\d.]+ a minute)?\.$/);
    // The time waited on throttling is the report's: not known until this start ends.
    expect(await page.locator('#throttling').textContent()).toContain('in the report, once this start ends');
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
    expect(await page.locator('#eta').textContent()).toBe('');
    // What report.json and report.md say of the 429's wait, the page says.
    const dir = join(out, 'charted', runPageUrl.split('/').filter(Boolean).at(-1)!);
    const reportJson = JSON.parse(readFileSync(join(dir, 'report.json'), 'utf8')) as { throttledMs?: number };
    expect(reportJson.throttledMs).toBeGreaterThan(0);
    const sentence = throttledSentence(reportJson.throttledMs!);
    expect(readFileSync(join(dir, 'report.md'), 'utf8')).toContain(sentence);
    await expect.poll(() => page.locator('#throttling').textContent(), { timeout: 10_000 }).toBe(sentence);
    expect(await page.locator('#throttling').getAttribute('data-ms')).toBe(String(reportJson.throttledMs));
    // The refused remake above is the one error the page logged.
    expect(problems).toEqual(['console: Failed to load resource: the server responded with a status of 409 (Conflict)']);
    await page.close();
  });

  it('a reject in the gallery and a confirmed remake: the report then equals the ledger', { timeout: 120_000 }, async () => {
    expect(runPageUrl).not.toBe('');
    const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
    const problems = watchPage(page, server.url);
    await rejectInGallery(page, runPageUrl, 'sheets[seed=2]');
    const before = spentUsd(emu);
    await askRemake(page, '1 instance: US$0.05');
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
    // The remake is a --retry round that re-rolled the rejected instance with a new seed: the report's re-roll count.
    await expect.poll(() => page.locator('#retries').getAttribute('data-rounds'), { timeout: 10_000 }).toBe('1');
    expect(report.total.rerolls).toBe(1);
    expect(await page.locator('#retries').getAttribute('data-rerolls')).toBe(String(report.total.rerolls));
    expect(await page.locator('#retries').textContent()).toBe('Retries: 1 re-rolled, 0 retried (1 --retry round), 0 unknown resubmitted.');
    expect(report.total.unknownUsd).toBe(0);
    expect(report.total.netUsd).toBe(spentUsd(emu));
    expect(spentUsd(emu)).toBe(0.35);
    expect(readFileSync(join(dir, 'ui-remake.log'), 'utf8')).not.toContain('rror');
    expect(problems).toEqual([]);
    await page.close();
  });

  it(
    'a page opened before genpipe ui restarted: its remake is refused with why, nothing is spent, and after a reload it starts',
    { timeout: 120_000 },
    async () => {
      const runs = tempDir();
      expect(await main(['run', sheetsManifest(tempDir(), 3, { name: 'restarted' }), '--out', runs, '--quiet'], io())).toBe(0);
      const pipelineDir = join(runs, 'restarted');
      const runId = readdirSync(pipelineDir).find((name) => !name.startsWith('.'))!;
      const dir = join(pipelineDir, runId);
      // The sheet of seed 2 is rejected in the gallery, below.
      const options = {
        runDirs: [runs],
        host: '127.0.0.1',
        watchIntervalMs: 200,
        remake: { env: { ...process.env, GENPIPE_BASE_URL: emu.url, HF_KEY }, connectionArgs: [] },
      };
      const first = await startUiServer({ ...options, port: 0 });
      const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
      const problems = watchPage(page, first.url);
      let second: UiServer | undefined;
      try {
        const runUrl = `${first.url}/run/0/restarted/${runId}/`;
        await rejectInGallery(page, runUrl, 'sheets[seed=2]');
        await askRemake(page, '1 instance: US$0.05');
        // genpipe ui restarts on the same address while the page stays open: a new start, a new token.
        await first.close();
        second = await startUiServer({ ...options, port: Number(new URL(first.url).port) });
        const before = spentUsd(emu);
        await page.click('#confirm');
        await page.waitForSelector('#remake-result[data-started=false]', { timeout: 10_000 });
        expect(await page.locator('#remake-result').textContent()).toBe(`Not started: ${STALE_TOKEN}.`);
        expect(spentUsd(emu)).toBe(before);
        expect(existsSync(join(dir, 'ui-remake.log'))).toBe(false);
        // As the sentence says: after a reload, the same remake starts.
        await page.goto(runUrl);
        await page.waitForSelector('html[data-ready=true][data-status=completed]');
        await askRemake(page, '1 instance: US$0.05');
        await page.click('#confirm');
        await page.waitForSelector('#remake-result[data-started=true]', { timeout: 10_000 });
        const finishes = (): number =>
          readFileSync(join(dir, 'journal.jsonl'), 'utf8')
            .split('\n')
            .filter((l) => l.includes('"run_finished"')).length;
        await expect.poll(finishes, { timeout: 60_000 }).toBe(2);
        expect(spentUsd(emu)).toBeCloseTo(before + 0.05, 6);
        expect((await buildCostReport(dir)).total.netUsd).toBe(0.2);
        // The one refusal is the one error the page logged, besides its live stream cut by the restart.
        expect(problems.filter((p) => !p.includes('ERR_') && !p.includes('api/events'))).toEqual([
          'console: Failed to load resource: the server responded with a status of 403 (Forbidden)',
        ]);
      } finally {
        await page.close();
        await second?.close();
        await first.close().catch(() => {});
      }
    },
  );

  it('a run opened after it ended: its whole spend curve, its re-rolls, and committed below charged', { timeout: 120_000 }, async () => {
    // Its own manifest: one sheet's brief asks the emulator for nsfw, re-rolled with a new seed (3 times), then left nsfw.
    const runs = tempDir();
    const manifest = join(tempDir(), 'rerolled.yaml');
    const step = (name: string, count: number, brief: string): string =>
      `  ${name}:\n    model: character-sheet\n    on_nsfw: reroll\n    matrix:\n      seed: { range: { from: 1, to: ${count} } }\n    input:\n      tier: cats\n      seed: "{{ seed }}"\n      brief: ${JSON.stringify(brief)}\n`;
    writeFileSync(
      manifest,
      `version: 1\nname: rerolled\nsteps:\n${step('good', 4, 'A mascot')}${step('bad', 1, 'A mascot [emulator:nsfw]')}`,
    );
    expect(await main(['run', manifest, '--out', runs, '--quiet', '--concurrency', '1'], io())).not.toBe(2);
    const pipelineDir = join(runs, 'rerolled');
    const runId = readdirSync(pipelineDir).find((name) => !name.startsWith('.'))!;
    const dir = join(pipelineDir, runId);
    const report = await buildCostReport(dir);
    expect(report.total.rerolls).toBeGreaterThan(0);
    // Some ended nsfw after their last re-roll: refunded, so committed is below charged.
    expect(report.total.refundedUsd).toBeGreaterThan(0);
    // A ui started after the run ended: it never watched the run.
    const late = await startUiServer({ runDirs: [runs], host: '127.0.0.1', port: 0, watchIntervalMs: 200 });
    const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
    const problems = watchPage(page, late.url);
    try {
      await page.goto(`${late.url}/run/0/rerolled/${runId}/`);
      await page.waitForSelector('html[data-ready=true]');
      await page.waitForSelector('#chart canvas');
      const money = (await page.locator('#money').textContent())!;
      expect(money).toContain(`committed ${formatUsd(committedUsd(report.total))};`);
      expect(money).toContain(`charged ${formatUsd(report.total.estimatedUsd)},`);
      expect(committedUsd(report.total)).toBeLessThan(report.total.estimatedUsd);
      // The runs list says the same committed figure, apart from charged.
      const listed = (await (await fetch(`${late.url}/api/runs`)).json()) as {
        runId: string;
        text: { committed: string; charged: string };
      }[];
      expect(listed.find((r) => r.runId === runId)?.text).toMatchObject({
        committed: formatUsd(committedUsd(report.total)),
        charged: formatUsd(report.total.estimatedUsd),
      });
      // The chart: a point per change of the money since the run started, from the journal's times.
      const chart = await page.evaluate(() => ({ ...document.getElementById('chart')!.dataset }));
      const started = readFileSync(join(dir, 'journal.jsonl'), 'utf8')
        .split('\n')
        .map((line) => line.slice(9))
        .find((json) => json.includes('"run_started"'))!;
      expect(Number(chart.first)).toBe((JSON.parse(started) as { at: number }).at / 1000);
      expect(Number(chart.points)).toBeGreaterThan(6);
      expect(Number(chart.last)).toBe(committedUsd(report.total));
      expect(Number(chart.lastCharged)).toBe(report.total.estimatedUsd);
      expect(Number(chart.lastNet)).toBe(report.total.netUsd);
      expect(await page.locator('#retries').getAttribute('data-rerolls')).toBe(String(report.total.rerolls));
      expect(await page.locator('#throttling').textContent()).toBe('No request waited on throttling.');
      expect(problems).toEqual([]);
    } finally {
      await page.close();
      await late.close();
    }
  });
});
