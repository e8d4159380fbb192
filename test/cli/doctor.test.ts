// genpipe doctor checks a setup before the night and spends nothing: against a standalone
// emulator, a redis-server of its own, s3rver for a sink and a notify receiver, all on 127.0.0.1.
// Every check passes (exit 0) and the emulator's ledger is unchanged; wrong credentials (401), an
// address nothing listens on, and a Redis that is down or stuck each fail their own line (exit 1),
// within the per-check deadline.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess } from './in-process.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { startTestRedis, type TestRedis } from '../fleet/redis-server.js';
import { receiver } from '../notify/receiver.js';
import { cleanTemps, filesUnder, freePort, HF_KEY, KEY_ID, tempDir } from '../run/runner-helpers.js';
import { startLoopbackS3, useStoreCredentials, type LoopbackS3 } from '../sink/s3-server.js';

let emu: Emulator;
let redis: TestRedis;
let store: LoopbackS3;
let undo: () => void;
const closers: (() => Promise<void>)[] = [];

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  redis = await startTestRedis();
  store = await startLoopbackS3({ buckets: ['media'] });
  undo = useStoreCredentials(store);
}, 60_000);
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});
afterAll(async () => {
  undo?.();
  await store?.stop();
  await redis?.dispose();
  await emu?.close();
  cleanTemps();
});

interface Check {
  name: string;
  status: 'ok' | 'failed' | 'note';
  message: string;
  durationMs: number;
}

async function doctor(args: string[], env: Record<string, string> = {}): Promise<{ code: number; out: string; err: string }> {
  return runInProcess(['doctor', ...args], { ...process.env, GENPIPE_BASE_URL: emu.url, HF_KEY, ...env });
}

function manifest(dir: string, hook: string): string {
  const path = join(dir, 'nightly.yaml');
  writeFileSync(
    path,
    `version: 1
name: nightly
notify:
  - url: ${hook}/hook
prices:
  marketing-image: 0.04
defaults:
  output:
    sink: { url: "s3://media/nightly/{{ run.id }}", endpoint: "${store.endpoint}", path_style: true }
steps:
  sheets:
    model: character-sheet
    input: { tier: cats, selection: {} }
  ads:
    model: marketing-image
    matrix:
      preset: { presets: { name: "*", limit: 1 } }
    input: { prompt: A poster, preset_id: "{{ preset.id }}" }
`,
  );
  return path;
}

const ledgerOf = (e: Emulator): { balance: number; accounts: number } => ({
  balance: e.ledger.balanceMicros(KEY_ID),
  accounts: e.ledger.accounts.size,
});

const byName = (checks: Check[], start: string): Check => {
  const found = checks.find((c) => c.name.startsWith(start));
  expect(found, `a check named ${start}... in ${JSON.stringify(checks.map((c) => c.name))}`).toBeDefined();
  return found!;
};

