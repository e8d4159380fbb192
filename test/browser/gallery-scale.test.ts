/// <reference lib="dom" />
// Galleries that scale to big runs: gallery.html holds an index of the cells, and the cells
// come from data files beside it (gallery-data/<step>.<page>.js, classic scripts, the only files a
// page opened from file:// may read), a page of them at a time. In Chromium, from file:// and from
// `genpipe review`: a run of 2,500 cells opens with only the data files its first screen needs,
// pages to the last cell, and a hostile text in a data file (a failure's error, an axis label, a
// headline) shows as text and never runs.
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import type { Cell, GalleryData } from '../../src/gallery/gallery-data.js';
import { galleryFiles } from '../../src/gallery/gallery-page.js';
import { startReviewServer, type ReviewServer } from '../../src/review/review-server.js';
import { readGalleryDir, writeGalleryFiles } from '../gallery/read-gallery.js';
import { startRewritingProxy, type RewritingProxy } from '../run/rewriting-proxy.js';
import { cleanTemps, findRunDir, HF_KEY, tempDir } from '../run/runner-helpers.js';
import { launchChromium, watchPage } from './chromium.js';

/** Would run script if any of it were parsed as HTML or JavaScript. */
const HOSTILE = `</script><script>window.__pwned=1</script><img src=x onerror="window.__pwned=2"> \u2028 \u2029 '); window.__pwned=3; ('`;
const SEEDS = 50;
const VARIATIONS = 50;
const LAST = `sheets[seed=${SEEDS},variation_index=${VARIATIONS - 1}]`;

let emu: Emulator;
let proxy: RewritingProxy;
let browser: Browser;
let runDir: string;

beforeAll(async () => {
  browser = await launchChromium();
  // One sheet in twenty fails, its error rewritten to the hostile text on the way.
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {}, modelRates: { 'character-sheet': { failureRate: 0.05 } } });
  proxy = await startRewritingProxy(emu.url, () => HOSTILE);
  const dir = tempDir();
  const manifest = join(dir, 'scale.yaml');
  writeFileSync(
    manifest,
    `version: 1
name: scale
steps:
  sheets:
    model: character-sheet
    matrix:
      seed: { range: { from: 1, to: ${SEEDS} } }
      variation_index: { range: { from: 0, to: ${VARIATIONS - 1} } }
    input: { tier: cats, seed: "{{ seed }}", variation_index: "{{ variation_index }}" }
`,
  );
  const out = tempDir();
  const stderr: string[] = [];
  const io: CliIO = {
    out: () => {},
    write: async () => {},
    err: (t) => stderr.push(t),
    env: { GENPIPE_BASE_URL: proxy.url, HF_KEY },
    signal: new AbortController().signal,
  };
  const code = await main(['run', manifest, '--out', out, '--rate', '100000', '--concurrency', '32', '--quiet', '--yes'], io);
  expect([0, 1], stderr.join('\n')).toContain(code);
  runDir = findRunDir(out, 'scale');
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await proxy?.close();
  await emu?.close();
  cleanTemps();
});

const shownIds = (page: Page): Promise<string[]> =>
  page.evaluate(() => Array.from(document.querySelectorAll('#app [data-instance]')).map((c) => (c as HTMLElement).dataset.instance ?? ''));

