#!/usr/bin/env node
// The contact sheet at scale: runs of 10,000 instances (100 seeds x 100
// variation indexes of character sheets at zero service latency) and of 100,000 (1,000 x 100),
// each with its gallery, then, as whole processes, `genpipe report` writing the gallery from
// scratch and rewriting it, and the time headless Chromium takes from opening gallery.html over
// file:// to its first screen: the page's script done (data-ready, the cells on screen loaded from
// their data files) and every image in the viewport decoded. Targets: first screen < 2 s at
// 10,000; < 1 s with a page of at most 5 MB at 100,000. Median of 5 page
// loads, each in a fresh browser context. Also the cost of a running run's rewrite of a
// 100,000-cell gallery in this process: the first write (every data file) against one after ten
// more cells (the page and the data files whose cells changed). The emulator's images are 160 x 90,
// within a thumbnail's 512 px, so they are shown as themselves; the cost of a thumbnail is measured
// apart, on 200 images of 1536 x 1024 (the size of a real sheet) made here.
// BENCH_GALLERY_SIZES=10000 (comma-separated, of 10000 and 100000) runs fewer.
/* global document, innerHeight, innerWidth -- the page functions below run in Chromium */
import { existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { chromium } from 'playwright-core';
import sharp from 'sharp';
import { median, runGenpipe, scratchDir, startEmulatorProcess, writeResults } from './lib/harness.mjs';

const CHROMIUM = process.env.GENPIPE_CHROMIUM ?? '/usr/bin/chromium';
const LOADS = Number(process.env.BENCH_PAGE_LOADS ?? 5);
const SIZES = (process.env.BENCH_GALLERY_SIZES ?? '10000,100000').split(',').map(Number);
const SHAPES = { 10000: { seeds: 100, variations: 100, target: 2 }, 100000: { seeds: 1000, variations: 100, target: 1 } };
const PAGE_TARGET_BYTES = 5 * 2 ** 20;

if (!existsSync(CHROMIUM)) {
  console.error(`${CHROMIUM} is missing: install Debian's chromium package (npm run test:deps does) or set GENPIPE_CHROMIUM.`);
  process.exit(1);
}

const filesUnder = (dir) => (existsSync(dir) ? readdirSync(dir).map((name) => join(dir, name)) : []);
const bytesOf = (paths) => paths.reduce((sum, path) => sum + statSync(path).size, 0);

/** A run of seeds x variations with its gallery, `genpipe report` twice, and its first screen in Chromium. */
async function galleryAt(instances, browser) {
  const { seeds, variations, target } = SHAPES[instances];
  const dir = scratchDir(`gallery-${instances}`);
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
      seed: { range: { from: 1, to: ${seeds} } }
      variation_index: { range: { from: 0, to: ${variations - 1} } }
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
  const dataDir = join(runDir, 'gallery-data');

  // From scratch: no thumbnails, no page, no data files.
  rmSync(join(runDir, 'thumbs'), { recursive: true, force: true });
  rmSync(dataDir, { recursive: true, force: true });
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
  const dataFiles = filesUnder(dataDir);

  const loads = [];
  let cellsShown = 0;
  let dataFilesLoaded = 0;
  for (let i = 0; i < LOADS; i++) {
    const context = await browser.newContext({ viewport: { width: 1440, height: 900 } });
    const page = await context.newPage();
    let asked = 0;
    page.on('request', (request) => {
      if (request.url().includes('/gallery-data/')) asked++;
    });
    const started = performance.now();
    await page.goto(pathToFileURL(galleryPath).href, { timeout: 60_000 });
    await page.waitForFunction(() => document.documentElement.dataset.ready === 'true', undefined, { timeout: 60_000 });
    await page.waitForFunction(
      () =>
        [...document.images]
          .filter((img) => {
            const r = img.getBoundingClientRect();
            return r.bottom > 0 && r.top < innerHeight && r.right > 0 && r.left < innerWidth;
          })
          .every((img) => img.complete && img.naturalWidth > 0),
      undefined,
      { timeout: 60_000, polling: 'raf' },
    );
    loads.push(performance.now() - started);
    cellsShown = await page.evaluate(() => document.querySelectorAll('#app [data-instance]').length);
    dataFilesLoaded = asked;
    await context.close();
  }
  const firstScreenS = median(loads) / 1000;
  return {
    instances,
    run_wall_s: run.wallMs / 1000,
    report_fresh_wall_s: fresh.wallMs / 1000,
    thumbnails: thumbs,
    report_rewrite_wall_s: rewrite.wallMs / 1000,
    page_bytes: pageBytes,
    page_mib: pageBytes / 2 ** 20,
    data_files: dataFiles.length,
    data_bytes: bytesOf(dataFiles),
    data_files_loaded_for_first_screen: dataFilesLoaded,
    cells_on_first_page: cellsShown,
    first_screen_loads_s: loads.map((ms) => ms / 1000),
    median_first_screen_s: firstScreenS,
    target_first_screen_s: target,
    first_screen_vs_target: firstScreenS / target,
    ...(instances === 100_000 ? { target_page_bytes: PAGE_TARGET_BYTES, page_vs_target: pageBytes / PAGE_TARGET_BYTES } : {}),
  };
}

/** A running run's rewrites of a 100,000-cell gallery, in this process: the first (every data file), then after ten more cells. */
async function rewriteCost() {
  const { GalleryCells } = await import('../dist/gallery/gallery-data.js');
  const { writeGallery } = await import('../dist/gallery/write-gallery.js');
  const dir = scratchDir('gallery-rewrite');
  const stateOf = (seed, v) => {
    const instance = `sheets[seed=${seed},variation_index=${v}]`;
    return {
      rerolls: 0,
      retries: 0,
      submission: { kind: 'request', requestId: `0f0c9a7e-${seed}-${v}` },
      final: { type: 'status', at: 1, instance, status: 'completed', outputs: [] },
      downloads: new Map([
        [0, { type: 'downloaded', at: 1, instance, output: 0, path: `outputs/sheets/${instance}-0.png`, sha256: 'f'.repeat(64), size: 1 }],
      ]),
    };
  };
  const plan = {
    pipeline: 'rewrite',
    runId: 'r1',
    steps: [{ id: 'sheets', model: 'character-sheet', for_each: null, count: 100_010, price_usd: 0.05 }],
  };
  const cells = new GalleryCells(new Map([['sheets', 0.05]]));
  for (let seed = 1; seed <= 1_000; seed++)
    for (let v = 0; v < 100; v++) cells.add(`sheets[seed=${seed},variation_index=${v}]`, stateOf(seed, v));
  const written = new Map();
  // Images the run saw fit (as a run tells the gallery of each download): no file is opened.
  const thumbnails = new Map();
  for (let seed = 1; seed <= 1_001; seed++)
    for (let v = 0; v < 100; v++) thumbnails.set(`outputs/sheets/sheets[seed=${seed},variation_index=${v}]-0.png`, false);
  const timed = async () => {
    const started = performance.now();
    await writeGallery(dir, { plan, cells: cells.withLive([]) }, { thumbnails, headlines: new Map(), written });
    return (performance.now() - started) / 1000;
  };
  const first = await timed();
  const samples = [];
  for (let round = 0; round < 5; round++) {
    for (let v = round * 10; v < round * 10 + 10; v++) cells.add(`sheets[seed=1001,variation_index=${v}]`, stateOf(1001, v));
    samples.push(await timed());
  }
  return { cells: 100_000, first_write_s: first, rewrite_after_10_more_cells_s: median(samples), rewrite_samples_s: samples };
}

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
});
const results = [];
try {
  for (const size of SIZES) {
    results.push(await galleryAt(size, browser));
    console.error(`gallery of ${size}: ${JSON.stringify(results.at(-1))}`);
  }
} finally {
  await browser.close();
}
const rewrite = await rewriteCost();

