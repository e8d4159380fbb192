// Downloads that reach local services: an output URL on a loopback, link-local
// or private address is refused unless it has the origin of one of the service's addresses, at
// every hop of a redirect. A listener on another loopback port counts the requests that reach it:
// none may, while the emulator's own outputs (served from its own origin) still download.
import { readdirSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../../src/cli/io.js';
import { main } from '../../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../../src/emulator/index.js';
import { checkDownloadAddress, DownloadError, isInternalHost } from '../../../src/run/files/download.js';
import { cleanTemps, emuRequests, findRunDir, HF_KEY, journalOf, sheetsManifest, tempDir } from '../runner-helpers.js';
import { startRewritingProxy, type RewritingProxy } from '../rewriting-proxy.js';

function capture(env: NodeJS.ProcessEnv): CliIO & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  return {
    stdout,
    stderr,
    out: (t) => stdout.push(t),
    write: async (t) => void stdout.push(t),
    err: (t) => stderr.push(t),
    env,
    signal: new AbortController().signal,
  };
}

let emu: Emulator;
let internal: Server;
let internalUrl: string;
let internalHits: string[] = [];
const proxies: RewritingProxy[] = [];

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  // Another local service: an admin page that must never be reached through genpipe.
  internal = createServer((req, res) => {
    internalHits.push(req.url ?? '');
    res.writeHead(200, { 'content-type': 'image/png' }).end(Buffer.from([0x89, 0x50, 0x4e, 0x47]));
  });
  await new Promise<void>((resolve) => internal.listen(0, '127.0.0.1', resolve));
  internalUrl = `http://127.0.0.1:${(internal.address() as AddressInfo).port}`;
});
afterAll(async () => {
  for (const p of proxies) await p.close();
  internal.closeAllConnections();
  await new Promise<void>((resolve) => internal.close(() => resolve()));
  await emu.close();
  cleanTemps();
});

/** A service whose completed statuses point their images somewhere else: `url` for each image. */
async function pointingAt(url: string): Promise<RewritingProxy> {
  const proxy = await startRewritingProxy(
    emu.url,
    (e) => e,
    (json) => {
      if (json.status === 'completed' && Array.isArray(json.images)) json.images = json.images.map(() => ({ url }));
    },
  );
  proxies.push(proxy);
  return proxy;
}

