// The access rules of `genpipe ui`, against the real server on loopback: the Host header must name
// it (no DNS rebinding), a write needs the page's Origin and the token of this start, every answer
// refuses framing, and on an address other than loopback every request needs the token.
import { request } from 'node:http';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { listRuns } from '../../src/report/run-list.js';
import { STALE_TOKEN } from '../../src/ui/access.js';
import { startUiServer, type UiServer } from '../../src/ui/ui-server.js';
import type { UiRun } from '../../src/ui/run-watch.js';
import { cleanTemps, HF_KEY, sheetsManifest, tempDir } from '../run/runner-helpers.js';

let emu: Emulator;
let out: string;
let server: UiServer;
let port: number;
const TOKEN = 'a'.repeat(43);

/** A POST route to check the write rules against: answers 200 once the rules let a request through. */
const echo = (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse, url: URL): boolean => {
  if (url.pathname !== '/api/echo') return false;
  res.writeHead(200, { 'content-type': 'text/plain' });
  res.end(req.method);
  return true;
};

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  out = tempDir();
  const io: CliIO = {
    out: () => {},
    write: async () => {},
    err: () => {},
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY },
    signal: new AbortController().signal,
  };
  expect(await main(['run', sheetsManifest(tempDir(), 3, { name: 'guarded' }), '--out', out, '--quiet', '--budget', '5'], io)).toBe(0);
  server = await startUiServer({ runDirs: [out], host: '127.0.0.1', port: 0, token: TOKEN, extraRoutes: [echo] });
  port = Number(new URL(server.url).port);
}, 60_000);

afterAll(async () => {
  await server?.close();
  await emu?.close();
  cleanTemps();
});

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** One request on a raw socket, so the Host header is exactly as written. */
function raw(targetPort: number, lines: string[], body = ''): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const socket = connect(targetPort, '127.0.0.1', () => {
      socket.write(`${[...lines, `Content-Length: ${Buffer.byteLength(body)}`, 'Connection: close'].join('\r\n')}\r\n\r\n${body}`);
    });
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => (text += chunk));
    socket.on('error', reject);
    socket.on('end', () => {
      const head = text.slice(0, text.indexOf('\r\n\r\n'));
      const headers: Record<string, string> = {};
      for (const line of head.split('\r\n').slice(1)) {
        const at = line.indexOf(':');
        headers[line.slice(0, at).toLowerCase()] = line.slice(at + 1).trim();
      }
      let rest = text.slice(head.length + 4);
      if (headers['transfer-encoding'] === 'chunked') rest = dechunk(rest);
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0), headers, body: Buffer.from(rest, 'latin1').toString('utf8') });
    });
  });
}

function dechunk(text: string): string {
  let out = '';
  for (let at = 0; ;) {
    const end = text.indexOf('\r\n', at);
    const size = parseInt(text.slice(at, end), 16);
    if (!(size > 0)) return out;
    out += text.slice(end + 2, end + 2 + size);
    at = end + 2 + size + 2;
  }
}

const get = (path: string, host: string, extra: string[] = []): Promise<Answer> =>
  raw(port, [`GET ${path} HTTP/1.1`, `Host: ${host}`, ...extra]);
const post = (host: string, extra: string[]): Promise<Answer> => raw(port, ['POST /api/echo HTTP/1.1', `Host: ${host}`, ...extra], '{}');