describe('genpipe doctor', () => {
  it('every check passes, in one line each; nothing is spent and the emulator got only reads', { timeout: 60_000 }, async () => {
    const hook = await receiver();
    closers.push(hook.close);
    const path = manifest(tempDir(), hook.url);
    const before = ledgerOf(emu);
    emu.stats.reset();
    const result = await doctor([path, '--redis', redis.url]);
    expect(result.code, result.out + result.err).toBe(0);
    const lines = result.out.trim().split('\n');
    expect(lines.at(-1)).toBe('Every check passed.');
    expect(
      lines.slice(0, -1).every((l) => /^(ok|note) {3,}\S/.test(l)),
      result.out,
    ).toBe(true);
    expect(result.out).toMatch(
      /^ok +main API credentials \(http:\/\/127\.0\.0\.1:\d+\): accepted: the status of a random request id answered 404/m,
    );
    expect(result.out).toMatch(/^ok +reachable: main API, platform, agent media \(http:\/\/127\.0\.0\.1:\d+\): answered \(HTTP \d+\)\.$/m);
    expect(result.out).toMatch(/^ok +catalog: character-sheet options: read: revision /m);
    expect(result.out).toMatch(/^ok +catalog: marketing presets: read: \d+ visible preset/m);
    expect(result.out).toMatch(/^ok +Redis \(redis:\/\/127\.0\.0\.1:\d+\/?\d*\): answered PING\.$/m);
    expect(result.out).toMatch(
      /^ok +storage sink s3:\/\/media\/nightly\/doctor \(steps sheets, ads\): writable: a probe object was written under the prefix and removed\.$/m,
    );
    expect(result.out).toMatch(/^ok +notify http:\/\/127\.0\.0\.1:\d+\/…: a valid URL; 127\.0\.0\.1 resolves; nothing was sent/m);
    expect(result.out).toMatch(/^note +legacy platform credentials: not checked: .*spends credits\.$/m);
    // The sink's probe object was removed: nothing of it is left in the store.
    expect(filesUnder(store.directory).filter((f) => f.includes('genpipe-probe'))).toEqual([]);
    // Nothing spent, nothing delivered without --send-test; the emulator saw reads only.
    expect(ledgerOf(emu)).toEqual(before);
    expect(emu.requests.inspect({})).toHaveLength(0);
    expect(hook.received).toHaveLength(0);
    // The requests the emulator got: the status of one random id, the two catalogs; each a GET.
    const routes = [...emu.stats.byRoute.entries()].sort(([a], [b]) => a.localeCompare(b));
    expect(routes.map(([route]) => route.split(' ')[0])).toEqual(['GET', 'GET', 'GET']);
    expect(routes.map(([route, n]) => [route.replace(/^GET /, ''), n])).toEqual([
      ['/marketing-studio/image/presets', 1],
      [expect.stringMatching(/options$/), 1],
      ['/requests/:id/status', 1],
    ]);
  });

  it('--send-test delivers one test message per target; --json gives every check for scripts', { timeout: 60_000 }, async () => {
    const hook = await receiver();
    closers.push(hook.close);
    const path = manifest(tempDir(), hook.url);
    const before = ledgerOf(emu);
    const result = await doctor([path, '--send-test', '--json']);
    expect(result.code, result.out).toBe(0);
    const doc = JSON.parse(result.out) as { ok: boolean; checks: Check[] };
    expect(doc.ok).toBe(true);
    expect(byName(doc.checks, 'notify ').message).toMatch(/^a test message was delivered \(HTTP 200\)$/);
    expect(hook.received).toHaveLength(1);
    expect(hook.received[0]!.body).toMatchObject({ run_id: 'doctor-test', outcome: 'test', exit_code: 0 });
    expect(ledgerOf(emu)).toEqual(before);
  });

  it('wrong credentials: the main API answers 401, that check fails, exit 1', { timeout: 30_000 }, async () => {
    const result = await doctor(['--json'], { HF_KEY: `${KEY_ID}:not-the-secret` });
    expect(result.code).toBe(1);
    const doc = JSON.parse(result.out) as { ok: boolean; checks: Check[] };
    expect(doc.ok).toBe(false);
    const credentials = byName(doc.checks, 'main API credentials');
    expect(credentials).toMatchObject({ status: 'failed' });
    expect(credentials.message).toMatch(/^refused: the main API answered 401/);
    expect(byName(doc.checks, 'reachable:').status).toBe('ok');
    expect(result.out).not.toContain('not-the-secret');
  });

  it('an address nothing listens on fails its own line, within the deadline, exit 1', { timeout: 30_000 }, async () => {
    const closed = await freePort();
    const result = await doctor(['--platform-url', `http://127.0.0.1:${closed}`, '--timeout', '3']);
    expect(result.code).toBe(1);
    expect(result.out).toMatch(
      new RegExp(`^failed +reachable: platform \\(http://127\\.0\\.0\\.1:${closed}\\): cannot be reached \\(ECONNREFUSED\\)\\.$`, 'm'),
    );
    expect(result.out).toMatch(/^ok +reachable: main API, agent media /m);
    expect(result.out.trim().split('\n').at(-1)).toBe('1 check failed.');
  });

  it('a manifest that cannot be read is a failed line, and the other checks still run', { timeout: 30_000 }, async () => {
    const result = await doctor([join(tempDir(), 'missing.yaml')]);
    expect(result.code).toBe(1);
    expect(result.out).toMatch(/^failed +manifest: .*missing\.yaml: the manifest file does not exist/m);
    expect(result.out).toMatch(/^ok +main API credentials /m);
  });

  it('Redis down fails its line; a Redis that accepts and never answers fails at the timeout', { timeout: 30_000 }, async () => {
    const down = await freePort();
    const refused = await doctor(['--redis', `redis://127.0.0.1:${down}`, '--json']);
    expect(refused.code).toBe(1);
    const redisCheck = byName((JSON.parse(refused.out) as { checks: Check[] }).checks, 'Redis');
    expect(redisCheck.status).toBe('failed');
    expect(redisCheck.message).toMatch(/could not be reached \(ECONNREFUSED\)/);

    redis.signal('SIGSTOP');
    try {
      const started = Date.now();
      const stuck = await doctor(['--redis', redis.url, '--timeout', '1', '--json']);
      expect(stuck.code).toBe(1);
      const check = byName((JSON.parse(stuck.out) as { checks: Check[] }).checks, 'Redis');
      expect(check.status).toBe('failed');
      expect(check.durationMs).toBeLessThan(2_500);
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      redis.signal('SIGCONT');
    }
  });
});
