// Two runs side by side in `genpipe ui`: genpipe diff's page of the two, under the ui's policy,
// with each run's images at its gallery routes (which answer them).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startUiServer, type UiServer } from '../../src/ui/ui-server.js';
import type { UiRun } from '../../src/ui/run-watch.js';
import { cleanTemps, HF_KEY, sheetsManifest, tempDir } from '../run/runner-helpers.js';

let emu: Emulator;
let server: UiServer;
let runs: UiRun[];

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  const out = tempDir();
  const io: CliIO = {
    out: () => {},
    write: async () => {},
    err: () => {},
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY },
    signal: new AbortController().signal,
  };
  expect(await main(['run', sheetsManifest(tempDir(), 2, { name: 'pair' }), '--out', out, '--quiet'], io)).toBe(0);
  expect(await main(['run', sheetsManifest(tempDir(), 3, { name: 'pair', brief: 'A robot' }), '--out', out, '--quiet'], io)).toBe(0);
  server = await startUiServer({
    runDirs: [out],
    host: '127.0.0.1',
    port: 0,
    remake: { env: { GENPIPE_BASE_URL: emu.url, HF_KEY }, connectionArgs: [] },
  });
  runs = (await (await fetch(`${server.url}/api/runs`)).json()) as UiRun[];
}, 60_000);

afterAll(async () => {
  await server?.close();
  await emu?.close();
  cleanTemps();
});

describe('genpipe ui: compare', () => {
  it("offers every run, and shows genpipe diff's page of two with their images", async () => {
    const pick = await (await fetch(`${server.url}/compare`)).text();
    for (const run of runs) expect(pick).toContain(`value="${run.key}"`);
    const [b, a] = runs;
    const answer = await fetch(`${server.url}/compare/view?a=${encodeURIComponent(a!.key)}&b=${encodeURIComponent(b!.key)}`);
    expect(answer.status).toBe(200);
    expect(answer.headers.get('x-frame-options')).toBe('DENY');
    const html = await answer.text();
    expect(html).toContain('<meta name="generator" content="genpipe diff">');
    expect(html).toMatch(/2 shared instances \(0 only in A, 1 only in B\); inputs differ in 2/);
    const src = /<img[^>]+src="([^"]+)"/.exec(html)?.[1];
    expect(src).toMatch(/^\.\.\/run\/0\/pair\/[^/]+\/gallery\/outputs\//);
    const image = await fetch(new URL(src!, `${server.url}/compare/view`));
    expect(image.status).toBe(200);
    expect(image.headers.get('content-type')).toBe('image/png');
  });

  it('a remake shows its estimate, and starts only with the page token and a confirmation', async () => {
    const base = `${server.url}/run/${runs[0]!.key}/`;
    const estimate = (await (await fetch(`${base}api/estimate?selection=failed`)).json()) as { instances: string[]; text: string };
    expect(estimate).toMatchObject({ instances: [], text: '0 instances: US$0.00' });
    const post = (headers: Record<string, string>, body: unknown): Promise<Response> =>
      fetch(`${base}api/remake`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', origin: server.url, ...headers },
        body: JSON.stringify(body),
      });
    expect((await post({}, { selection: ['failed'], confirm: true })).status).toBe(403);
    const unconfirmed = await post({ 'x-genpipe-token': server.token }, { selection: ['failed'] });
    expect(unconfirmed.status).toBe(400);
    expect(await unconfirmed.text()).toContain('confirm: true');
    expect((await post({ 'x-genpipe-token': server.token }, { selection: ['everything'], confirm: true })).status).toBe(400);
  });

  it('refuses a run it does not list', async () => {
    expect((await fetch(`${server.url}/compare/view?a=0/pair/nope&b=${encodeURIComponent(runs[0]!.key)}`)).status).toBe(404);
    expect((await fetch(`${server.url}/run/0/pair/..%2F..%2Fetc/`)).status).toBe(404);
  });
});
