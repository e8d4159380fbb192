/// <reference lib="dom" />
// The gallery of the daily loop, in Chromium from file://: the run's spend in
// the header, row and column labels that stay in view as a wide grid scrolls, each cell's headline
// (a marketing image's prompt, an agent's question), and the manifest's order for steps, columns,
// rows and pages (not alphabetical, not the dependency order).
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { cleanTemps, findRunDir, HF_KEY, tempDir } from '../run/runner-helpers.js';
import { launchChromium, watchPage } from './chromium.js';
import { formatSpend } from '../../src/util/format-usd.js';

let emu: Emulator;
let browser: Browser;
let runDir: string;

beforeAll(async () => {
  browser = await launchChromium();
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  const dir = tempDir();
  writeFileSync(join(dir, 'campaign.csv'), 'id,headline\nz1,Zebra sale\na1,Apple days\n');
  // Manifest order: sheets, ask, posters. Alphabetical: ask, posters, sheets; dependency order: sheets, posters, ask.
  writeFileSync(
    join(dir, 'daily.yaml'),
    `version: 1
name: daily
defaults:
  polling: { initial_ms: 100, max_ms: 200 }
steps:
  sheets:
    model: character-sheet
    matrix:
      tier: [normal, freak]
      seed: [1, 2, 3]
      brief: [zebra look, alpha look]
    input: { tier: "{{ tier }}", seed: "{{ seed }}", brief: "{{ brief }}" }
  ask:
    model: agent
    needs: [posters]
    matrix:
      topic: [sky]
    input: { content: "What colour is the {{ topic }}?" }
  posters:
    model: marketing-image
    matrix:
      row: { csv: campaign.csv, key: id }
    input: { prompt: "{{ row.headline }}" }
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
  expect(await main(['run', join(dir, 'daily.yaml'), '--out', out, '--rate', '1000', '--quiet'], io), stderr.join('\n')).toBe(0);
  runDir = findRunDir(out, 'daily');
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await emu?.close();
  cleanTemps();
});

async function open(viewport = { width: 1200, height: 900 }): Promise<{ page: Page; problems: string[] }> {
  const page = await browser.newPage({ viewport });
  const problems = watchPage(page);
  await page.goto(`file://${join(runDir, 'gallery.html')}`);
  await page.waitForSelector('html[data-ready=true]');
  return { page, problems };
}

describe('the gallery of the daily loop', () => {
  it("shows the run's spend in the header, equal to the cost report's total", { timeout: 30_000 }, async () => {
    const report = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as {
      total: { netUsd: number; unpricedInstances: number };
    };
    const { page, problems } = await open();
    const spend = page.locator('header #spend');
    expect(Number(await spend.getAttribute('data-usd'))).toBeCloseTo(report.total.netUsd, 6);
    // 12 sheets at US$0.05 are part of it; money as genpipe writes it everywhere (US$0.60, not US$0.6000).
    expect(report.total.netUsd).toBeGreaterThan(0.6 - 1e-9);
    // The same words as the report's: its unpriced instances beside the sum, never counted as US$0.
    expect(report.total.unpricedInstances).toBeGreaterThan(0);
    expect(await spend.textContent()).toBe(
      `Net ${formatSpend({ netUsd: report.total.netUsd, unpricedInstances: report.total.unpricedInstances })} on 15 instances`,
    );
    expect(await page.locator('[data-step=sheets] .counts').textContent()).toMatch(/; US\$0\.60$/);
    expect(problems).toEqual([]);
    await page.close();
  });

  it(
    "lists steps in the manifest's order, and columns, rows and pages in the order the manifest gives their values",
    { timeout: 30_000 },
    async () => {
      const { page, problems } = await open();
      expect(await page.locator('section.step').evaluateAll((s) => s.map((e) => (e as HTMLElement).dataset.step))).toEqual([
        'sheets',
        'ask',
        'posters',
      ]);
      const sheets = page.locator('[data-step=sheets]');
      // seed (3 values) runs down, tier across, brief picks the page.
      expect(await sheets.locator('thead th[scope=col]').allTextContents()).toEqual(['tier=normal', 'tier=freak']);
      expect(await sheets.locator('select[data-control=page] option').allTextContents()).toEqual(['all', 'zebra look', 'alpha look']);
      const posters = page.locator('[data-step=posters]');
      expect(await posters.locator('tbody th[scope=row]').allTextContents()).toEqual(['row=z1', 'row=a1']);
      expect(problems).toEqual([]);
      await page.close();
    },
  );

  it(
    "shows each cell's headline: the prompt of a marketing image, the question of an agent, the brief of a sheet",
    { timeout: 30_000 },
    async () => {
      const { page, problems } = await open();
      expect(await page.locator('[data-instance="posters[row=z1]"] .headline').textContent()).toBe('Zebra sale');
      expect(await page.locator('[data-instance="posters[row=a1]"] .headline').textContent()).toBe('Apple days');
      expect(await page.locator('[data-instance="ask[topic=sky]"] .headline').textContent()).toBe('What colour is the sky?');
      await page.locator('[data-step=sheets] select[data-control=page]').selectOption('*');
      expect(await page.locator('[data-instance="sheets[tier=freak,seed=2,brief=\\"alpha look\\"]"] .headline').textContent()).toBe(
        'alpha look',
      );
      // The text filter finds a cell by its headline.
      await page.locator('[data-step=posters] input[data-control=text]').fill('apple');
      await page.locator('[data-step=posters] input[data-control=text]').press('Enter');
      await expect.poll(() => page.locator('[data-step=posters] [data-instance]').count()).toBe(1);
      expect(problems).toEqual([]);
      await page.close();
    },
  );

  it('keeps row and column labels in view while a wide, tall grid scrolls', { timeout: 30_000 }, async () => {
    const { page, problems } = await open({ width: 420, height: 500 });
    const box = page.locator('[data-step=sheets] .scroll');
    const scrolled = await box.evaluate((el) => {
      el.scrollLeft = 400;
      el.scrollTop = 300;
      return { left: el.scrollLeft, top: el.scrollTop };
    });
    // The grid is wider and taller than its box: it did scroll both ways.
    expect(scrolled.left).toBeGreaterThan(100);
    expect(scrolled.top).toBeGreaterThan(100);
    const frame = await box.boundingBox();
    const rowLabel = await page.locator('[data-step=sheets] tbody th[scope=row]').last().boundingBox();
    const colLabel = await page.locator('[data-step=sheets] thead th[scope=col]').last().boundingBox();
    expect(frame && rowLabel && colLabel).toBeTruthy();
    // Stuck to the box's left and top edges rather than scrolled out of it.
    expect(Math.abs((rowLabel?.x ?? 0) - (frame?.x ?? 0))).toBeLessThan(2);
    expect(Math.abs((colLabel?.y ?? 0) - (frame?.y ?? 0))).toBeLessThan(2);
    expect(problems).toEqual([]);
    await page.close();
  });
});
