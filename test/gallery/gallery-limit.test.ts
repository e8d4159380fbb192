// Whether a run gets a gallery follows its journal's instances, not plan.json's count:
// a plan.json over the limit whose journal is not gets one; a plan.json within it whose
// journal is over it gets none. The limit is lowered for the test (the real one is 200,000).
import { cpSync, createWriteStream, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { once } from 'node:events';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { galleryPageOf, journalInstancesOver, MAX_GALLERY_INSTANCES, rewriteGallery } from '../../src/gallery/write-gallery.js';
import { MAX_GALLERY_CELLS } from '../../src/gallery/gallery-data.js';
import { encodeJournalRecord } from '../../src/run/journal/journal.js';
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

describe('the gallery or none, by the count the report has just made', () => {
  it('a count over the limit is taken at its word: the journal is not read again', async () => {
    // A copy whose journal cannot be read (a folder where the file should be): reading it would throw.
    const copy = join(tempDir(), 'run');
    cpSync(runDir, copy, { recursive: true });
    rmSync(join(copy, 'journal.jsonl'));
    mkdirSync(join(copy, 'journal.jsonl'));
    const before = readFileSync(join(copy, 'gallery.html'), 'utf8');
    expect(await rewriteGallery(copy, { maxInstances: 4, instancesAtLeast: 5 })).toBeUndefined();
    expect(readFileSync(join(copy, 'gallery.html'), 'utf8')).toBe(before);
    // A count within the limit proves nothing about the journal: it is read (and here refused).
    await expect(rewriteGallery(copy, { maxInstances: 5, instancesAtLeast: 5 })).rejects.toThrow(/journal\.jsonl/);
  });

  it('a count within the limit leaves the journal to decide', async () => {
    expect(await rewriteGallery(runDir, { maxInstances: 4, instancesAtLeast: 3 })).toBeUndefined();
    expect(await rewriteGallery(runDir, { maxInstances: 5, instancesAtLeast: 5 })).toBe(join(runDir, 'gallery.html'));
  });

  it('`genpipe report` of a journal over the limit writes the report and says the gallery was left', async () => {
    // MAX_GALLERY_INSTANCES + 1 instances with an intent each: a plan.json that names as many.
    const dir = join(tempDir(), 'big', 'big', '20261101T000000Z-0000');
    mkdirSync(dir, { recursive: true });
    const count = MAX_GALLERY_INSTANCES + 1;
    writeFileSync(
      join(dir, 'plan.json'),
      JSON.stringify({
        pipeline: 'big',
        runId: '20261101T000000Z-0000',
        manifest: join(dir, 'big.yaml'),
        planHash: 'x',
        createdAt: '2026-11-01T00:00:00.000Z',
        steps: [{ id: 'sheets', model: 'character-sheet', count, needs: [], for_each: null, price_usd: 0.05 }],
        estimate: { known_usd: count * 0.05, unknown_instances: 0 },
      }),
    );
    const out = createWriteStream(join(dir, 'journal.jsonl'));
    for (let i = 0; i < count; i++) {
      const line = encodeJournalRecord({
        type: 'intent',
        instance: `sheets[seed=${i}]`,
        model: 'character-sheet',
        idempotencyKey: null,
        bodyHash: 'b'.repeat(64),
      });
      if (!out.write(line)) await once(out, 'drain');
    }
    out.end();
    await once(out, 'finish');
    const report = await runCli(['report', dir, '--csv'], { timeoutMs: 120_000 });
    expect(report.code, report.stderr).toBe(0);
    expect(report.stderr).toContain(`its journal names more than ${MAX_GALLERY_INSTANCES.toLocaleString('en-US')} instances`);
    expect(existsSync(join(dir, 'gallery.html'))).toBe(false);
    // Every instance has its line: the header, one per instance, then the step, the model and the total.
    expect(report.stdout.trimEnd().split('\n')).toHaveLength(1 + count + 3);
  }, 120_000);
});