describe('genpipe ui on loopback', () => {
  it('answers its own names, and 421 with no run data to any other Host', async () => {
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`]) {
      const answer = await get('/api/runs', host);
      expect(answer.status, host).toBe(200);
      expect(answer.body).toContain('guarded');
    }
    for (const host of [`evil.test:${port}`, 'evil.test', `127.0.0.1:${port + 1}`, `127.0.0.1.evil.test:${port}`]) {
      const answer = await get('/api/runs', host);
      expect(answer.status, host).toBe(421);
      expect(answer.body).not.toContain('guarded');
    }
  });

  it('refuses framing on every answer: page, data, refusal and not found', async () => {
    for (const [path, host] of [
      ['/', `127.0.0.1:${port}`],
      ['/api/runs', `127.0.0.1:${port}`],
      ['/nothing', `127.0.0.1:${port}`],
      ['/', `evil.test:${port}`],
    ] as const) {
      const answer = await get(path, host);
      expect(answer.headers['x-frame-options'], path).toBe('DENY');
      expect(answer.headers['content-security-policy'], path).toContain("frame-ancestors 'none'");
    }
  });

  it("takes a write only from its page's Origin with this start's token", async () => {
    const host = `127.0.0.1:${port}`;
    const origin = `Origin: http://${host}`;
    const token = `x-genpipe-token: ${TOKEN}`;
    expect((await post(host, [token])).status).toBe(403);
    expect((await post(host, ['Origin: http://evil.test', token])).status).toBe(403);
    expect((await post(host, [origin])).status).toBe(403);
    // Another start's token, as a page opened before a restart carries: the refusal says to reload it.
    const stale = await post(host, [origin, `x-genpipe-token: ${'b'.repeat(43)}`]);
    expect(stale.status).toBe(403);
    expect(stale.body).toBe(STALE_TOKEN);
    expect((await post(host, [origin, token])).status).toBe(200);
    // The token is in the page, which only a page of this origin can read.
    expect((await get('/', host)).body).toContain(`content="${TOKEN}"`);
  });

  it('lists the runs with the figures of genpipe runs', async () => {
    const listed = JSON.parse((await get('/api/runs', `127.0.0.1:${port}`)).body) as UiRun[];
    const [expected] = await listRuns(out);
    expect(listed).toHaveLength(1);
    expect(listed[0]).toMatchObject({ ...expected, status: 'completed', budgetUsd: 5, failed: 0, unknown: 0 });
    expect(listed[0]!.text).toMatchObject({ net: 'US$0.15', committed: 'US$0.15', budget: 'US$5.00', done: '3/3' });
  });
});

describe('genpipe ui on an address other than loopback', () => {
  it('needs the token on every request, reads included, and keeps it in a cookie once given in the address', async () => {
    const open = await startUiServer({ runDirs: [out], host: '0.0.0.0', port: 0 });
    try {
      expect(open.everyRequest).toBe(true);
      expect(open.token).not.toBe(TOKEN);
      const openPort = Number(new URL(open.url).port);
      const openGet = (path: string, extra: string[] = []): Promise<Answer> =>
        raw(openPort, [`GET ${path} HTTP/1.1`, `Host: genpipe-box.lan:${openPort}`, ...extra]);
      const refused = await openGet('/api/runs');
      expect(refused.status).toBe(401);
      expect(refused.body).not.toContain('guarded');
      expect((await openGet('/api/runs', ['Authorization: Bearer wrong'])).status).toBe(401);
      expect((await openGet('/api/runs', [`Authorization: Bearer ${open.token}`])).status).toBe(200);
      const given = await openGet(`/?token=${open.token}`);
      expect(given.status).toBe(303);
      expect(given.headers.location).toBe('/');
      expect(given.headers['set-cookie']).toContain('HttpOnly');
      const cookie = given.headers['set-cookie']!.split(';')[0]!;
      expect((await openGet('/api/runs', [`Cookie: ${cookie}`])).status).toBe(200);
      // A write still needs the page's Origin and the token header, cookie or not.
      const write = (extra: string[]): Promise<Answer> =>
        raw(openPort, ['POST /api/echo HTTP/1.1', `Host: genpipe-box.lan:${openPort}`, `Cookie: ${cookie}`, ...extra], '{}');
      expect((await write(['Origin: http://evil.test'])).status).toBe(403);
    } finally {
      await open.close();
    }
  });
});

describe('the event stream', () => {
  it('sends the whole list first', async () => {
    const text = await new Promise<string>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path: '/api/events' }, (res) => {
        let got = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          got += chunk;
          if (got.includes('\n\n')) {
            req.destroy();
            resolve(got);
          }
        });
      });
      req.on('error', reject);
      req.end();
    });
    expect(text.startsWith('event: runs\ndata: ')).toBe(true);
    expect(text).toContain('"pipeline":"guarded"');
  });
});
