/// <reference lib="dom" />
// The review loop: `genpipe review` serves the gallery on loopback, a click
// in a real browser saves a decision to review.json at once, a reload shows it, concurrent
// decisions are all kept, and the next stage uses them: `for_each: {step, only: approved}` and
// `genpipe resume --retry rejected`.
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startReviewServer, type ReviewServer } from '../../src/review/review-server.js';
import { BIN, cleanTemps, emuRequests, findRunDir, HF_KEY, journalOf, tempDir } from '../run/runner-helpers.js';
import { launchChromium, watchPage } from './chromium.js';

let emu: Emulator;
let browser: Browser;

beforeAll(async () => {
  browser = await launchChromium();
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
}, 30_000);

afterAll(async () => {
  await browser?.close();
  await emu?.close();
  cleanTemps();
});

const io = (stderr: string[] = []): CliIO => ({
  out: () => {},
  write: async () => {},
  err: (t) => stderr.push(t),
  env: { GENPIPE_BASE_URL: emu.url, HF_KEY },
  signal: new AbortController().signal,
});

/** A run of three sheets (seeds 1..3), with `extra` steps after it; returns its directory. */
async function sheetsRun(name: string, extra = ''): Promise<string> {
  const dir = tempDir();
  const manifest = join(dir, `${name}.yaml`);
  writeFileSync(
    manifest,
    `version: 1\nname: ${name}\nsteps:\n  sheets:\n    model: character-sheet\n    matrix:\n      seed: [1, 2, 3]\n    input: { tier: cats, seed: "{{ seed }}" }\n${extra}`,
  );
  const out = tempDir();
  const stderr: string[] = [];
  expect(await main(['run', manifest, '--out', out, '--rate', '1000', '--quiet'], io(stderr)), stderr.join('\n')).toBe(0);
  return findRunDir(out, name);
}

const review = (runDir: string): Record<string, { decision?: string; starred: boolean; at: string }> =>
  JSON.parse(readFileSync(join(runDir, 'review.json'), 'utf8'));