// Thumbnails of real-size images, as a run's gallery makes them (two at a time).
const { makeThumbnails } = await import('../dist/gallery/thumbnails.js');
const bigDir = scratchDir('gallery-thumbnails');
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

writeResults('gallery', { results, thumbnail_of_1536x1024_png_ms: thumbMsEach, running_rewrite_100000: rewrite });
const table = {};
for (const r of results) {
  table[`run of ${r.instances} instances (with gallery)`] = { seconds: r.run_wall_s.toFixed(2) };
  table[`${r.instances}: genpipe report, gallery from scratch`] = { seconds: r.report_fresh_wall_s.toFixed(2) };
  table[`${r.instances}: genpipe report, gallery rewritten`] = { seconds: r.report_rewrite_wall_s.toFixed(2) };
  table[
    `${r.instances}: first screen (median of ${LOADS}; ${r.cells_on_first_page} cells, ${r.data_files_loaded_for_first_screen} data files; page ${r.page_bytes} bytes)`
  ] = {
    seconds: r.median_first_screen_s.toFixed(3),
  };
}
table['100,000-cell gallery, first write in a run'] = { seconds: rewrite.first_write_s.toFixed(3) };
table['100,000-cell gallery, rewrite after 10 more cells'] = { seconds: rewrite.rewrite_after_10_more_cells_s.toFixed(3) };
table['one thumbnail of a 1536 x 1024 PNG (200 made, 2 at a time)'] = { seconds: (thumbMsEach / 1000).toFixed(4) };
console.table(table);