describe('output URLs on local addresses', () => {
  it('the emulator serves its outputs from its own origin, and they download', { timeout: 30_000 }, async () => {
    const out = tempDir();
    const io = capture({ GENPIPE_BASE_URL: emu.url, HF_KEY });
    expect(
      await main(['run', sheetsManifest(tempDir(), 2, { name: 'own' }), '--out', out, '--rate', '1000', '--quiet'], io),
      io.stderr.join('\n'),
    ).toBe(0);
    const runDir = findRunDir(out, 'own');
    const urls = journalOf(runDir).records.flatMap((r) => (r.type === 'status' ? r.outputs.map((o) => o.url) : []));
    expect(urls.length).toBe(2);
    for (const url of urls) expect(new URL(url).origin).toBe(emu.url);
    expect(readdirSync(join(runDir, 'outputs'), { recursive: true }).filter((f) => String(f).endsWith('.png'))).toHaveLength(2);
  });

  it(
    'an output URL at another loopback port is refused: zero requests reach it, the instance fails saying why',
    { timeout: 30_000 },
    async () => {
      internalHits = [];
      const proxy = await pointingAt(`${internalUrl}/internal/admin`);
      const out = tempDir();
      const io = capture({ GENPIPE_BASE_URL: proxy.url, HF_KEY });
      const code = await main(['run', sheetsManifest(tempDir(), 2, { name: 'pointed' }), '--out', out, '--rate', '1000', '--quiet'], io);
      expect(code).toBe(1);
      expect(internalHits).toEqual([]);
      expect(io.stderr.join('\n')).toContain(
        `Refusing to download ${internalUrl}/internal/admin: it is on a local or private address that is not the service's`,
      );
    },
  );

  it(
    'the same through a redirect: the service redirects its output to another local port, which sees nothing',
    { timeout: 30_000 },
    async () => {
      internalHits = [];
      // The emulator's own origin answers, but the output path is one the proxy turns into a redirect.
      const redirecting = createServer((req, res) => {
        if (req.url === '/out.png') res.writeHead(302, { location: `${internalUrl}/internal/admin` }).end();
        else res.writeHead(404).end();
      });
      await new Promise<void>((resolve) => redirecting.listen(0, '127.0.0.1', resolve));
      const redirector = `http://127.0.0.1:${(redirecting.address() as AddressInfo).port}`;
      try {
        // The redirector is configured as the CDN: its origin is the service's, the next hop's is not.
        const proxy = await pointingAt(`${redirector}/out.png`);
        const out = tempDir();
        const io = capture({ GENPIPE_BASE_URL: proxy.url, GENPIPE_CDN_URL: redirector, HF_KEY });
        expect(
          await main(['run', sheetsManifest(tempDir(), 1, { name: 'redirected' }), '--out', out, '--rate', '1000', '--quiet'], io),
        ).toBe(1);
        expect(internalHits).toEqual([]);
        expect(io.stderr.join('\n')).toMatch(/Refusing the redirect|Refusing to download/);
      } finally {
        redirecting.closeAllConnections();
        await new Promise<void>((resolve) => redirecting.close(() => resolve()));
      }
    },
  );

  it('a URL at the service origin with another path still downloads (what the emulator does)', { timeout: 30_000 }, async () => {
    const before = emuRequests(emu).length;
    const proxy = await pointingAt(`${emu.url}/cdn/nothing-here.png`);
    const out = tempDir();
    // The emulator's origin is configured as the CDN: allowed, so the GET is sent (and gets its 404).
    const io = capture({ GENPIPE_BASE_URL: proxy.url, GENPIPE_CDN_URL: emu.url, HF_KEY });
    await main(['run', sheetsManifest(tempDir(), 1, { name: 'allowed' }), '--out', out, '--rate', '1000', '--quiet'], io);
    expect(emuRequests(emu).length).toBe(before + 1);
    expect(io.stderr.join('\n')).not.toContain('local or private address');
  });
});

describe('which addresses are internal', () => {
  it('loopback, link-local, private, CGNAT and unspecified, as IPv4, IPv6 and mapped; public ones are not', () => {
    for (const host of [
      '127.0.0.1',
      '127.8.9.10',
      'localhost',
      'app.localhost',
      '10.1.2.3',
      '172.16.0.1',
      '172.31.255.255',
      '192.168.1.1',
      '169.254.169.254',
      '100.64.0.1',
      '0.0.0.0',
      '[::1]',
      '[::]',
      '[fe80::1]',
      '[fc00::1]',
      '[fd12:3456::1]',
      '[::ffff:7f00:1]',
      '[::ffff:a9fe:a9fe]',
    ]) {
      expect(isInternalHost(host), host).toBe(true);
    }
    for (const host of ['8.8.8.8', '172.32.0.1', '192.169.0.1', '100.128.0.1', 'example.com', '[2001:4860::8888]', '[::ffff:808:808]']) {
      expect(isInternalHost(host), host).toBe(false);
    }
  });

  it("the URL parser's spellings of loopback (0x7f.1, 2130706433) are caught; the service origin passes, another port does not", () => {
    for (const url of ['http://0x7f.1:4000/x', 'http://2130706433:4000/x', 'http://[0:0::1]:4000/x']) {
      expect(() => checkDownloadAddress(new URL(url), new Set(['http://127.0.0.1:4010']))).toThrow(DownloadError);
    }
    expect(() => checkDownloadAddress(new URL('http://127.0.0.1:4010/cdn/a.png'), new Set(['http://127.0.0.1:4010']))).not.toThrow();
    expect(() => checkDownloadAddress(new URL('http://127.0.0.1:4010/cdn/a.png'), undefined)).toThrow(DownloadError);
    expect(() => checkDownloadAddress(new URL('https://cdn.example.com/a.png'), undefined)).not.toThrow();
  });
});