describe('genpipe review', () => {
  let runDir: string;
  let server: ReviewServer;
  beforeAll(async () => {
    runDir = await sheetsRun('judged');
    server = await startReviewServer(runDir, { host: '127.0.0.1', port: 0 });
  }, 30_000);
  afterAll(async () => server?.close());

  it('a click on approve saves review.json at once; a reload shows the decision; reject and star too', { timeout: 30_000 }, async () => {
    const page = await browser.newPage();
    const problems = watchPage(page, server.url);
    await page.goto(server.url);
    await page.waitForSelector('html[data-ready=true]');
    // data-ready says the cells are drawn; their images (loading=lazy, decoding=async) arrive after
    // it, so wait for them to load (bounded, 10 s) instead of expecting them loaded at that moment.
    await expect
      .poll(
        () =>
          page
            .locator('img')
            .evaluateAll((images) => images.map((i) => (i as HTMLImageElement).complete && (i as HTMLImageElement).naturalWidth > 0)),
        { timeout: 10_000 },
      )
      .toEqual([true, true, true]);
    const first = page.locator('[data-instance="sheets[seed=1]"]');
    await first.locator('[data-action=approve]').click();
    await page.waitForSelector('[data-instance="sheets[seed=1]"][data-decision=approved]');
    expect(review(runDir)['sheets[seed=1]']).toMatchObject({ decision: 'approved', starred: false });
    await page.locator('[data-instance="sheets[seed=2]"] [data-action=reject]').click();
    await page.waitForSelector('[data-instance="sheets[seed=2]"][data-decision=rejected]');
    // The keyboard: focus a cell, s stars it.
    await page.locator('[data-instance="sheets[seed=3]"]').focus();
    await page.keyboard.press('s');
    await page.waitForFunction(() => document.querySelector('[data-instance="sheets[seed=3]"]')?.classList.contains('starred'));
    expect(review(runDir)).toMatchObject({ 'sheets[seed=2]': { decision: 'rejected' }, 'sheets[seed=3]': { starred: true } });
    await page.reload();
    await page.waitForSelector('html[data-ready=true]');
    expect(await page.locator('[data-instance="sheets[seed=1]"]').getAttribute('data-decision')).toBe('approved');
    expect(await page.locator('[data-instance="sheets[seed=2]"]').getAttribute('data-decision')).toBe('rejected');
    // The filter by decision.
    await page.locator('[data-step=sheets] select[data-control=status]').selectOption('approved');
    expect(await page.locator('[data-step=sheets] [data-instance]').count()).toBe(1);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('concurrent decisions from two tabs are all kept', { timeout: 30_000 }, async () => {
    const post = (instance: string, change: object) =>
      fetch(`${server.url}/api/decisions`, {
        method: 'POST',
        headers: { origin: server.url, 'content-type': 'application/json' },
        body: JSON.stringify({ instance, ...change }),
      });
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => post(`sheets[seed=${i + 10}]`, { decision: i % 2 === 0 ? 'approved' : 'rejected' })),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(200));
    const saved = review(runDir);
    for (let i = 0; i < 20; i++) expect(saved[`sheets[seed=${i + 10}]`]?.decision).toBe(i % 2 === 0 ? 'approved' : 'rejected');
    expect(saved['sheets[seed=1]']?.decision).toBe('approved');
  });

  it('refuses a decision from another origin, a bad body, and any file outside outputs/ and thumbs/', async () => {
    const before = readFileSync(join(runDir, 'review.json'), 'utf8');
    const foreign = await fetch(`${server.url}/api/decisions`, {
      method: 'POST',
      headers: { origin: 'http://evil.example', 'content-type': 'application/json' },
      body: JSON.stringify({ instance: 'sheets[seed=1]', decision: 'rejected' }),
    });
    expect(foreign.status).toBe(403);
    const bad = await fetch(`${server.url}/api/decisions`, {
      method: 'POST',
      headers: { origin: server.url },
      body: JSON.stringify({ instance: 'x', decision: 'maybe' }),
    });
    expect(bad.status).toBe(400);
    expect(readFileSync(join(runDir, 'review.json'), 'utf8')).toBe(before);
    for (const path of [
      '/plan.json',
      '/journal.jsonl',
      '/outputs/../plan.json',
      '/outputs/%2e%2e/journal.jsonl',
      '/thumbs/..%2fplan.json',
      '/outputs/sheets/%2e%2e/%2e%2e/plan.json',
      '/etc/passwd',
    ]) {
      expect((await fetch(`${server.url}${path}`)).status, path).toBe(404);
    }
    const file = readdirSync(join(runDir, 'outputs', 'sheets'))[0] as string;
    const served = await fetch(`${server.url}/outputs/sheets/${encodeURIComponent(file)}`);
    expect(served.status).toBe(200);
    expect(served.headers.get('content-type')).toBe('image/png');
  });
});

