// Reliability rule 24 through the CLI: plain http to a host that is not loopback is refused before
// any request (exit 2, one sentence), unless the user allows it.
//
// The refused address here is reachable: http://0.0.0.0:PORT is not loopback by genpipe's rule
// (127.0.0.0/8, ::1, localhost), yet on Linux a connection to 0.0.0.0 lands on this machine, where
// a counting server listens on 127.0.0.1:PORT. So "nothing was sent" is counted, not assumed, and
// the allowed runs show the same address would have been reached.
import { mkdtempSync, readdirSync, writeFileSync, existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';

const dir = mkdtempSync(join(tmpdir(), 'genpipe-insecure-'));
const quickstart = new URL('../../pipelines/quickstart.yaml', import.meta.url).pathname;
let server: Server;
let port = 0;
let requests = 0;

beforeAll(async () => {
  server = createServer((req, res) => {
    requests++;
    res.writeHead(404, { 'content-type': 'application/json' }).end('{"detail":"Not found"}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));
beforeEach(() => {
  requests = 0;
});

async function genpipe(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stderr: string[] }> {
  const stderr: string[] = [];
  const io: CliIO = {
    out: () => {},
    write: async () => {},
    err: (t) => stderr.push(t),
    env: { HF_KEY: 'id:secret-value', ...env },
    signal: new AbortController().signal,
  };
  const code = await main(args, io);
  return { code, stderr };
}

const sentence = (setting: string, from: string): string =>
  `genpipe: ${setting} (${from}) is plain http to 0.0.0.0:${port}, which would send your credentials unencrypted: use https, or pass --allow-insecure-http (GENPIPE_ALLOW_INSECURE_HTTP=1, or allow_insecure_http: true in the config file) to accept that.`;

describe('genpipe refuses plain http to a host that is not loopback', () => {
  it('status --base-url http://0.0.0.0:PORT: exit 2, one sentence, no request', async () => {
    const refused = await genpipe(['status', 'req-1', '--base-url', `http://0.0.0.0:${port}`]);
    expect(refused).toEqual({ code: 2, stderr: [sentence('base_url', 'from --base-url')] });
    expect(requests).toBe(0);
  });

  it('the same address is reached once allowed, by the flag, the environment or the config file', async () => {
    const url = `http://0.0.0.0:${port}`;
    expect((await genpipe(['status', 'req-1', '--base-url', url, '--allow-insecure-http'])).code).toBe(1); // the server's 404
    expect(requests).toBe(1);
    expect((await genpipe(['status', 'req-1'], { GENPIPE_BASE_URL: url, GENPIPE_ALLOW_INSECURE_HTTP: '1' })).code).toBe(1);
    expect(requests).toBe(2);
    const config = join(dir, 'allow.yaml');
    writeFileSync(config, `base_url: ${url}\nallow_insecure_http: true\n`);
    expect((await genpipe(['status', 'req-1', '--config', config])).code).toBe(1);
    expect(requests).toBe(3);
  });

  it('loopback http needs no permission', async () => {
    expect((await genpipe(['status', 'req-1', '--base-url', `http://127.0.0.1:${port}`])).code).toBe(1);
    expect(requests).toBe(1);
  });

  it('GENPIPE_PLATFORM_URL and a config file cdn_url are refused the same way', async () => {
    const fromEnv = await genpipe(['status', 'req-1', '--base-url', `http://127.0.0.1:${port}`], {
      GENPIPE_PLATFORM_URL: `http://0.0.0.0:${port}`,
    });
    expect(fromEnv).toEqual({ code: 2, stderr: [sentence('platform_url', 'from GENPIPE_PLATFORM_URL')] });
    const config = join(dir, 'cdn.yaml');
    writeFileSync(config, `base_url: http://127.0.0.1:${port}\ncdn_url: http://0.0.0.0:${port}\n`);
    const fromFile = await genpipe(['catalog', 'presets', '--config', config]);
    expect(fromFile).toEqual({ code: 2, stderr: [sentence('cdn_url', `from the config file ${config}`)] });
    expect(requests).toBe(0);
  });

  it('run: exit 2 before anything is sent or created; with --emulator every address is the emulator, so a remote --cdn-url gets nothing', async () => {
    const out = join(dir, 'runs');
    const remote = await genpipe(['run', quickstart, '--out', out, '--base-url', `http://0.0.0.0:${port}`]);
    expect(remote).toEqual({ code: 2, stderr: [sentence('base_url', 'from --base-url')] });
    expect(requests).toBe(0);
    // No run directory: only the line a night that did not run leaves (not-started.jsonl).
    expect(existsSync(out) ? readdirSync(join(out, 'quickstart')) : []).toEqual(existsSync(out) ? ['not-started.jsonl'] : []);
    // --emulator points the base, platform and CDN addresses at the embedded emulator (embeddedConfig).
    const embedded = await genpipe([
      'run',
      quickstart,
      '--out',
      join(dir, 'embedded'),
      '--emulator',
      '--quiet',
      '--cdn-url',
      `http://0.0.0.0:${port}`,
    ]);
    expect(embedded.code).toBe(0);
    expect(requests).toBe(0);
  });

  it('run --emulator on 127.0.0.1 keeps working', async () => {
    const out = join(dir, 'emulated');
    const result = await genpipe(['run', quickstart, '--out', out, '--emulator', '--quiet']);
    expect(result).toEqual({ code: 0, stderr: [] });
    expect(existsSync(join(out, 'quickstart'))).toBe(true);
  });
});
