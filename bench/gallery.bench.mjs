#!/usr/bin/env node
// The contact sheet at scale (issue 12): a 10,000-instance run (100 seeds x 100 variation indexes
// of character sheets at zero service latency) with its gallery, then, as whole processes,
// `genpipe report` writing the gallery from scratch and rewriting it, and the time headless
// Chromium takes from opening gallery.html over file:// to its first screen: the page's script
// done (data-ready) and every image in the viewport decoded. Target: first screen < 2 s. Median
// of 5 page loads, each in a fresh browser context. The emulator's images are 160 x 90, within a
// thumbnail's 512 px, so they are shown as themselves; the cost of a thumbnail is measured apart,
// on 200 images of 1536 x 1024 (the size of a real sheet) made here.
/* global document, innerHeight, innerWidth -- the page functions below run in Chromium */
import { existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { chromium } from 'playwright-core';
import sharp from 'sharp';
import { median, runGenpipe, scratchDir, startEmulatorProcess, writeResults } from './lib/harness.mjs';

const CHROMIUM = process.env.GENPIPE_CHROMIUM ?? '/usr/bin/chromium';
const LOADS = Number(process.env.BENCH_PAGE_LOADS ?? 5);
const SEEDS = 100;
const VARIATIONS = 100;
const instances = SEEDS * VARIATIONS;

if (!existsSync(CHROMIUM)) {
  console.error(`${CHROMIUM} is missing: install Debian's chromium package (npm run test:deps does) or set GENPIPE_CHROMIUM.`);
  process.exit(1);
}

const dir = scratchDir('gallery');
const manifest = join(dir, 'gallery-scale.yaml');
writeFileSync(
  manifest,
  `version: 1
name: gallery-scale
defaults:
  polling: { min_ms: 10, initial_ms: 100 }
steps:
  sheets:
    model: character-sheet
    matrix:
      seed: { range: { from: 1, to: ${SEEDS} } }
      variation_index: { range: { from: 0, to: ${VARIATIONS - 1} } }
    input: { tier: cats, seed: "{{ seed }}", variation_index: "{{ variation_index }}" }
`,
);

const out = join(dir, 'runs');
const emulator = await startEmulatorProcess(['--time-scale', '0']);
let run;
try {
  run = await runGenpipe([
    'run',
    manifest,
    '--base-url',
    emulator.url,
    '--concurrency',
    '32',
    '--rate',
    '100000',
    '--quiet',
    '--yes',
    '--out',
    out,
  ]);
} finally {
  await emulator.stop();
}
if (run.code !== 0) throw new Error(`genpipe run failed (exit ${run.code}): ${run.stderr.slice(-800)}`);
const runRoot = join(out, 'gallery-scale');
const runDir = join(
  runRoot,
  readdirSync(runRoot).find((name) => existsSync(join(runRoot, name, 'plan.json'))),
);
const galleryPath = join(runDir, 'gallery.html');

// From scratch: no thumbnails, no page.
rmSync(join(runDir, 'thumbs'), { recursive: true, force: true });
rmSync(galleryPath, { force: true });
const fresh = await runGenpipe(['report', runDir, '--json'], {}, { discardStdout: true });
if (fresh.code !== 0 || !existsSync(galleryPath))
  throw new Error(`genpipe report failed (exit ${fresh.code}): ${fresh.stderr.slice(-800)}`);
const thumbs = existsSync(join(runDir, 'thumbs'))
  ? readdirSync(join(runDir, 'thumbs'), { recursive: true }).filter((f) => String(f).endsWith('.webp')).length
  : 0;
const rewrite = await runGenpipe(['report', runDir, '--json'], {}, { discardStdout: true });
if (rewrite.code !== 0) throw new Error(`genpipe report (rewrite) failed (exit ${rewrite.code}): ${rewrite.stderr.slice(-800)}`);
const pageBytes = statSync(galleryPath).size;

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
});
const loads = [];
let cellsShown = 0;
try {
  for (let i = 0; i < LOADS; i++) {
    const context = await browser.newContext({ viewport: { width: 1440, height: 900 } });
    const page = await context.newPage();
    const started = performance.now();
    await page.goto(pathToFileURL(galleryPath).href, { timeout: 30_000 });
    await page.waitForFunction(() => document.documentElement.dataset.ready === 'true', undefined, { timeout: 30_000 });
    await page.waitForFunction(
      () =>
        [...document.images]
          .filter((img) => {
            const r = img.getBoundingClientRect();
            return r.bottom > 0 && r.top < innerHeight && r.right > 0 && r.left < innerWidth;
          })
          .every((img) => img.complete && img.naturalWidth > 0),
      undefined,
      { timeout: 30_000, polling: 'raf' },
    );
    loads.push(performance.now() - started);
    cellsShown = await page.evaluate(() => document.querySelectorAll('#app [data-instance]').length);
    await context.close();
  }
} finally {
  await browser.close();
}

// Thumbnails of real-size images, as a run's gallery makes them (two at a time).
const { makeThumbnails } = await import('../dist/gallery/thumbnails.js');
const bigDir = join(dir, 'big');
const bigFiles = [];
for (let i = 0; i < 200; i++) {
  const path = `outputs/sheets/big-${i}.png`;
  if (i === 0) mkdirSync(join(bigDir, 'outputs', 'sheets'), { recursive: true });
  await sharp({
    create: {
      width: 1536,
      height: 1024,
      channels: 3,
      background: { r: (i * 37) % 256, g: 120, b: 40 },
      noise: { type: 'gaussian', mean: 128, sigma: 30 },
    },
  })
    .png()
    .toFile(join(bigDir, path));
  bigFiles.push({ path, kind: 'image', thumb: `thumbs/sheets/big-${i}.png.webp` });
}
const thumbStarted = performance.now();
const bigMade = await makeThumbnails(bigDir, [{ files: bigFiles }]);
const thumbMsEach = (performance.now() - thumbStarted) / bigMade;

const firstScreenS = median(loads) / 1000;
const result = {
  instances,
  run_wall_s: run.wallMs / 1000,
  report_fresh_wall_s: fresh.wallMs / 1000,
  thumbnails: thumbs,
  report_rewrite_wall_s: rewrite.wallMs / 1000,
  thumbnail_of_1536x1024_png_ms: thumbMsEach,
  page_mib: pageBytes / 2 ** 20,
  cells_on_first_page: cellsShown,
  first_screen_loads_s: loads.map((ms) => ms / 1000),
  median_first_screen_s: firstScreenS,
  target_first_screen_s: 2,
  first_screen_vs_target: firstScreenS / 2,
};
writeResults('gallery', { results: [result] });
console.table({
  [`run of ${instances} instances (with gallery)`]: { seconds: result.run_wall_s.toFixed(2) },
  [`genpipe report, gallery from scratch (${thumbs} thumbnails)`]: { seconds: result.report_fresh_wall_s.toFixed(2) },
  'genpipe report, gallery rewritten': { seconds: result.report_rewrite_wall_s.toFixed(2) },
  'one thumbnail of a 1536 x 1024 PNG (200 made, 2 at a time)': { seconds: (thumbMsEach / 1000).toFixed(4) },
  [`first screen in Chromium (median of ${LOADS}; ${cellsShown} cells, page ${result.page_mib.toFixed(2)} MiB)`]: {
    seconds: firstScreenS.toFixed(3),
  },
});