describe('review decisions are explicit, and counted in the header', () => {
  let runDir: string;
  let server: ReviewServer;
  beforeAll(async () => {
    runDir = await sheetsRun('explicit');
    server = await startReviewServer(runDir, { host: '127.0.0.1', port: 0 });
  }, 30_000);
  afterAll(async () => server?.close());

  const counts = async (page: import('playwright-core').Page): Promise<string> =>
    (await page.locator('#review-counts').textContent()) ?? '';

  it(
    '`a` on an approved cell keeps it approved; clear (button or `u`) is the only way back; the header counts each change',
    { timeout: 30_000 },
    async () => {
      const page = await browser.newPage();
      const problems = watchPage(page, server.url);
      await page.goto(server.url);
      await page.waitForSelector('html[data-ready=true]');
      expect(await counts(page)).toBe('0 approved, 0 rejected, 0 starred, 3 unreviewed of 3');
      const cell = '[data-instance="sheets[seed=1]"]';
      await page.locator(cell).focus();
      await page.keyboard.press('a');
      await page.waitForSelector(`${cell}[data-decision=approved]`);
      // Pressed again: still approved (it was a toggle that silently removed the approval).
      await page.locator(cell).focus();
      const again = page.waitForResponse((r) => r.url().endsWith('/api/decisions'));
      await page.keyboard.press('a');
      expect(await (await again).json()).toMatchObject({ decision: 'approved' });
      await expect.poll(() => page.locator('#saved').textContent()).toBe('sheets[seed=1]: approved (saved to review.json)');
      expect(await page.locator(cell).getAttribute('data-decision')).toBe('approved');
      expect(review(runDir)['sheets[seed=1]']?.decision).toBe('approved');
      const clicked = page.waitForResponse((r) => r.url().endsWith('/api/decisions'));
      await page.locator(`${cell} [data-action=approve]`).click();
      expect(await (await clicked).json()).toMatchObject({ decision: 'approved' });
      await page.waitForSelector(`${cell}[data-decision=approved]`);
      expect(review(runDir)['sheets[seed=1]']?.decision).toBe('approved');
      expect(await counts(page)).toBe('1 approved, 0 rejected, 0 starred, 2 unreviewed of 3');
      // Reject, star: each counted.
      await page.locator('[data-instance="sheets[seed=2]"] [data-action=reject]').click();
      await page.waitForSelector('[data-instance="sheets[seed=2]"][data-decision=rejected]');
      await page.locator('[data-instance="sheets[seed=2]"] [data-action=star]').click();
      await page.waitForSelector('[data-instance="sheets[seed=2]"] [data-action=unstar]');
      expect(await counts(page)).toBe('1 approved, 1 rejected, 1 starred, 1 unreviewed of 3');
      // `s` on a starred cell keeps the star; `S` (or the unstar button) takes it off.
      await page.locator('[data-instance="sheets[seed=2]"]').focus();
      const starred = page.waitForResponse((r) => r.url().endsWith('/api/decisions'));
      await page.keyboard.press('s');
      expect(await (await starred).json()).toMatchObject({ starred: true });
      await expect.poll(() => page.locator('#saved').textContent()).toBe('sheets[seed=2]: starred (saved to review.json)');
      expect(review(runDir)['sheets[seed=2]']?.starred).toBe(true);
      // Clear, by its button and by `u`.
      await page.locator(`${cell} [data-action=clear]`).click();
      await page.waitForFunction((sel) => !document.querySelector(sel)?.hasAttribute('data-decision'), cell);
      expect(review(runDir)['sheets[seed=1]']?.decision).toBeUndefined();
      await page.locator('[data-instance="sheets[seed=2]"]').focus();
      await page.keyboard.press('u');
      await page.waitForFunction(() => !document.querySelector('[data-instance="sheets[seed=2]"]')?.hasAttribute('data-decision'));
      expect(review(runDir)['sheets[seed=2]']).toMatchObject({ starred: true });
      expect(review(runDir)['sheets[seed=2]']?.decision).toBeUndefined();
      expect(await counts(page)).toBe('0 approved, 0 rejected, 1 starred, 3 unreviewed of 3');
      // A cell with no decision has nothing to clear.
      expect(await page.locator(`${cell} [data-action=clear]`).isDisabled()).toBe(true);
      await page.locator('[data-instance="sheets[seed=2]"]').focus();
      await page.keyboard.press('S');
      await page.waitForSelector('[data-instance="sheets[seed=2]"] [data-action=star]');
      expect(review(runDir)['sheets[seed=2]']?.starred).toBe(false);
      expect(await counts(page)).toBe('0 approved, 0 rejected, 0 starred, 3 unreviewed of 3');
      expect(problems).toEqual([]);
      await page.close();
    },
  );
});

