/// <reference lib="dom" />
// genpipe diff RUN_A RUN_B: a side-by-side page of the instances two runs
// share, with the inputs that differ, each run's status and cost, and both images, opened in
// Chromium from file:// with no request beyond the two runs' files.
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess } from '../cli/in-process.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { cleanTemps, HF_KEY, tempDir } from '../run/runner-helpers.js';
import { launchChromium, watchPage } from './chromium.js';

let browser: Browser;
let good: Emulator;
let failing: Emulator;
let runA: string;
let runB: string;
let manifestPath: string;

function writeManifest(seeds: [number, number], brief: string): void {
  writeFileSync(
    manifestPath,
    `version: 1
name: compare
steps:
  sheets:
    model: character-sheet
    matrix:
      seed: { range: { from: ${seeds[0]}, to: ${seeds[1]} } }
    input: { tier: cats, seed: "{{ seed }}", brief: ${JSON.stringify(brief)} }
`,
  );
}

async function cli(args: string[], base?: string): Promise<{ code: number; out: string; err: string }> {
  return runInProcess(args, { ...(base ? { GENPIPE_BASE_URL: base } : {}), HF_KEY });
}

const runDirOf = (out: string): string => / instance\(s\) in (\S+)/.exec(out)?.[1] ?? '';

beforeAll(async () => {
  browser = await launchChromium();
  good = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  failing = await startEmulator({ port: 0, timeScale: 0, log: () => {}, modelRates: { 'character-sheet': { failureRate: 1 } } });
  const dir = tempDir();
  const out = tempDir();
  manifestPath = join(dir, 'compare.yaml');
  // Run A: seeds 1-3, "A mascot", all completed. Run B: the manifest edited to seeds 2-4, "A robot", all failed.
  writeManifest([1, 3], 'A mascot');
  const a = await cli(['run', manifestPath, '--out', out, '--rate', '1000'], good.url);
  expect(a.code).toBe(0);
  writeManifest([2, 4], 'A robot');
  await new Promise((r) => setTimeout(r, 1_100)); // run ids have a one-second clock
  const b = await cli(['run', manifestPath, '--out', out, '--rate', '1000'], failing.url);
  expect(b.code).toBe(1);
  runA = runDirOf(a.out + a.err);
  runB = runDirOf(b.out + b.err);
  expect(runA).not.toBe('');
  expect(runB).not.toBe('');
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await good?.close();
  await failing?.close();
  cleanTemps();
});

describe('genpipe diff', () => {
  it('a run keeps the manifest it read: manifest.yaml in its directory', () => {
    expect(readFileSync(join(runA, 'manifest.yaml'), 'utf8')).toContain('brief: "A mascot"');
    expect(readFileSync(join(runB, 'manifest.yaml'), 'utf8')).toContain('brief: "A robot"');
  });

  it('writes RUN_B/diff-<A>.html: the shared instances with the input that differs, both statuses and costs', async () => {
    const result = await cli(['diff', runA, runB]);
    expect(result.code).toBe(0);
    const idA = runA.split('/').pop()!;
    const page = join(runB, `diff-${idA}.html`);
    expect(result.out).toContain(`wrote ${page}`);
    expect(result.out).toContain('2 shared instances (1 only in A, 1 only in B); inputs differ in 2, status in 2;');
    const html = readFileSync(page, 'utf8');
    expect(html).toContain('data-instance="sheets[seed=2]"');
    expect(html).toContain('data-instance="sheets[seed=3]"');
    expect(html).not.toContain('data-instance="sheets[seed=1]"');
    expect(html).toContain('<code>brief</code>: <code>&#34;A mascot&#34;</code> → <code>&#34;A robot&#34;</code>');
  });

  it(
    "the page opens from file:// with both runs side by side: A's images render, B's failures show their error",
    { timeout: 30_000 },
    async () => {
      const page = join(tempDir(), 'side-by-side.html');
      expect((await cli(['diff', runA, runB, '--out', page])).code).toBe(0);
      const tab = await browser.newPage({ viewport: { width: 1200, height: 900 } });
      const problems = watchPage(tab);
      await tab.goto(`file://${page}`);
      const rows = tab.locator('tr[data-instance]');
      expect(await rows.count()).toBe(2);
      for (const id of ['sheets[seed=2]', 'sheets[seed=3]']) {
        const row = tab.locator(`tr[data-instance="${id}"]`);
        expect(await row.getAttribute('data-status-a')).toBe('completed');
        expect(await row.getAttribute('data-status-b')).toBe('failed');
        const img = row.locator('td.side').nth(0).locator('img');
        await img.scrollIntoViewIfNeeded();
        await expect
          .poll(() => img.evaluate((el) => (el as HTMLImageElement).complete && (el as HTMLImageElement).naturalWidth > 0), {
            timeout: 10_000,
          })
          .toBe(true);
        expect(await row.locator('td.side').nth(1).locator('.error').count()).toBe(1);
      }
      // Every shared instance differs here, so "only instances that differ" hides none.
      await tab.check('#only-diff');
      expect(await tab.locator('tr[data-instance]:visible').count()).toBe(2);
      expect(problems).toEqual([]);
      await tab.close();
    },
  );

  it('a run dir with no copy of its manifest is compared with the file as it is now, and says so', async () => {
    const out = tempDir();
    writeManifest([1, 2], 'A mascot');
    const first = await cli(['run', manifestPath, '--out', out, '--rate', '1000'], good.url);
    const dir = runDirOf(first.out + first.err);
    rmSync(join(dir, 'manifest.yaml'));
    const result = await cli(['diff', dir, runA, '--out', join(tempDir(), 'd.html')]);
    expect(result.code).toBe(0);
    expect(result.err).toContain('keeps no copy of its manifest (it was made before genpipe kept one)');
    expect(result.out).toContain('2 shared instances (0 only in A, 1 only in B); inputs differ in 0, status in 0;');
  });

  it('refuses what is not a run directory (exit 2) and a missing second run', async () => {
    const notRun = await cli(['diff', tempDir(), runB]);
    expect(notRun.code).toBe(2);
    expect(notRun.err).toContain('is not a run directory');
    const one = await cli(['diff', runA]);
    expect(one.code).toBe(2);
  });
});
