/// <reference lib="dom" />
// gallery.html in a real browser: the page a run leaves opens from file://
// with no network request and no console error, every completed image renders, a failed cell shows
// its error, the grid follows the sweep's axes, and a screenshot is taken as a visual reference.
import { copyFileSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import type { GalleryData } from '../../src/gallery/gallery-data.js';
import { galleryFiles } from '../../src/gallery/gallery-page.js';
import { readGalleryDir, writeGalleryFiles } from '../gallery/read-gallery.js';
import { cleanTemps, findRunDir, HF_KEY, tempDir } from '../run/runner-helpers.js';
import { launchChromium, watchPage } from './chromium.js';

let emu: Emulator;
let browser: Browser;
let runDir: string;

const REFERENCE = new URL('./reference/gallery.png', import.meta.url).pathname;

beforeAll(async () => {
  browser = await launchChromium();
  // Sheets complete; every marketing image fails, so both kinds of cell are on the page.
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {}, modelRates: { 'marketing-image': { failureRate: 1 } } });
  const dir = tempDir();
  const manifest = join(dir, 'look.yaml');
  writeFileSync(
    manifest,
    `version: 1
name: look
steps:
  sheets:
    model: character-sheet
    matrix:
      seed: { range: { from: 1, to: 3 } }
      variation_index: { range: { from: 0, to: 1 } }
    input: { tier: cats, seed: "{{ seed }}", variation_index: "{{ variation_index }}" }
  ads:
    model: marketing-image
    matrix:
      quality: [low, high]
    input: { prompt: A poster, quality: "{{ quality }}" }
`,
  );
  const out = tempDir();
  const io: CliIO = {
    out: () => {},
    write: async () => {},
    err: () => {},
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY },
    signal: new AbortController().signal,
  };
  expect(await main(['run', manifest, '--out', out, '--rate', '1000', '--quiet'], io)).toBe(1);
  runDir = findRunDir(out, 'look');
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await emu?.close();
  cleanTemps();
});

