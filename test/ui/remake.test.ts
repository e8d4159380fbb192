// A remake from a run's page, against the real ui server on loopback: a resume process that cannot
// start is answered as not started (its reason in ui-remake.log) and the ui goes on answering.
import { chmodSync, readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { REMAKE_LOG } from '../../src/ui/remake.js';
import type { UiRun } from '../../src/ui/run-watch.js';
import { startUiServer, type UiServer } from '../../src/ui/ui-server.js';
import { cleanTemps, HF_KEY, sheetsManifest, tempDir } from '../run/runner-helpers.js';

const TOKEN = 'c'.repeat(43);
let emu: Emulator;
let out: string;
const servers: UiServer[] = [];

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
  expect(await main(['run', sheetsManifest(tempDir(), 2, { name: 'remade' }), '--out', out, '--quiet'], io)).toBe(0);
}, 60_000);

afterAll(async () => {
  for (const server of servers) await server.close();
  await emu?.close();
  cleanTemps();
});

async function ui(execPath: string): Promise<UiServer> {
  const server = await startUiServer({
    runDirs: [out],
    host: '127.0.0.1',
    port: 0,
    token: TOKEN,
    remake: { env: {}, connectionArgs: [], execPath },
  });
  servers.push(server);
  return server;
}

function ask(server: UiServer, method: string, path: string, body?: string): Promise<{ status: number; body: string }> {
  const url = new URL(path, server.url);
  return new Promise((resolve, reject) => {
    const req = request(url, {
      method,
      headers: { origin: new URL(server.url).origin, 'x-genpipe-token': TOKEN, 'content-type': 'application/json' },
    });
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function theRun(server: UiServer): Promise<UiRun> {
  const runs = JSON.parse((await ask(server, 'GET', '/api/runs')).body) as UiRun[];
  expect(runs).toHaveLength(1);
  return runs[0] as UiRun;
}

const remake = (server: UiServer, run: UiRun): Promise<{ status: number; body: string }> =>
  ask(server, 'POST', `/run/${run.key}/api/remake`, JSON.stringify({ selection: ['failed'], confirm: true }));

describe('a remake from the ui', () => {
  it('that cannot start is answered as not started, its reason in ui-remake.log, and the ui goes on answering', async () => {
    // A file that is not executable: the spawn fails with EACCES, as an 'error' event after spawn() returns.
    const cannot = join(tempDir(), 'not-a-program');
    writeFileSync(cannot, 'not a program\n');
    chmodSync(cannot, 0o600);
    const server = await ui(cannot);
    const run = await theRun(server);
    const answer = await remake(server, run);
    expect(answer.status).toBe(409);
    expect(JSON.parse(answer.body)).toEqual({ started: false, why: expect.stringMatching(/^the resume process did not start: .*EACCES/) });
    expect(readFileSync(join(run.dir, REMAKE_LOG), 'utf8')).toMatch(/the remake did not start: .*EACCES/);
    // The ui is still up, and a later remake is not refused as one already started.
    expect((await ask(server, 'GET', '/api/runs')).status).toBe(200);
    expect((await remake(server, run)).body).toContain('did not start');
  });
});
