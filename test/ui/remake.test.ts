// A remake from a run's page, against the real ui server on loopback: a resume process that cannot
// start is answered as not started (its reason in ui-remake.log) and the ui goes on answering; a
// remake confirmed twice at once (two tabs) starts one process, the second is refused in one
// sentence until that process exits, and then a remake starts again.
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
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

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

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

  it('confirmed twice at once starts one process; the second is refused until it exits, then one starts again', async () => {
    // A program that runs for a moment (its arguments unread), standing for the resume.
    const sleeper = join(tempDir(), 'sleeper.sh');
    writeFileSync(sleeper, '#!/bin/sh\nsleep 1\n');
    chmodSync(sleeper, 0o700);
    const server = await ui(sleeper);
    const run = await theRun(server);
    const answers = await Promise.all([remake(server, run), remake(server, run)]);
    expect(answers.map((a) => a.status).sort()).toEqual([202, 409]);
    const started = JSON.parse(answers.find((a) => a.status === 202)!.body) as { started: true; pid: number };
    const refused = JSON.parse(answers.find((a) => a.status === 409)!.body) as { started: false; why: string };
    expect(refused.why).toMatch(
      /^a remake of this run (is starting already|started already \(pid \d+\) and has not ended); wait for it to end before asking for another$/,
    );
    // While it runs, a third is refused too, naming its pid.
    expect(alive(started.pid)).toBe(true);
    const third = await remake(server, run);
    expect(third.status).toBe(409);
    expect(JSON.parse(third.body)).toEqual({
      started: false,
      why: `a remake of this run started already (pid ${started.pid}) and has not ended; wait for it to end before asking for another`,
    });
    await expect.poll(() => alive(started.pid), { timeout: 10_000, interval: 50 }).toBe(false);
    // Its exit is seen by the ui a moment after the process is gone.
    await expect.poll(async () => (await remake(server, run)).status, { timeout: 10_000, interval: 100 }).toBe(202);
    expect(existsSync(join(run.dir, REMAKE_LOG))).toBe(true);
  });
});
