import { createServer, type Server } from 'node:http';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';
import type { CliIO } from '../../src/cli/io.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { acquirePipelineLock } from '../../src/run/lock/lock.js';
import { cleanTemps, emuRequests, HF_KEY, sheetsManifest, tempDir } from '../run/runner-helpers.js';

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

interface Delivery {
  path: string;
  body: { event: string; exit_code?: number; exitCode?: number; message?: string; [k: string]: unknown };
}

let emulator: Emulator;
let receiver: Server;
let hook = '';
const deliveries: Delivery[] = [];

beforeAll(async () => {
  emulator = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      deliveries.push({ path: req.url ?? '', body: JSON.parse(body) as Delivery['body'] });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const address = receiver.address();
  hook = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
});
afterAll(async () => {
  await emulator.close();
  await new Promise((r) => receiver.close(r));
  cleanTemps();
});

const take = (): Delivery[] => deliveries.splice(0, deliveries.length);

describe('a run that does not start still notifies, and leaves a record genpipe runs lists', () => {
  it('two overlapping ticks and a misconfigured one: every target told each time, nothing sent to the service', async () => {
    const dir = tempDir();
    const out = join(dir, 'runs');
    const manifest = sheetsManifest(dir, 2, { name: 'nightly', extra: `notify:\n  - url: ${hook}/manifest\n    on: [failure]\n` });
    const env = { HF_KEY, GENPIPE_BASE_URL: emulator.url };
    // Yesterday's run, still going: it holds the pipeline's lock.
    const holder = await acquirePipelineLock(join(out, 'nightly', '.lock'), 'yesterday-run', 'skip', new AbortController().signal);
    const before = emuRequests(emulator).length;
    take();
    try {
      for (let tick = 0; tick < 2; tick++) {
        const io = capture(env);
        expect(await main(['run', manifest, '--out', out, '--notify', `${hook}/flag`, '--quiet'], io)).toBe(4);
        expect(io.stderr[0]).toMatch(/^genpipe: Another run of this pipeline holds the lock: run yesterday-run/);
      }
    } finally {
      await holder.release();
    }
    const misconfigured = capture({ HF_KEY });
    expect(await main(['run', manifest, '--out', out, '--notify', `${hook}/flag`, '--quiet'], misconfigured)).toBe(2);

    const got = take();
    // Two targets (the manifest's and --notify) for each of three ticks.
    expect(got.map((d) => d.path).sort()).toEqual(['/flag', '/flag', '/flag', '/manifest', '/manifest', '/manifest']);
    for (const d of got) expect(d.body.event).toBe('failure');
    const messages = got.map((d) => JSON.stringify(d.body));
    expect(messages.filter((m) => m.includes('holds the lock')).length).toBe(4);
    expect(messages.filter((m) => m.includes('No service address is set')).length).toBe(2);
    expect(emuRequests(emulator).length).toBe(before);

    const runs = capture({});
    expect(await main(['runs', '--out', out, '--json'], runs)).toBe(0);
    const listed = (JSON.parse(runs.stdout.join('\n')) as { status: string; pipeline: string }[]).map((r) => r.status);
    // Ticks of the same second sort by their random suffix: compared as a set.
    expect(listed.sort()).toEqual([
      'refused: no service address is set',
      'skipped: overlap with run yesterday-run',
      'skipped: overlap with run yesterday-run',
    ]);
    const text = capture({});
    expect(await main(['runs', '--out', out], text)).toBe(0);
    expect(text.stdout.join('\n')).toContain('skipped: overlap with run yesterday-run');
  });

  it('a manifest wrong elsewhere still tells its notify: targets; validate and plan never notify', async () => {
    const dir = tempDir();
    const manifest = join(dir, 'broken.yaml');
    writeFileSync(
      manifest,
      `version: 1\nname: broken\nnotify:\n  - url: ${hook}/manifest\nsteps:\n  sheets:\n    model: character-sheet\n    input: {tier: dogz, seed: 1}\n`,
    );
    take();
    const env = { HF_KEY, GENPIPE_BASE_URL: emulator.url };
    expect(await main(['validate', manifest], capture(env))).toBe(2);
    expect(await main(['plan', manifest], capture(env))).toBe(2);
    expect(take()).toEqual([]);
    const io = capture(env);
    expect(await main(['run', manifest, '--out', join(dir, 'runs'), '--quiet'], io)).toBe(2);
    const got = take();
    expect(got.map((d) => d.path)).toEqual(['/manifest']);
    expect(String(got[0]?.body.message ?? JSON.stringify(got[0]?.body))).toContain('did not start');
  });

  it('a run that starts is told of once, by the session alone', async () => {
    const dir = tempDir();
    const manifest = sheetsManifest(dir, 1, { name: 'once' });
    take();
    const io = capture({ HF_KEY, GENPIPE_BASE_URL: emulator.url });
    expect(await main(['run', manifest, '--out', join(dir, 'runs'), '--notify', `${hook}/flag`, '--quiet'], io)).toBe(0);
    expect(take().map((d) => d.body.event)).toEqual(['finish']);
  });
});
