// The executor conformance suite, so both executors keep the same promises: every scenario runs on both executors, this
// process (local) and a fleet's queue (redis, with the coordinator's own worker), through the CLI in
// process, against a real emulator and a redis-server of the file's own on 127.0.0.1. The driver
// has no fleet branch, so a scenario that passes on one and fails on the other is an executor bug.
// Each scenario checks money the same way: report.json's net equals the emulator's ledger.
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../../src/cli/io.js';
import { main } from '../../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../../src/emulator/index.js';
import { ReviewStore } from '../../../src/review/review-store.js';
import { useTestRedis } from '../../fleet/fleet-helpers.js';
import { findRunDir, freePort, tempDir } from '../runner-helpers.js';

const redis = useTestRedis();
let emu: Emulator;
beforeAll(async () => {
  // Requests take tens of ms, so they overlap (limits) and are followed, not answered at once.
  emu = await startEmulator({ port: 0, timeScale: 0.02, log: () => {} });
});
afterAll(async () => {
  await emu.close();
});

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

const EXECUTORS = ['local', 'redis'] as const;
type ExecutorName = (typeof EXECUTORS)[number];
let queues = 0;

/** `genpipe ARGS` in this process; on the redis executor with a queue of its own per run. */
async function genpipe(
  executor: ExecutorName,
  argv: readonly string[],
  signal = new AbortController().signal,
  baseUrl = emu.url,
): Promise<Run> {
  const stdout: string[] = [];
  const stderr: string[] = [];
  const env = { GENPIPE_BASE_URL: baseUrl, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}`, GENPIPE_LOCK_STALE_MS: '3000' };
  const io: CliIO = { out: (t) => stdout.push(t), write: async (t) => void stdout.push(t), err: (t) => stderr.push(t), env, signal };
  const fleet = executor === 'redis' ? ['--redis', redis.url, '--queue', `conformance-${++queues}`] : [];
  const code = await main([...argv, ...fleet, '--quiet'], io);
  return { code, stdout: stdout.join('\n'), stderr: stderr.join('\n') };
}

/** US$ the account spent at the emulator so far. */
const ledgerUsd = (): number => Math.round(emu.ledger.netMicros((e) => e.key_id === DEFAULT_KEY_ID)) / 1e6;
const requests = (): number => emu.requests.inspect({}).length;
const totalOf = (runDir: string): { netUsd: number; unknownUsd: number; counts: Record<string, number> } =>
  (
    JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as {
      total: { netUsd: number; unknownUsd: number; counts: Record<string, number> };
    }
  ).total;
const usd = (n: number): number => Math.round(n * 1e6) / 1e6;

const POLLING = 'defaults:\n  polling: { initial_ms: 100, min_ms: 20, max_ms: 400 }\n';

function manifest(dir: string, name: string, steps: string, extra = ''): string {
  const path = join(dir, `${name}.yaml`);
  writeFileSync(path, `version: 1\nname: ${name}\n${POLLING}${extra}steps:\n${steps}`);
  return path;
}

const sheets = (dir: string, name: string, count: number, extra = ''): string =>
  manifest(
    dir,
    name,
    `  s:\n    model: character-sheet\n    matrix: { seed: { range: { from: 1, to: ${count} } } }\n    input: { tier: cats, seed: "{{ seed }}" }\n`,
    extra,
  );

/** A server that is not the service: `200 ok` (text) to everything; counts the POSTs it gets. */
async function impostor(): Promise<{ url: string; posts: () => number; close: () => Promise<void> }> {
  let posts = 0;
  const server = createServer((req, res) => {
    if (req.method === 'POST') posts++;
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'text/plain' }).end('ok'));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    posts: () => posts,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

describe.each(EXECUTORS)('executor conformance: %s', (executor) => {
  it(
    'protocol errors: a base URL that is not the service stops the run after 3 submits (exit 5); keyed ones cost nothing, keyless ones are unknown',
    { timeout: 60_000 },
    async () => {
      const fake = await impostor();
      try {
        const dir = tempDir();
        const out = join(dir, 'runs');
        const keyed = await genpipe(executor, ['run', sheets(dir, `impostor-${executor}`, 8), '--out', out], undefined, fake.url);
        expect(keyed.code, keyed.stderr).toBe(5);
        expect(fake.posts()).toBe(3);
        expect(keyed.stderr).toMatch(/^3 submits in a row got answers that are not the Generation Service's/m);
        expect(totalOf(findRunDir(out, `impostor-${executor}`))).toMatchObject({ netUsd: 0, unknownUsd: 0 });
        const images = manifest(
          dir,
          `impostor-ads-${executor}`,
          '  a:\n    model: marketing-image\n    matrix: { n: [1, 2, 3, 4, 5] }\n    input: { prompt: "Ad {{ n }}", resolution: 1k, quality: low }\n',
          'prices: { marketing-image: 0.01 }\n',
        );
        const keyless = await genpipe(executor, ['run', images, '--out', out], undefined, fake.url);
        expect(keyless.code, keyless.stderr).toBe(5);
        expect(fake.posts()).toBe(6);
        expect(totalOf(findRunDir(out, `impostor-ads-${executor}`))).toMatchObject({ unknownUsd: 0.03, counts: { unknown: 3 } });
      } finally {
        await fake.close();
      }
    },
  );

  it(
    'budget: the run stops before going over, a plain resume keeps the budget, a larger one finishes; the report is the ledger',
    { timeout: 60_000 },
    async () => {
      const dir = tempDir();
      const out = join(dir, 'runs');
      const spent = ledgerUsd();
      const first = await genpipe(executor, [
        'run',
        sheets(dir, `budget-${executor}`, 5),
        '--out',
        out,
        '--budget',
        '0.12',
        '--concurrency',
        '1',
      ]);
      expect(first.code, first.stderr).toBe(3);
      const runDir = findRunDir(out, `budget-${executor}`);
      expect(usd(ledgerUsd() - spent)).toBe(0.1);
      expect(totalOf(runDir).netUsd).toBe(0.1);
      const again = await genpipe(executor, ['resume', runDir]);
      expect(again.code, again.stderr).toBe(3);
      expect(usd(ledgerUsd() - spent)).toBe(0.1);
      const more = await genpipe(executor, ['resume', runDir, '--budget', '1']);
      expect(more.code, more.stderr).toBe(0);
      expect(usd(ledgerUsd() - spent)).toBe(0.25);
      expect(totalOf(runDir)).toMatchObject({ netUsd: 0.25, unknownUsd: 0 });
    },
  );

  it(
    're-rolls: an nsfw result is re-rolled with new seeds up to 3 times, every nsfw attempt refunded; the report is the ledger',
    { timeout: 60_000 },
    async () => {
      const dir = tempDir();
      const out = join(dir, 'runs');
      const spent = ledgerUsd();
      const sent = requests();
      const path = manifest(
        dir,
        `rerolls-${executor}`,
        '  s:\n    model: character-sheet\n    on_nsfw: reroll\n    matrix: { b: ["a calm cat", "[emulator:nsfw] a cat"] }\n    input: { tier: cats, seed: 7, brief: "{{ b }}" }\n',
      );
      const run = await genpipe(executor, ['run', path, '--out', out]);
      expect(run.code, run.stderr).toBe(1);
      const runDir = findRunDir(out, `rerolls-${executor}`);
      // One calm sheet, and the nsfw one sent four times (the first and three re-rolls), each with its own seed.
      expect(requests() - sent).toBe(5);
      const bodies = emu.requests
        .inspect({})
        .slice(sent)
        .map((r) => (r as { body_hash: string }).body_hash);
      expect(new Set(bodies).size).toBe(5);
      expect(usd(ledgerUsd() - spent)).toBe(0.05);
      expect(totalOf(runDir)).toMatchObject({ netUsd: 0.05, unknownUsd: 0, counts: expect.objectContaining({ completed: 1, nsfw: 1 }) });
    },
  );

  it('limits: --concurrency 3 holds at the service over 12 sheets, and every one completes once', { timeout: 60_000 }, async () => {
    const dir = tempDir();
    const out = join(dir, 'runs');
    const spent = ledgerUsd();
    emu.requests.peakActive = emu.requests.active;
    const run = await genpipe(executor, ['run', sheets(dir, `limits-${executor}`, 12), '--out', out, '--concurrency', '3']);
    expect(run.code, run.stderr).toBe(0);
    expect(emu.requests.peakActive).toBeGreaterThan(1);
    expect(emu.requests.peakActive).toBeLessThanOrEqual(3);
    expect(usd(ledgerUsd() - spent)).toBe(0.6);
    expect(totalOf(findRunDir(out, `limits-${executor}`))).toMatchObject({
      netUsd: 0.6,
      counts: expect.objectContaining({ completed: 12 }),
    });
  });

  it('webhooks: requests are followed by their deliveries, one confirming status GET each', { timeout: 60_000 }, async () => {
    const dir = tempDir();
    const out = join(dir, 'runs');
    const port = await freePort();
    const statusGets = (): number => emu.stats.byRoute.get('GET /requests/:id/status') ?? 0;
    const before = statusGets();
    const spent = ledgerUsd();
    // Slow polling: a request polled rather than told would be looked at after 30 s, past the test's bound.
    const path = manifest(
      dir,
      `hooks-${executor}`,
      '  s:\n    model: character-sheet\n    matrix: { seed: { range: { from: 1, to: 6 } } }\n    input: { tier: cats, seed: "{{ seed }}" }\n',
    );
    const run = await genpipe(executor, [
      'run',
      path,
      '--out',
      out,
      '--webhook-url',
      `http://127.0.0.1:${port}/hooks`,
      '--listen',
      `127.0.0.1:${port}`,
    ]);
    expect(run.code, run.stderr).toBe(0);
    expect(statusGets() - before).toBe(6);
    expect(usd(ledgerUsd() - spent)).toBe(0.3);
    expect(totalOf(findRunDir(out, `hooks-${executor}`)).netUsd).toBe(0.3);
  });

  it(
    'retry rejected: a rejected sheet is remade once, a repeat with no new decision sends nothing; the report is the ledger',
    { timeout: 60_000 },
    async () => {
      const dir = tempDir();
      const out = join(dir, 'runs');
      const spent = ledgerUsd();
      const sent = requests();
      expect((await genpipe(executor, ['run', sheets(dir, `rejects-${executor}`, 3), '--out', out])).code).toBe(0);
      const runDir = findRunDir(out, `rejects-${executor}`);
      await new ReviewStore(runDir).apply({ instance: 's[seed=2]', decision: 'rejected' });
      const remade = await genpipe(executor, ['resume', runDir, '--retry', 'rejected']);
      expect(remade.code, remade.stderr).toBe(0);
      expect(requests() - sent).toBe(4);
      const repeat = await genpipe(executor, ['resume', runDir, '--retry', 'rejected']);
      expect(repeat.code, repeat.stderr).toBe(0);
      expect(requests() - sent).toBe(4);
      expect(usd(ledgerUsd() - spent)).toBe(0.2);
      expect(totalOf(runDir)).toMatchObject({ netUsd: 0.2, unknownUsd: 0 });
    },
  );

  it(
    "break-lock: a resume that breaks a live run's lock (--force) takes it over; the old holder stops, nothing is paid twice",
    { timeout: 90_000 },
    async () => {
      const dir = tempDir();
      const out = join(dir, 'runs');
      const spent = ledgerUsd();
      const sent = requests();
      const name = `takeover-${executor}`;
      const path = manifest(
        dir,
        name,
        '  p:\n    model: soul-standard\n    matrix: { n: { range: { from: 1, to: 24 } } }\n    input: { prompt: "Takeover poster {{ n }}", aspect_ratio: "1:1", resolution: 1080p }\n',
        'prices: { soul-standard: 0.03 }\n',
      );
      const first = genpipe(executor, ['run', path, '--out', out, '--rate', '4', '--concurrency', '2']);
      const end = Date.now() + 30_000;
      // Bounded by the deadline.
      while (requests() - sent < 4 && Date.now() < end) await new Promise((r) => setTimeout(r, 25));
      const runDir = findRunDir(out, name);
      const second = await genpipe(executor, ['resume', runDir, '--break-lock', '--force']);
      const old = await first;
      expect(old.code, old.stderr).toBe(4);
      expect([0, 1], second.stderr).toContain(second.code);
      expect(old.stderr + second.stderr).not.toMatch(/internal error|ENOENT/);
      // Keyless images: each request is an image paid once, none sent twice.
      expect(requests() - sent).toBe(24);
      const total = totalOf(runDir);
      expect(usd(total.netUsd + total.unknownUsd)).toBe(usd(ledgerUsd() - spent));
      expect(usd(ledgerUsd() - spent)).toBe(0.72);
    },
  );
});
