// A server at the base URL that is not the Generation Service (a wrong GENPIPE_BASE_URL): every
// answer is a 2xx whose body is not the API's shape. Each such submit is a protocol error, unknown
// only when it may have spent (a keyless submit); after three in a row the run stops with exit 5 and
// one sentence, and sends nothing more. Real HTTP servers on 127.0.0.1, port 0.
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { runInProcess } from '../../cli/in-process.js';

interface Impostor {
  url: string;
  /** Every request it got, as `METHOD /path`. */
  got: string[];
  close(): Promise<void>;
}

/** A server that answers 200 with the same body to everything. */
async function impostor(body: string, contentType: string): Promise<Impostor> {
  const got: string[] = [];
  const server: Server = createServer((req, res) => {
    got.push(`${req.method} ${req.url}`);
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': contentType }).end(body));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    got,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

let server: Impostor | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

const KEY = '00000000-0000-4000-8000-000000000000:emulator-secret';

interface Report {
  total: { netUsd: number; estimatedUsd: number; unknownUsd: number; counts: Record<string, number> };
}

async function runAgainst(s: Impostor, manifest: string) {
  const dir = mkdtempSync(join(tmpdir(), 'genpipe-protocol-'));
  const path = join(dir, 'm.yaml');
  writeFileSync(path, manifest);
  const out = join(dir, 'runs');
  const run = await runInProcess(['run', path, '--out', out, '--quiet'], { GENPIPE_BASE_URL: s.url, HF_KEY: KEY });
  const pipeline = join(out, /name: (\S+)/.exec(manifest)?.[1] as string);
  const runDir = join(pipeline, readdirSync(pipeline).find((n) => !n.startsWith('.')) as string);
  const report = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as Report;
  return { run, report, runDir };
}

const SHEETS = `version: 1
name: sheets
steps:
  sheets:
    model: character-sheet
    matrix: { seed: { range: { from: 1, to: 16 } } }
    input: { tier: cats, seed: "{{ seed }}" }
`;

const IMAGES = `version: 1
name: images
prices: { marketing-image: 0.01 }
steps:
  ads:
    model: marketing-image
    matrix: { n: [1, 2, 3, 4, 5, 6, 7, 8] }
    input: { prompt: "Hero banner {{ n }}", resolution: 1k, quality: low }
`;

const STOP = /^3 submits in a row got answers that are not the Generation Service's, so the run stopped sending: check the base URL/m;

describe("a base URL that is not the Generation Service's", () => {
  it.each([
    ['200 ok as text', 'ok', 'text/plain'],
    ['200 {} as JSON', '{}', 'application/json'],
  ])('%s: keyed sheets stop after 3 submits, exit 5, said resendable, nothing charged', { timeout: 60_000 }, async (_name, body, type) => {
    server = await impostor(body, type);
    const { run, report, runDir } = await runAgainst(server, SHEETS);
    expect(run.code, run.err).toBe(5);
    const submits = server.got.filter((r) => r.startsWith('POST '));
    expect(submits.length).toBeGreaterThan(0);
    expect(submits.length).toBeLessThanOrEqual(3);
    expect(run.err).toMatch(STOP);
    // Each names the service and says the keyed submit can be resent; none says it may have been charged.
    const lines = run.err.split('\n').filter((l) => l.startsWith('sheets['));
    expect(lines).toHaveLength(submits.length);
    for (const line of lines) expect(line).toMatch(/not the Generation Service's \(check the base URL\).*can be resent safely/);
    expect(run.err).not.toMatch(/unknown|to avoid paying twice|\n\s+at /);
    // Nothing charged or committed for keyed submits: the report says 0, and none is unknown.
    expect(report.total.netUsd).toBe(0);
    expect(report.total.unknownUsd).toBe(0);
    expect(report.total.counts.unknown).toBe(0);
    // A resume against the same server sends again (with the same keys), and stops the same way.
    const before = server.got.length;
    const again = await runInProcess(['resume', runDir, '--quiet'], { GENPIPE_BASE_URL: server.url, HF_KEY: KEY });
    expect(again.code, again.err).toBe(5);
    expect(server.got.filter((r) => r.startsWith('POST ')).length - submits.length).toBeLessThanOrEqual(3);
    expect(server.got.length).toBeGreaterThan(before);
  });

  it(
    'keyless images: each is unknown (it may have spent), with the same words, and the run stops after 3',
    { timeout: 60_000 },
    async () => {
      server = await impostor('ok', 'text/plain');
      const { run, report } = await runAgainst(server, IMAGES);
      expect(run.code, run.err).toBe(5);
      const submits = server.got.filter((r) => r.startsWith('POST '));
      expect(submits).toHaveLength(3);
      expect(run.err).toMatch(STOP);
      const lines = run.err.split('\n').filter((l) => l.startsWith('ads['));
      expect(lines).toHaveLength(3);
      for (const line of lines)
        expect(line).toMatch(/unknown: .*not the Generation Service's \(check the base URL\).*may still have been charged/);
      // Their price stays counted, as unknown: the budget never forgets a possible charge.
      expect(report.total.counts.unknown).toBe(3);
      expect(report.total.unknownUsd).toBe(0.03);
    },
  );
});
