/// <reference lib="dom" />
// The gallery shows what it says, in Chromium from file://: with three and with four sweep axes
// (with and without a manifest `gallery:` setting), the first render shows exactly the page each
// page selector names, and each change of page shows exactly that page's cells. A DoP clip's cell
// says "video" and has a poster: the "video" placeholder for a file ffmpeg cannot read (the
// emulator's clips are not playable), its first frame once the file is a real video.
import { copyFileSync, existsSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Locator, Page } from 'playwright-core';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { posterPathOf } from '../../src/gallery/gallery-data.js';
import { findFfmpeg } from '../../src/gallery/thumbnails.js';
import { rewriteGallery } from '../../src/gallery/write-gallery.js';
import { realVideo } from '../gallery/videos.js';
import { cleanTemps, findRunDir, HF_KEY, tempDir } from '../run/runner-helpers.js';
import { launchChromium, watchPage } from './chromium.js';

let emu: Emulator;
let browser: Browser;
let runDir: string;

const SCREENSHOT = process.env.GENPIPE_GALLERY_SCREENSHOT;

beforeAll(async () => {
  browser = await launchChromium();
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  const dir = tempDir();
  writeFileSync(
    join(dir, 'pages.yaml'),
    `version: 1
name: pages
defaults:
  polling: { initial_ms: 100, max_ms: 200 }
prices: { dop: 0.25 }
steps:
  sheets:
    model: character-sheet
    matrix:
      tier: [frogs, capybaras]
      seed: { range: { from: 1, to: 4 } }
      variation_index: [0, 1]
    input: { tier: "{{ tier }}", seed: "{{ seed }}", variation_index: "{{ variation_index }}", brief: "A {{ tier }} sheet" }
  quad:
    model: character-sheet
    matrix:
      tier: [frogs, capybaras]
      seed: { range: { from: 1, to: 3 } }
      variation_index: [0, 1]
      brief: [calm, loud]
    input: { tier: "{{ tier }}", seed: "{{ seed }}", variation_index: "{{ variation_index }}", brief: "{{ brief }}" }
  chosen:
    model: character-sheet
    gallery: { rows: tier, cols: variation_index, pages: [seed] }
    matrix:
      tier: [frogs, capybaras]
      seed: { range: { from: 1, to: 3 } }
      variation_index: [0, 1]
    input: { tier: "{{ tier }}", seed: "{{ seed }}", variation_index: "{{ variation_index }}" }
  still:
    model: character-sheet
    input: { tier: frogs, seed: 5 }
  clip:
    model: dop
    for_each: still
    input:
      model: dop-turbo
      prompt: The frog waves at the camera
      input_images:
        - type: image_url
          image_url: "{{ upstream.outputs.images[0].url }}"
`,
  );
  const out = tempDir();
  const stderr: string[] = [];
  const io: CliIO = {
    out: () => {},
    write: async () => {},
    err: (t) => stderr.push(t),
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY },
    signal: new AbortController().signal,
  };
  expect(await main(['run', join(dir, 'pages.yaml'), '--out', out, '--rate', '1000', '--quiet'], io), stderr.join('\n')).toBe(0);
  runDir = findRunDir(out, 'pages');
}, 90_000);

afterAll(async () => {
  await browser?.close();
  await emu?.close();
  cleanTemps();
});

async function open(): Promise<{ page: Page; problems: string[] }> {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const problems = watchPage(page);
  await page.goto(`file://${join(runDir, 'gallery.html')}`);
  await page.waitForSelector('html[data-ready=true]');
  return { page, problems };
}

/** The instance ids of the cells a step's grid shows. */
const shownIds = (step: Locator): Promise<string[]> =>
  step.locator('.grid .cell').evaluateAll((cells) => cells.map((c) => (c as HTMLElement).dataset.instance ?? ''));

/** Every combination of `axes` (name → values) as `name=value` parts, for the ids a page must show. */
function combos(axes: [string, string[]][]): string[][] {
  return axes.reduce<string[][]>((acc, [name, values]) => acc.flatMap((parts) => values.map((v) => [...parts, `${name}=${v}`])), [[]]);
}

/** The ids of `step` whose parts include every `fixed` part. */
function idsOf(step: string, axes: [string, string[]][], fixed: Record<string, string>): string[] {
  return combos(axes)
    .filter((parts) => Object.entries(fixed).every(([k, v]) => parts.includes(`${k}=${v}`)))
    .map((parts) => `${step}[${parts.join(',')}]`)
    .sort();
}