describe('gallery.html', () => {
  it('opens from file:// offline: every completed image renders, failed cells show their error', { timeout: 30_000 }, async () => {
    const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
    const problems = watchPage(page);
    await page.goto(`file://${join(runDir, 'gallery.html')}`);
    await page.waitForSelector('html[data-ready=true]');
    await page.waitForFunction(() => Array.from(document.images).every((image) => image.complete));
    const completed = page.locator('[data-step=sheets] [data-status=completed]');
    expect(await completed.count()).toBe(6);
    const widths = await page.$$eval('[data-step=sheets] [data-status=completed] img', (images) =>
      images.map((image) => (image as HTMLImageElement).naturalWidth),
    );
    expect(widths).toHaveLength(6);
    for (const width of widths) expect(width).toBeGreaterThan(0);
    // The emulator's sheets are 160 x 90: within a thumbnail's 512 px, so the page shows them as
    // they are (test/gallery/thumbnails.test.ts has the larger images that get thumbnails).
    const sources = await page.$$eval('[data-step=sheets] img', (images) => images.map((image) => image.getAttribute('src')));
    for (const src of sources) expect(src).toMatch(/^outputs\/sheets\/.+\.png$/);
    const failed = page.locator('[data-step=ads] [data-status=failed]');
    expect(await failed.count()).toBe(2);
    for (const text of await failed.locator('.error').allTextContents()) expect(text.length).toBeGreaterThan(5);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('lays the sheets out seed × variation_index, and the page can swap them', { timeout: 30_000 }, async () => {
    const page = await browser.newPage();
    await page.goto(`file://${join(runDir, 'gallery.html')}`);
    await page.waitForSelector('html[data-ready=true]');
    const section = page.locator('[data-step=sheets]');
    expect(await section.locator('tbody th').allTextContents()).toEqual(['seed=1', 'seed=2', 'seed=3']);
    expect(await section.locator('thead th[scope=col]').allTextContents()).toEqual(['variation_index=0', 'variation_index=1']);
    await section.locator('select[data-control=rows]').selectOption('variation_index');
    expect(await page.locator('[data-step=sheets] tbody th').allTextContents()).toEqual(['variation_index=0', 'variation_index=1']);
    await page.close();
  });

  it('a screenshot of it is kept under test/ as the visual reference (UPDATE_REFERENCE=1 rewrites it)', { timeout: 30_000 }, async () => {
    const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
    await page.goto(`file://${join(runDir, 'gallery.html')}`);
    await page.waitForSelector('html[data-ready=true]');
    await page.waitForFunction(() => Array.from(document.images).every((image) => image.complete));
    const shot = join(tempDir(), 'gallery.png');
    await page.screenshot({ path: shot, fullPage: true });
    const png = readFileSync(shot);
    expect(png.subarray(1, 4).toString()).toBe('PNG');
    expect(png.readUInt32BE(16)).toBe(1100);
    if (process.env.UPDATE_REFERENCE === '1') {
      mkdirSync(join(REFERENCE, '..'), { recursive: true });
      copyFileSync(shot, REFERENCE);
      copyFileSync(shot, new URL('../../docs/gallery.png', import.meta.url).pathname);
    }
    expect(existsSync(REFERENCE) && statSync(REFERENCE).size > 10_000).toBe(true);
    await page.close();
  });

  it('genpipe report rewrites it from the journal', { timeout: 30_000 }, async () => {
    const before = statSync(join(runDir, 'gallery.html')).mtimeMs;
    const io: CliIO = { out: () => {}, write: async () => {}, err: () => {}, env: {}, signal: new AbortController().signal };
    expect(await main(['report', runDir], io)).toBe(0);
    expect(statSync(join(runDir, 'gallery.html')).mtimeMs).toBeGreaterThan(before);
    const ids = readGalleryDir(runDir).steps.flatMap((step) => step.cells.map((cell) => cell.id));
    expect(ids).toContain('sheets[seed=3,variation_index=1]');
    expect(ids).toHaveLength(8);
    expect(existsSync(join(runDir, 'thumbs'))).toBe(false);
  });
});

describe('gallery.html paging', () => {
  it('shows at most 25 rows × 20 columns of a big grid, with pagers that move over both', { timeout: 30_000 }, async () => {
    // 30 seeds × 45 variations: three column pages (20, 20, 5) and two row pages (25, 5).
    const seeds = Array.from({ length: 30 }, (_, i) => String(i + 1));
    const variations = Array.from({ length: 45 }, (_, i) => String(i));
    const cells = seeds.flatMap((seed) =>
      variations.map((v) => ({
        id: `sheets[seed=${seed},variation_index=${v}]`,
        values: { seed, variation_index: v },
        status: 'failed' as const,
        error: 'made up',
        files: [],
      })),
    );
    const data: GalleryData = {
      pipeline: 'paging',
      runId: 'r1',
      writtenAt: new Date(0).toISOString(),
      steps: [
        {
          id: 'sheets',
          model: 'character-sheet',
          forEach: null,
          planned: cells.length,
          axes: [
            { name: 'seed', values: seeds },
            { name: 'variation_index', values: variations },
          ],
          layout: { rows: 'seed', cols: 'variation_index', pages: [] },
          cells,
        },
      ],
    };
    const dir = tempDir();
    writeGalleryFiles(dir, galleryFiles(data));
    const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
    const problems = watchPage(page);
    await page.goto(`file://${join(dir, 'gallery.html')}`);
    await page.waitForFunction(() => document.documentElement.dataset.ready === 'true');
    const shown = () =>
      page.evaluate(() => Array.from(document.querySelectorAll('#app [data-instance]')).map((c) => (c as HTMLElement).dataset.instance));
    let ids = await shown();
    expect(ids).toHaveLength(25 * 20);
    expect(ids).toContain('sheets[seed=1,variation_index=19]');
    expect(ids).not.toContain('sheets[seed=1,variation_index=20]');
    expect(ids).not.toContain('sheets[seed=26,variation_index=0]');
    await page.click('[data-pager="columns"] button:last-child');
    await page.click('[data-pager="columns"] button:last-child');
    ids = await shown();
    expect(ids).toHaveLength(25 * 5);
    expect(ids).toContain('sheets[seed=1,variation_index=44]');
    expect(await page.textContent('[data-pager="columns"] span')).toContain('41–45 of 45');
    await page.click('[data-pager="rows"] button:last-child');
    ids = await shown();
    expect(ids).toEqual(expect.arrayContaining(['sheets[seed=30,variation_index=40]']));
    expect(ids).toHaveLength(5 * 5);
    expect(problems).toEqual([]);
    await page.close();
  });
});