describe('the review command', () => {
  it('prints exactly "listening on http://HOST:PORT" first, serves, and exits 0 on SIGTERM', { timeout: 30_000 }, async () => {
    const runDir = await sheetsRun('served');
    const child = spawn(process.execPath, [BIN, 'review', runDir, '--port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
    const lines = createInterface({ input: child.stdout });
    const first = await new Promise<string>((resolve) => lines.once('line', resolve));
    expect(first).toMatch(/^listening on http:\/\/127\.0\.0\.1:\d+$/);
    const url = first.slice('listening on '.length);
    expect((await fetch(url)).status).toBe(200);
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });

  it('refuses a host that is not loopback (exit 2, one sentence)', async () => {
    const stderr: string[] = [];
    expect(await main(['review', tempDir(), '--host', '0.0.0.0'], io(stderr))).toBe(2);
    expect(stderr).toEqual([
      'genpipe: --host takes a loopback address (127.0.0.1, ::1, localhost), not "0.0.0.0": the review page writes to the run directory and has no login.',
    ]);
  });
});

describe('the next stage uses the decisions', () => {
  it('for_each {step, only: approved} runs only for the approved instances, once they are approved', { timeout: 60_000 }, async () => {
    const runDir = await sheetsRun(
      'staged',
      `  clips:\n    model: dop\n    for_each: { step: sheets, only: approved }\n    input:\n      model: dop-turbo\n      prompt: wave\n      input_images: [{ type: image_url, image_url: "{{ upstream.outputs.images[0].url }}" }]\n`,
    );
    const clips = (): string[] =>
      journalOf(runDir)
        .records.filter((r) => r.type === 'intent' && r.instance.startsWith('clips['))
        .map((r) => (r as { instance: string }).instance);
    expect(clips()).toEqual([]);
    writeFileSync(
      join(runDir, 'review.json'),
      JSON.stringify({
        'sheets[seed=2]': { decision: 'approved', starred: false, at: new Date().toISOString() },
        'sheets[seed=3]': { decision: 'rejected', starred: false, at: new Date().toISOString() },
      }),
    );
    const stderr: string[] = [];
    expect(await main(['resume', runDir, '--quiet'], io(stderr)), stderr.join('\n')).toBe(0);
    expect(clips()).toEqual(['clips[sheets[seed=2]]']);
  });

  it(
    'resume --retry rejected makes a rejected sheet again with a seed outside the sweep, keeping the rejected file',
    { timeout: 60_000 },
    async () => {
      const runDir = await sheetsRun('remade');
      const rejectedFile = readdirSync(join(runDir, 'outputs', 'sheets')).find((f) => f.includes('seed=2')) as string;
      const bytes = readFileSync(join(runDir, 'outputs', 'sheets', rejectedFile));
      writeFileSync(
        join(runDir, 'review.json'),
        JSON.stringify({
          'sheets[seed=2]': { decision: 'rejected', starred: false, at: new Date().toISOString() },
          'sheets[seed=1]': { decision: 'approved', starred: false, at: new Date().toISOString() },
        }),
      );
      const sent = emuRequests(emu).length;
      const stderr: string[] = [];
      expect(await main(['resume', runDir, '--retry', 'rejected', '--quiet'], io(stderr)), stderr.join('\n')).toBe(0);
      const added = emuRequests(emu).slice(sent) as unknown as { details: { seed_given: number } }[];
      expect(added).toHaveLength(1);
      expect(added[0]?.details.seed_given).toBeGreaterThan(3);
      const reroll = journalOf(runDir).records.filter((r) => r.type === 'reroll');
      expect(reroll).toEqual([expect.objectContaining({ instance: 'sheets[seed=2]', attempt: 1, seed: added[0]?.details.seed_given })]);
      expect(readFileSync(join(runDir, 'outputs', 'sheets', 'rejected', '0', rejectedFile))).toEqual(bytes);
      expect(existsSync(join(runDir, 'outputs', 'sheets', rejectedFile))).toBe(true);
      expect(readFileSync(join(runDir, 'outputs', 'sheets', rejectedFile))).not.toEqual(bytes);
      // Once made again, a later resume sends nothing more.
      const again = emuRequests(emu).length;
      expect(await main(['resume', runDir, '--quiet'], io())).toBe(0);
      expect(emuRequests(emu)).toHaveLength(again);
    },
  );
});
