// Whether a run gets a gallery follows its journal's instances, not plan.json's count (issue 30,
// goal 3): a plan.json over the limit whose journal is not gets one; a plan.json within it whose
// journal is over it gets none. The limit is lowered for the test (the real one is 200,000).
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { galleryPageOf, journalInstancesOver, MAX_GALLERY_INSTANCES, rewriteGallery } from '../../src/gallery/write-gallery.js';
import { MAX_GALLERY_CELLS } from '../../src/gallery/gallery-data.js';
import { cleanTemps, findRunDir, HF_KEY, runCli, sheetsManifest, tempDir } from '../run/runner-helpers.js';
import { readGalleryDir } from './read-gallery.js';

let emu: Emulator;
let runDir: string;

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  const out = tempDir();
  const result = await runCli(['run', sheetsManifest(tempDir(), 5, { name: 'counted' }), '--out', out, '--rate', '1000', '--quiet'], {
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY },
  });
  expect(result.code, result.stderr).toBe(0);
  runDir = findRunDir(out, 'counted');
}, 60_000);

afterAll(async () => {
  await emu?.close();
  cleanTemps();
});

/** Sets plan.json's count of its one step. */
function planCount(count: number): void {
  const path = join(runDir, 'plan.json');
  const plan = JSON.parse(readFileSync(path, 'utf8')) as { steps: { count: number }[] };
  for (const step of plan.steps) step.count = count;
  writeFileSync(path, JSON.stringify(plan));
}

describe('the gallery or none, by the journal', () => {
  it('the limit is twice the cells a gallery keeps', () => {
    expect(MAX_GALLERY_INSTANCES).toBe(2 * MAX_GALLERY_CELLS);
  });

  it('counts the distinct instances a journal names, stopping past the limit', async () => {
    const journal = join(runDir, 'journal.jsonl');
    expect(await journalInstancesOver(journal, 5)).toBe(false);
    expect(await journalInstancesOver(journal, 4)).toBe(true);
    expect(await journalInstancesOver(journal, 0)).toBe(true);
    expect(await journalInstancesOver(join(runDir, 'missing.jsonl'), 0)).toBe(false);
  });

  it('a plan.json over the limit whose journal is within it gets a gallery', async () => {
    planCount(10 * MAX_GALLERY_INSTANCES);
    rmSync(join(runDir, 'gallery.html'));
    rmSync(join(runDir, 'gallery-data'), { recursive: true });
    expect(await rewriteGallery(runDir)).toBe(join(runDir, 'gallery.html'));
    const gallery = readGalleryDir(runDir);
    expect(gallery.steps[0]?.count).toBe(5);
    expect(gallery.steps[0]?.planned).toBe(10 * MAX_GALLERY_INSTANCES);
    // And `genpipe report` says nothing of a skipped gallery.
    const report = await runCli(['report', runDir]);
    expect(report.code).toBe(0);
    expect(report.stderr).not.toContain('gallery.html was left');
  });

  it('a plan.json within the limit whose journal is over it gets none; the page already there is left as it was', async () => {
    planCount(1);
    const before = readFileSync(join(runDir, 'gallery.html'), 'utf8');
    expect(await rewriteGallery(runDir, { maxInstances: 4 })).toBeUndefined();
    expect(await galleryPageOf(runDir, { maxInstances: 4 })).toBeUndefined();
    expect(readFileSync(join(runDir, 'gallery.html'), 'utf8')).toBe(before);
    // Within it (5 of 5), the same plan.json gets one.
    expect(await rewriteGallery(runDir, { maxInstances: 5 })).toBe(join(runDir, 'gallery.html'));
    expect(existsSync(join(runDir, 'gallery-data', 'sheets.0001.js'))).toBe(true);
    expect(readGalleryDir(runDir).steps[0]?.count).toBe(5);
  });
});