/** The page selectors of a step, by axis: the value each one shows. */
const pageSelectors = (step: Locator): Promise<Record<string, string>> =>
  step
    .locator('select[data-control=page]')
    .evaluateAll((selects) =>
      Object.fromEntries(selects.map((s) => [(s as HTMLSelectElement).getAttribute('aria-label'), (s as HTMLSelectElement).value])),
    );

describe('the gallery shows the page it says', () => {
  it(
    'three axes (tier × seed × variation_index): 8 of the 16 cells on load, the page the selector names, and each page after a change',
    { timeout: 30_000 },
    async () => {
      const { page, problems } = await open();
      const sheets = page.locator('[data-step=sheets]');
      const axes: [string, string[]][] = [
        ['tier', ['frogs', 'capybaras']],
        ['seed', ['1', '2', '3', '4']],
        ['variation_index', ['0', '1']],
      ];
      // seed (4 values) runs down, tier across, variation_index makes the pages.
      expect(await pageSelectors(sheets)).toEqual({ variation_index: '0' });
      expect((await shownIds(sheets)).sort()).toEqual(idsOf('sheets', axes, { variation_index: '0' }));
      expect(await shownIds(sheets)).toHaveLength(8);
      // For a person to look at (GENPIPE_GALLERY_SCREENSHOT=file.png): the page as it first opens.
      if (SCREENSHOT) await page.screenshot({ path: SCREENSHOT });
      const selector = sheets.locator('select[data-control=page]');
      await selector.selectOption('1');
      await expect.poll(async () => (await shownIds(sheets)).sort()).toEqual(idsOf('sheets', axes, { variation_index: '1' }));
      await selector.selectOption('0');
      await expect.poll(async () => (await shownIds(sheets)).sort()).toEqual(idsOf('sheets', axes, { variation_index: '0' }));
      await selector.selectOption('*');
      await expect.poll(async () => (await shownIds(sheets)).length).toBe(16);
      expect(problems).toEqual([]);
      await page.close();
    },
  );

  it('four axes: 6 of the 24 cells on load, then each page of each of the two page axes', { timeout: 30_000 }, async () => {
    const { page, problems } = await open();
    const quad = page.locator('[data-step=quad]');
    const axes: [string, string[]][] = [
      ['tier', ['frogs', 'capybaras']],
      ['seed', ['1', '2', '3']],
      ['variation_index', ['0', '1']],
      ['brief', ['calm', 'loud']],
    ];
    // seed (3 values) runs down, tier across (the first of the axes of two), variation_index and brief make pages.
    expect(await pageSelectors(quad)).toEqual({ variation_index: '0', brief: 'calm' });
    expect((await shownIds(quad)).sort()).toEqual(idsOf('quad', axes, { variation_index: '0', brief: 'calm' }));
    expect(await shownIds(quad)).toHaveLength(6);
    const byAxis = (name: string): Locator => quad.locator(`select[data-control=page][aria-label=${name}]`);
    for (const [vi, brief] of [
      ['1', 'calm'],
      ['1', 'loud'],
      ['0', 'loud'],
    ] as const) {
      const before = await pageSelectors(quad);
      if (before.variation_index !== vi) await byAxis('variation_index').selectOption(vi);
      else await byAxis('brief').selectOption(brief);
      await expect.poll(() => pageSelectors(quad)).toEqual({ variation_index: vi, brief });
      await expect.poll(async () => (await shownIds(quad)).sort()).toEqual(idsOf('quad', axes, { variation_index: vi, brief }));
    }
    // "all" on one page axis: both of its values, the other still paged.
    await byAxis('variation_index').selectOption('*');
    await expect.poll(async () => (await shownIds(quad)).sort()).toEqual(idsOf('quad', axes, { brief: 'loud' }));
    expect(problems).toEqual([]);
    await page.close();
  });

  it('a manifest `gallery:` setting: its page axis shows its first page on load, 4 of the 12 cells', { timeout: 30_000 }, async () => {
    const { page, problems } = await open();
    const chosen = page.locator('[data-step=chosen]');
    const axes: [string, string[]][] = [
      ['tier', ['frogs', 'capybaras']],
      ['seed', ['1', '2', '3']],
      ['variation_index', ['0', '1']],
    ];
    expect(await chosen.locator('tbody th[scope=row]').allTextContents()).toEqual(['tier=frogs', 'tier=capybaras']);
    expect(await pageSelectors(chosen)).toEqual({ seed: '1' });
    expect((await shownIds(chosen)).sort()).toEqual(idsOf('chosen', axes, { seed: '1' }));
    await chosen.locator('select[data-control=page]').selectOption('3');
    await expect.poll(async () => (await shownIds(chosen)).sort()).toEqual(idsOf('chosen', axes, { seed: '3' }));
    // Changing the rows makes seed a row axis and tier the page axis, at its first value.
    await chosen.locator('select[data-control=rows]').selectOption('seed');
    await expect.poll(() => pageSelectors(chosen)).toEqual({ tier: 'frogs' });
    await expect.poll(async () => (await shownIds(chosen)).sort()).toEqual(idsOf('chosen', axes, { tier: 'frogs' }));
    expect(problems).toEqual([]);
    await page.close();
  });
});

