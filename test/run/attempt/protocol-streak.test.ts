// "Three in a row": a submit the service answers in its own shape starts the count of protocol
// errors again from zero. In front of the emulator, a loopback server answers chosen submits with
// `200 ok` (not the API's shape) and passes every other request through. Bad, bad, good, bad, bad,
// good never stops the run; bad, bad, good, bad, bad, bad stops it at the sixth submit, exit 5.
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../../src/emulator/index.js';
import { runInProcess } from '../../cli/in-process.js';
import { HF_KEY } from '../runner-helpers.js';

interface Front {
  url: string;
  /** The submits (POSTs) it saw, in order: `bad` when it answered them itself. */
  submits: ('bad' | 'passed')[];
  close(): Promise<void>;
}

/** Answers the POSTs whose 1-based number is in `bad` with `200 ok`; everything else goes to `target`, its address in answers made this one's. */
async function front(target: string, bad: ReadonlySet<number>): Promise<Front> {
  const upstream = new URL(target);
  const submits: Front['submits'] = [];
  let own = '';
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method === 'POST') {
        const n = submits.length + 1;
        submits.push(bad.has(n) ? 'bad' : 'passed');
        if (bad.has(n)) {
          res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
          return;
        }
      }
      const headers = { ...req.headers, host: upstream.host };
      const out = request({ host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers }, (answer) => {
        const body: Buffer[] = [];
        answer.on('data', (c: Buffer) => body.push(c));
        answer.on('end', () => {
          let bytes = Buffer.concat(body);
          if (String(answer.headers['content-type'] ?? '').includes('json'))
            bytes = Buffer.from(bytes.toString('utf8').split(target).join(own));
          const { 'content-length': _length, 'transfer-encoding': _encoding, ...rest } = answer.headers;
          res.writeHead(answer.statusCode ?? 502, { ...rest, 'content-length': String(bytes.length) }).end(bytes);
        });
      });
      out.on('error', () => res.destroy());
      out.end(Buffer.concat(chunks));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  own = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url: own,
    submits,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

const IMAGES = `version: 1
name: images
prices: { marketing-image: 0.01 }
defaults:
  concurrency: 1
  polling: { initial_ms: 100, min_ms: 20, max_ms: 200 }
steps:
  ads:
    model: marketing-image
    matrix: { n: [1, 2, 3, 4, 5, 6] }
    input: { prompt: "Hero banner {{ n }}", resolution: 1k, quality: low }
`;

const STOP = /^3 submits in a row got answers that are not the Generation Service's, so the run stopped sending/m;

let emulator: Emulator;
beforeAll(async () => {
  emulator = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterAll(async () => {
  await emulator?.close();
});

async function runThrough(bad: number[]) {
  const server = await front(emulator.url, new Set(bad));
  try {
    const dir = mkdtempSync(join(tmpdir(), 'genpipe-streak-'));
    writeFileSync(join(dir, 'm.yaml'), IMAGES);
    const out = join(dir, 'runs');
    const run = await runInProcess(['run', join(dir, 'm.yaml'), '--out', out, '--yes'], { GENPIPE_BASE_URL: server.url, HF_KEY });
    if (run.code === 2) throw new Error(run.err);
    const runDir = join(out, 'images', readdirSync(join(out, 'images')).find((n) => !n.startsWith('.')) as string);
    const report = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { total: { counts: Record<string, number> } };
    return { run, report, submits: [...server.submits] };
  } finally {
    await server.close();
  }
}

describe('protocol errors stop a run only three in a row', () => {
  it('bad, bad, good, bad, bad, good: every submit goes out, the run is not stopped', { timeout: 60_000 }, async () => {
    const { run, report, submits } = await runThrough([1, 2, 4, 5]);
    expect(submits).toEqual(['bad', 'bad', 'passed', 'bad', 'bad', 'passed']);
    expect(run.code, run.err).not.toBe(5);
    expect(run.err).not.toMatch(STOP);
    expect(report.total.counts).toMatchObject({ completed: 2, unknown: 4 });
  });

  it('bad, bad, good, bad, bad, bad: stopped at the sixth submit, exit 5, nothing more sent', { timeout: 60_000 }, async () => {
    const { run, report, submits } = await runThrough([1, 2, 4, 5, 6]);
    expect(submits).toEqual(['bad', 'bad', 'passed', 'bad', 'bad', 'bad']);
    expect(run.code, run.err).toBe(5);
    expect(run.err).toMatch(STOP);
    expect(report.total.counts).toMatchObject({ completed: 1, unknown: 5 });
  });
});