/** The data files the page asked for, in order. */
function dataRequests(page: Page): string[] {
  const asked: string[] = [];
  page.on('request', (request) => {
    const match = /gallery-data\/([^/?#]+)$/.exec(request.url());
    if (match) asked.push(match[1] as string);
  });
  return asked;
}

/** Pages rows and columns to their last page, waiting for each screen to be drawn. */
async function toLastPage(page: Page): Promise<void> {
  for (const pager of ['rows', 'columns']) {
    for (;;) {
      const next = page.locator(`[data-pager="${pager}"] button:last-child`);
      if ((await next.count()) === 0 || (await next.isDisabled())) break;
      const before = await page.textContent(`[data-pager="${pager}"] span`);
      await next.click();
      await page.waitForFunction(([p, text]) => document.querySelector(`[data-pager="${p}"] span`)?.textContent !== text, [
        pager,
        before,
      ] as const);
    }
  }
}

/** Checks what a failed cell on screen shows: the hostile text, as text; and that none of it ran. */
async function expectHostileInert(page: Page): Promise<void> {
  const failed = page.locator('[data-status=failed] .error');
  expect(await failed.count()).toBeGreaterThan(0);
  expect(await failed.first().textContent()).toBe(HOSTILE);
  expect(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
  expect(await page.locator('#app script, #app img[src=x]').count()).toBe(0);
}

describe('a gallery of 2,500 cells', () => {
  it('is an index page and three data files of at most 1,000 cells', () => {
    const gallery = readGalleryDir(runDir);
    expect(gallery.steps[0]?.count).toBe(SEEDS * VARIATIONS);
    expect(gallery.steps[0]?.pages.map((p) => [p.file, p.count])).toEqual([
      ['gallery-data/sheets.0001.js', 1_000],
      ['gallery-data/sheets.0002.js', 1_000],
      ['gallery-data/sheets.0003.js', 500],
    ]);
    const failed = gallery.steps[0]?.cells.filter((c) => c.status === 'failed') ?? [];
    // About one in twenty (a failure is final, not retried): some on every screen of 500.
    expect(failed.length).toBeGreaterThan(50);
    expect(failed.every((c) => c.error === HOSTILE)).toBe(true);
  });

  it('from file://: the first screen loads only the data files it shows; the pagers reach the last cell', { timeout: 60_000 }, async () => {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    const problems = watchPage(page);
    const asked = dataRequests(page);
    await page.goto(`file://${join(runDir, 'gallery.html')}`);
    await page.waitForSelector('html[data-ready=true]');
    // 25 seeds x 20 variations: seeds 1-25 are the first 1,250 cells, in two data files.
    expect(await shownIds(page)).toHaveLength(25 * 20);
    expect(asked).toEqual(['sheets.0001.js', 'sheets.0002.js']);
    expect(await page.textContent('[data-step=sheets] .counts')).toMatch(/^2500 of 2500 instances: /);
    await expectHostileInert(page);
    await toLastPage(page);
    const ids = await shownIds(page);
    expect(ids).toContain(LAST);
    expect(ids).toHaveLength(25 * 10);
    expect(asked).toContain('sheets.0003.js');
    expect(new Set(asked).size).toBe(asked.length);
    await expect.poll(() => page.locator(`[data-instance="${LAST.replace(/"/g, '\\"')}"] .id`).textContent()).toContain(LAST);
    expect(problems).toEqual([]);
    await page.close();
  });

  describe('from genpipe review', () => {
    let server: ReviewServer;
    beforeAll(async () => {
      server = await startReviewServer(runDir, { host: '127.0.0.1', port: 0 });
    }, 60_000);
    afterAll(async () => server?.close());

    it(
      'serves the data files; the last cell is reached, approved, counted, and found approved after a reload',
      { timeout: 60_000 },
      async () => {
        const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
        const problems = watchPage(page, server.url);
        const asked = dataRequests(page);
        await page.goto(server.url);
        await page.waitForSelector('html[data-ready=true]');
        expect(asked).toEqual(['sheets.0001.js', 'sheets.0002.js']);
        await expectHostileInert(page);
        await toLastPage(page);
        const last = page.locator(`[data-instance="${LAST}"]`);
        await last.locator('[data-action=approve]').click();
        await page.waitForSelector(`[data-instance="${LAST}"][data-decision=approved]`);
        expect(await page.locator('#review-counts').textContent()).toBe(
          `1 approved, 0 rejected, 0 starred, ${SEEDS * VARIATIONS - 1} unreviewed of ${SEEDS * VARIATIONS}`,
        );
        await page.reload();
        await page.waitForSelector('html[data-ready=true]');
        // Counted from review.json before its cell is loaded (its place found from its id).
        expect(await page.locator('#review-counts').textContent()).toBe(
          `1 approved, 0 rejected, 0 starred, ${SEEDS * VARIATIONS - 1} unreviewed of ${SEEDS * VARIATIONS}`,
        );
        await page.locator('[data-step=sheets] select[data-control=status]').selectOption('approved');
        await page.waitForSelector(`[data-instance="${LAST}"][data-decision=approved]`);
        expect(await shownIds(page)).toEqual([LAST]);
        expect(problems).toEqual([]);
        await page.close();
      },
    );

    it('answers a data file only by its exact name, and only to its own Host', async () => {
      const served = await fetch(`${server.url}/gallery-data/sheets.0003.js`);
      expect(served.status).toBe(200);
      expect(served.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
      expect(await served.text()).toMatch(/^window\.__genpipeCells\(0,2,/);
      for (const path of [
        '/gallery-data/sheets.0004.js',
        '/gallery-data/%2e%2e/plan.json',
        '/gallery-data/..%2fjournal.jsonl',
        '/gallery-data/sheets.0001.js%00',
        '/gallery-data/',
        '/gallery-data/SHEETS.0001.JS',
        '/gallery-data/sheets.0001.js/..%2f..%2fplan.json',
      ])
        expect((await fetch(`${server.url}${path}`)).status, path).toBe(404);
      const port = Number(new URL(server.url).port);
      const foreign = await new Promise<string>((resolve, reject) => {
        const socket = connect(port, '127.0.0.1', () =>
          socket.write(`GET /gallery-data/sheets.0001.js HTTP/1.1\r\nHost: evil.test:${port}\r\nConnection: close\r\n\r\n`),
        );
        let text = '';
        socket.setEncoding('latin1');
        socket.on('data', (chunk: string) => (text += chunk));
        socket.on('error', reject);
        socket.on('end', () => resolve(text));
      });
      expect(foreign).toMatch(/^HTTP\/1\.1 421 /);
      expect(foreign).not.toContain('__genpipeCells');
    });
  });
});

describe('hostile text in a data file', () => {
  it(
    'a cell id, an axis label, an error and a headline that would close the script show as text and run nothing',
    { timeout: 30_000 },
    async () => {
      const labels = ['plain', HOSTILE];
      const cells: Cell[] = labels.map((label, i) => ({
        id: `bad[k=${JSON.stringify(label)}]`,
        values: { k: label },
        status: i === 0 ? 'completed' : 'failed',
        error: i === 0 ? undefined : HOSTILE,
        headline: HOSTILE,
        files: [],
      }));
      const data: GalleryData = {
        pipeline: 'hostile',
        runId: 'r1',
        writtenAt: new Date(0).toISOString(),
        steps: [
          {
            id: 'bad',
            model: 'character-sheet',
            forEach: null,
            planned: 2,
            axes: [{ name: 'k', values: labels }],
            layout: { rows: 'k', cols: undefined, pages: [] },
            cells,
          },
        ],
      };
      const dir = tempDir();
      writeGalleryFiles(dir, galleryFiles(data));
      const page = await browser.newPage();
      const problems = watchPage(page);
      await page.goto(`file://${join(dir, 'gallery.html')}`);
      await page.waitForSelector('html[data-ready=true]');
      expect(await page.locator('[data-status=failed] .error').textContent()).toBe(HOSTILE);
      expect(await page.locator('[data-status=failed] .headline').textContent()).toBe(HOSTILE);
      expect(await page.locator('tbody th[scope=row]').allTextContents()).toEqual(['k=plain', `k=${HOSTILE}`]);
      expect(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
      expect(await page.locator('#app script, #app img[src=x]').count()).toBe(0);
      expect(problems).toEqual([]);
      await page.close();
    },
  );

  it(
    'without its data files, or with one of another write, the page shows its grid and counts and says which file',
    { timeout: 30_000 },
    async () => {
      const alone = tempDir();
      copyFileSync(join(runDir, 'gallery.html'), join(alone, 'gallery.html'));
      const page = await browser.newPage();
      await page.goto(`file://${join(alone, 'gallery.html')}`);
      await page.waitForSelector('html[data-ready=true]');
      expect(await page.textContent('#notice')).toMatch(
        /^Could not load gallery-data\/sheets\.000[12]\.js: keep the gallery-data folder beside gallery\.html/,
      );
      expect(await page.textContent('[data-step=sheets] .counts')).toMatch(/^2500 of 2500 instances: /);
      expect(await page.locator('[data-step=sheets] tbody th[scope=row]').count()).toBe(25);
      expect(await shownIds(page)).toEqual([]);
      // A data file of another write (its signature differs from the page's): not shown, said.
      const other = tempDir();
      const files = galleryFiles({
        pipeline: 'p',
        runId: 'r',
        writtenAt: 'w',
        steps: [
          {
            id: 'x',
            model: 'm',
            forEach: null,
            planned: 1,
            axes: [],
            layout: { rows: undefined, cols: undefined, pages: [] },
            cells: [{ id: 'x', values: {}, status: 'completed', files: [] }],
          },
        ],
      });
      writeGalleryFiles(other, files);
      const data = join(other, 'gallery-data', 'x.0001.js');
      writeFileSync(
        data,
        readFileSync(data, 'utf8').replace(/^window\.__genpipeCells\(0,0,"[^"]+"/, 'window.__genpipeCells(0,0,"another"'),
      );
      await page.goto(`file://${join(other, 'gallery.html')}`);
      await page.waitForSelector('html[data-ready=true]');
      expect(await page.textContent('#notice')).toBe(
        'The gallery was rewritten after this page was opened: reload it (gallery-data/x.0001.js is of another write).',
      );
      expect(await shownIds(page)).toEqual([]);
      await page.close();
    },
  );
});
