/// <reference lib="dom" />
// The review page refuses to be framed: a page of another origin that frames it under a bait gets
// an empty frame, so a click there records no decision; unframed, under its content security
// policy (its inline blocks by sha256), the page still draws its cells and saves a click.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startReviewServer, type ReviewServer } from '../../src/review/review-server.js';
import { cleanTemps, findRunDir, HF_KEY, tempDir } from '../run/runner-helpers.js';
import { launchChromium, watchPage } from './chromium.js';

let emu: Emulator;
let browser: Browser;
let runDir: string;
let server: ReviewServer;
/** The attacker: a page on another loopback origin that frames the review page. */
let bait: Server;
let baitUrl: string;

beforeAll(async () => {
  browser = await launchChromium();
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  const dir = tempDir();
  const manifest = join(dir, 'framed.yaml');
  writeFileSync(
    manifest,
    'version: 1\nname: framed\nsteps:\n  sheets:\n    model: character-sheet\n    matrix:\n      seed: [1, 2]\n    input: { tier: cats, seed: "{{ seed }}" }\n',
  );
  const out = tempDir();
  const io: CliIO = {
    out: () => {},
    write: async () => {},
    err: () => {},
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY },
    signal: new AbortController().signal,
  };
  expect(await main(['run', manifest, '--out', out, '--quiet'], io)).toBe(0);
  runDir = findRunDir(out, 'framed');
  // As a run with a public sink records it: the page may show images from that origin, no other.
  const plan = JSON.parse(readFileSync(join(runDir, 'plan.json'), 'utf8')) as { steps: { sink?: unknown }[] };
  plan.steps[0]!.sink = { uri: 's3://assets/framed', public_url: 'https://cdn.example.com/drops/framed' };
  writeFileSync(join(runDir, 'plan.json'), JSON.stringify(plan));
  server = await startReviewServer(runDir, { host: '127.0.0.1', port: 0 });
  bait = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(
      `<!doctype html><title>You won</title><p>Click to claim</p><iframe id="victim" src="${server.url}/" width="1200" height="900"></iframe>`,
    );
  });
  await new Promise<void>((r) => bait.listen(0, '127.0.0.1', r));
  baitUrl = `http://127.0.0.1:${(bait.address() as AddressInfo).port}/`;
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
  await new Promise((r) => bait?.close(r));
  await emu?.close();
  cleanTemps();
});

const decisions = (): Record<string, unknown> =>
  existsSync(join(runDir, 'review.json')) ? (JSON.parse(readFileSync(join(runDir, 'review.json'), 'utf8')) as Record<string, unknown>) : {};

describe('the review page and framing', () => {
  it('framed by a page of another loopback origin, it draws nothing and a click records no decision', { timeout: 30_000 }, async () => {
    const page = await browser.newPage();
    const answered: Record<string, string>[] = [];
    page.on('response', (r) => {
      if (r.url() === `${server.url}/`) answered.push(r.headers());
    });
    await page.goto(baitUrl);
    await page.locator('#victim').waitFor();
    // The frame's navigation is answered and refused; give it time to have drawn cells if it could.
    await expect.poll(() => answered.length, { timeout: 10_000 }).toBe(1);
    await page.waitForTimeout(1_000);
    const frame = page.frames().find((f) => f !== page.mainFrame());
    expect(frame).toBeDefined();
    // The bait's click on the reject button, as a reviewer lured onto it would make it, if there is one.
    await frame!
      .locator('[data-instance="sheets[seed=1]"] [data-action=reject]')
      .click({ timeout: 3_000 })
      .catch(() => undefined);
    await page.waitForTimeout(500);
    expect(decisions()).toEqual({});
    // Chromium replaces a refused frame with its own error document: no cell, no button.
    expect(frame!.url().startsWith(server.url)).toBe(false);
    expect(await frame!.locator('[data-action=reject]').count()).toBe(0);
    expect(answered[0]).toMatchObject({ 'x-frame-options': 'DENY' });
    expect(answered[0]!['content-security-policy']).toContain("frame-ancestors 'none'");
    await page.close();
  });

  it('unframed, under its policy, the page draws its cells and a click on approve is saved', { timeout: 30_000 }, async () => {
    const page = await browser.newPage();
    const problems = watchPage(page, server.url);
    const response = await page.goto(server.url);
    const policy = response!.headers()['content-security-policy'] ?? '';
    // The page's one inline script and one style are allowed by their hashes, and nothing inline else.
    const html = await response!.text();
    const hash = (text: string): string => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;
    const script = /<script>([\s\S]*?)<\/script>/.exec(html)![1]!;
    const style = /<style>([\s\S]*?)<\/style>/.exec(html)![1]!;
    expect(policy).toContain(`script-src 'self' ${hash(script)};`);
    expect(policy).toContain(`style-src ${hash(style)};`);
    expect(policy).toContain("img-src 'self' data: https://cdn.example.com;");
    expect(policy).not.toContain('unsafe-inline');
    await page.waitForSelector('html[data-ready=true]');
    await page.locator('[data-instance="sheets[seed=1]"] [data-action=approve]').click();
    await page.waitForSelector('[data-instance="sheets[seed=1]"][data-decision=approved]');
    expect(decisions()).toMatchObject({ 'sheets[seed=1]': { decision: 'approved' } });
    // The style applied: an approved cell's border is the page's green, not the browser's default.
    const border = await page.locator('[data-instance="sheets[seed=1]"]').evaluate((el) => getComputedStyle(el).borderTopStyle);
    expect(border).toBe('solid');
    // An inline script that is not the page's own is refused by the policy.
    const ran = await page.evaluate(() => {
      const el = document.createElement('script');
      el.textContent = 'window.__injected = true;';
      document.body.appendChild(el);
      return (window as unknown as { __injected?: boolean }).__injected === true;
    });
    expect(ran).toBe(false);
    expect(problems.filter((p) => !p.includes('window.__injected') && !p.includes('inline script'))).toEqual([]);
    await page.close();
  });
});