describe("a video's cell", () => {
  const clipId = 'clip[still]';

  it('says "video", has its headline and, for a file ffmpeg cannot read, the "video" placeholder poster', { timeout: 30_000 }, async () => {
    const { page, problems } = await open();
    const cell = page.locator(`[data-instance="${clipId}"]`);
    expect(await cell.locator('.badge.kind').textContent()).toBe('video');
    expect(await cell.locator('.headline').textContent()).toBe('The frog waves at the camera');
    // A clip has two files (min and raw): each with the placeholder.
    const posters = await cell.locator('video').evaluateAll((vs) => vs.map((v) => v.getAttribute('poster')));
    expect(posters).toHaveLength(2);
    expect(new Set(posters).size).toBe(1);
    const poster = posters[0] ?? null;
    expect(poster).toMatch(/^data:image\/svg\+xml,/);
    expect(decodeURIComponent(poster ?? '')).toContain('>video</text>');
    // The placeholder is drawn, not a black box: it loads as an image of 320 × 180.
    const size = await page.evaluate(async (src) => {
      const img = new Image();
      img.src = src;
      await img.decode();
      return [img.naturalWidth, img.naturalHeight];
    }, poster ?? '');
    expect(size).toEqual([320, 180]);
    if (SCREENSHOT) {
      // Once the browser's controls have settled (they fade in over the poster).
      await page.waitForTimeout(1_000);
      await cell.screenshot({ path: `${SCREENSHOT}.placeholder.png` });
    }
    expect(problems).toEqual([]);
    await page.close();
  });

  it("shows a real video's first frame as its poster once the gallery is rewritten", { timeout: 60_000 }, async () => {
    const ffmpeg = findFfmpeg();
    expect(ffmpeg, 'install the Debian package ffmpeg (scripts/ensure-test-deps.mjs does)').not.toBeNull();
    const clipDir = join(runDir, 'outputs', 'clip');
    const mp4 = readdirSync(clipDir, { recursive: true })
      .map(String)
      .filter((f) => f.endsWith('.mp4'));
    expect(mp4.length).toBeGreaterThan(0);
    const real = join(tempDir(), 'real.mp4');
    realVideo(ffmpeg as string, real, 320, 240);
    for (const f of mp4) copyFileSync(real, join(clipDir, f));
    await rewriteGallery(runDir);
    const first = `outputs/clip/${mp4.sort()[0] as string}`;
    expect(existsSync(join(runDir, posterPathOf(first)))).toBe(true);
    const { page, problems } = await open();
    const video = page.locator(`[data-instance="${clipId}"] video`).first();
    expect(await video.getAttribute('poster')).toBe(posterPathOf(first));
    const size = await video.evaluate(async (v) => {
      const img = new Image();
      img.src = (v as HTMLVideoElement).poster;
      await img.decode();
      return [img.naturalWidth, img.naturalHeight];
    });
    expect(size).toEqual([320, 240]);
    // What the cell shows, as pixels: the first frame (red), not a later one (blue), nor black.
    await video.scrollIntoViewIfNeeded();
    const shot = await video.screenshot();
    if (SCREENSHOT) writeFileSync(`${SCREENSHOT}.video.png`, shot);
    // Its upper left: the browser draws its controls over the bottom and a spinner in the middle.
    const meta = await sharp(shot).metadata();
    const w = meta.width ?? 0;
    const h = meta.height ?? 0;
    const { data, info } = await sharp(shot)
      .extract({ left: Math.floor(w / 16), top: Math.floor(h / 16), width: Math.floor(w / 3), height: Math.floor(h / 5) })
      .removeAlpha()
      .raw()
      .toBuffer({ resolveWithObject: true });
    const mean = (channel: number): number => {
      let sum = 0;
      for (let i = channel; i < data.length; i += info.channels) sum += data[i] as number;
      return sum / (data.length / info.channels);
    };
    expect(mean(0)).toBeGreaterThan(200);
    expect(mean(2)).toBeLessThan(60);
    expect(problems).toEqual([]);
    await page.close();
  });
});
