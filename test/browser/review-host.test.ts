/// <reference lib="dom" />
// DNS rebinding against `genpipe review`: a page of another site whose name
// resolves to 127.0.0.1 is of that site's origin, so the browser would let it read what the review
// server answers. The server answers only requests whose Host names it (127.0.0.1:PORT,
// localhost:PORT): anything else gets 421 and no run data. Chromium maps evil.test to 127.0.0.1
// with a host-resolver rule, so nothing leaves loopback.
import { readdirSync } from 'node:fs';
import { request } from 'node:http';
import { connect } from 'node:net';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startReviewServer, type ReviewServer } from '../../src/review/review-server.js';
import { cleanTemps, findRunDir, HF_KEY, sheetsManifest, tempDir } from '../run/runner-helpers.js';
import { launchChromium } from './chromium.js';

let emu: Emulator;
let browser: Browser;
let server: ReviewServer;
let runDir: string;
let port: number;
let output: string;

beforeAll(async () => {
  browser = await launchChromium(['--host-resolver-rules=MAP evil.test 127.0.0.1']);
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  const out = tempDir();
  const stderr: string[] = [];
  const io: CliIO = {
    out: () => {},
    write: async () => {},
    err: (t) => stderr.push(t),
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY },
    signal: new AbortController().signal,
  };
  expect(
    await main(['run', sheetsManifest(tempDir(), 2, { name: 'rebound' }), '--out', out, '--rate', '1000', '--quiet'], io),
    stderr.join('\n'),
  ).toBe(0);
  runDir = findRunDir(out, 'rebound');
  const png = readdirSync(join(runDir, 'outputs'), { recursive: true, encoding: 'utf8' }).find((f) => f.endsWith('.png'));
  expect(png).toBeDefined();
  output = `outputs/${png}`;
  server = await startReviewServer(runDir, { host: '127.0.0.1', port: 0 });
  port = Number(new URL(server.url).port);
}, 30_000);

afterAll(async () => {
  await server?.close();
  await browser?.close();
  await emu?.close();
  cleanTemps();
});

/**
 * One GET with the given Host header, on a raw socket so that the header is as written; with
 * none, an HTTP/1.0 request (HTTP/1.1 requires Host, and Node's parser refuses it without).
 */
function rawGet(path: string, host: string | undefined): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => {
      socket.write(
        host === undefined ? `GET ${path} HTTP/1.0\r\n\r\n` : `GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`,
      );
    });
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => (text += chunk));
    socket.on('error', reject);
    socket.on('end', () => {
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(text)?.[1] ?? 0);
      resolve({ status, body: text.slice(text.indexOf('\r\n\r\n') + 4) });
    });
  });
}

describe('the review server answers only to its own name', () => {
  it(
    'in Chromium, a page of evil.test (resolved to 127.0.0.1) gets 421 for the page, review.json and an output, and reads no run data',
    { timeout: 30_000 },
    async () => {
      const page = await browser.newPage();
      const response = await page.goto(`http://evil.test:${port}/`);
      expect(response?.status()).toBe(421);
      const reads = await page.evaluate(
        async (paths: string[]) =>
          Promise.all(
            paths.map(async (p) => {
              const r = await fetch(p, { cache: 'no-store' });
              return { status: r.status, body: await r.text() };
            }),
          ),
        ['/review.json', '/gallery.html', `/${output}`],
      );
      for (const read of reads) {
        expect(read.status).toBe(421);
        expect(read.body).not.toContain('rebound');
        expect(read.body).not.toContain('sheets');
        expect(read.body).not.toContain('PNG');
      }
      const posted = await page.evaluate(
        async () =>
          (
            await fetch('/api/decisions', {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: JSON.stringify({ instance: 'x', decision: 'approved' }),
            })
          ).status,
      );
      expect(posted).toBe(421);
      await page.close();
    },
  );

  it(
    'in Chromium, the page at 127.0.0.1 and at localhost loads, and a decision posted from localhost is taken',
    { timeout: 30_000 },
    async () => {
      const page = await browser.newPage();
      expect((await page.goto(`http://127.0.0.1:${port}/`))?.status()).toBe(200);
      expect((await page.goto(`http://localhost:${port}/`))?.status()).toBe(200);
      expect(await page.content()).toContain('rebound');
      const posted = await page.evaluate(
        async () =>
          (
            await fetch('/api/decisions', {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: JSON.stringify({ instance: 'x', starred: true }),
            })
          ).status,
      );
      expect(posted).toBe(200);
      await page.close();
    },
  );

  it('over plain HTTP, a forged, foreign or missing Host gets 421 and no run data; its own names are answered', async () => {
    for (const host of [
      `evil.test:${port}`,
      'evil.test',
      `127.0.0.1:${port + 1}`,
      `127.0.0.1`,
      `localhost.evil.test:${port}`,
      `[::1]:${port}`,
      undefined,
    ]) {
      for (const path of ['/', '/review.json', `/${output}`]) {
        const answer = await rawGet(path, host);
        expect(answer.status, `${path} with Host ${host}`).toBe(421);
        expect(answer.body).not.toContain('rebound');
      }
    }
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `LocalHost:${port}`]) {
      expect((await rawGet('/review.json', host)).status, host).toBe(200);
      expect((await rawGet(`/${output}`, host)).status, host).toBe(200);
    }
  });

  it('a POST whose Origin is another site is refused even with the right Host', async () => {
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port,
          path: '/api/decisions',
          method: 'POST',
          headers: { origin: `http://evil.test:${port}`, 'content-type': 'application/json' },
        },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      req.on('error', reject);
      req.end(JSON.stringify({ instance: 'x', decision: 'approved' }));
    });
    expect(status).toBe(403);
  });
});
