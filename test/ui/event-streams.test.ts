// The event streams of `genpipe ui` share one cap, against the real server on loopback with a
// redis-server of the file's own: the runs list's stream, a run page's and the fleet page's count
// alike, the next of any kind is refused with 503, closing one frees its place, and each answers
// with the same headers.
import { get, type ClientRequest, type IncomingMessage } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { parseRedisUrl } from '../../src/fleet/redis.js';
import { startUiServer, type UiServer } from '../../src/ui/ui-server.js';
import type { UiRun } from '../../src/ui/run-watch.js';
import { useTestRedis } from '../fleet/fleet-helpers.js';
import { cleanTemps, HF_KEY, sheetsManifest, tempDir } from '../run/runner-helpers.js';

const redis = useTestRedis();
let emu: Emulator;
let server: UiServer;
/** The three kinds of stream: the runs list's, a run page's (set once the run is made) and the fleet page's. */
const paths = { runs: '/api/events', run: '', fleet: '/api/fleet/events' };

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
  expect(await main(['run', sheetsManifest(tempDir(), 2, { name: 'streamed' }), '--out', out, '--quiet', '--budget', '5'], io)).toBe(0);
  const target = parseRedisUrl(redis.url);
  server = await startUiServer({
    runDirs: [out],
    host: '127.0.0.1',
    port: 0,
    redis: { target, shown: target.shown, queue: 'genpipe' },
    fleetIntervalMs: 500,
    maxStreams: 3,
  });
  const [run] = (await (await fetch(`${server.url}/api/runs`)).json()) as UiRun[];
  paths.run = `/run/${run!.key.split('/').map(encodeURIComponent).join('/')}/api/events`;
}, 60_000);

afterAll(async () => {
  await server?.close();
  await emu?.close();
  cleanTemps();
});

interface Opened {
  status: number;
  headers: IncomingMessage['headers'];
  /** The body up to its first event (a stream), or whole (a refusal). */
  text: string;
  request: ClientRequest;
  closed: Promise<void>;
}

/** Opens `path` and resolves once its first event came (200) or its body ended (anything else). */
function open(path: string): Promise<Opened> {
  return new Promise((resolve, reject) => {
    const request = get(`${server.url}${path}`, (res) => {
      let text = '';
      const closed = new Promise<void>((done) => res.once('close', () => done()));
      const answer = (): void => resolve({ status: res.statusCode ?? 0, headers: res.headers, text, request, closed });
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
        if (res.statusCode === 200 && /^event: \w+$/m.test(text) && text.includes('\n\n')) answer();
      });
      res.on('end', answer);
    });
    request.on('error', reject);
  });
}

const STREAM_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-store',
  'x-frame-options': 'DENY',
  'content-security-policy': "frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
};

describe('genpipe ui: one cap over every event stream', () => {
  it('counts the runs list, a run page and the fleet page alike, and frees a place on close', { timeout: 30_000 }, async () => {
    const opened = { runs: await open(paths.runs), run: await open(paths.run), fleet: await open(paths.fleet) };
    for (const [kind, stream] of Object.entries(opened)) {
      expect(stream.status, kind).toBe(200);
      expect(stream.headers, kind).toMatchObject(STREAM_HEADERS);
    }
    expect(opened.runs.text).toMatch(/^event: runs\n/m);
    expect(opened.run.text).toMatch(/^event: state\n/m);
    expect(opened.fleet.text).toMatch(/^event: fleet\n/m);

    // Three are open: a fourth of any kind is refused, and the answer names the cap.
    for (const path of Object.values(paths)) {
      const refused = await open(path);
      expect(refused.status, path).toBe(503);
      expect(refused.text).toBe('at most 3 pages may follow live at once: close one and reload this one');
    }

    // The fleet page goes: its place takes a run page, and the cap is full again.
    opened.fleet.request.destroy();
    await opened.fleet.closed;
    let again = await open(paths.run);
    for (let tries = 0; again.status === 503 && tries < 50; tries += 1) {
      await new Promise((wait) => setTimeout(wait, 20));
      again = await open(paths.run);
    }
    expect(again.status).toBe(200);
    expect(again.headers).toMatchObject(STREAM_HEADERS);
    expect((await open(paths.fleet)).status).toBe(503);
    expect((await open(paths.runs)).status).toBe(503);

    for (const stream of [opened.runs, opened.run, again]) stream.request.destroy();
  });
});
