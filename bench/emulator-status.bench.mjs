#!/usr/bin/env node
// Status requests per second the emulator sustains on loopback, next to a bare node:http server
// answering a status body of the same size, measured in the same run with the same client (undici
// Pool, keep-alive), the same concurrency and the same duration. Each server runs in its own child
// process; the load generator runs here. Median of 3 rounds, alternating servers.
// Targets: emulator >= 25% of the bare server, and >= 5,000 requests per second.
import { fork, spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';

const here = dirname(fileURLToPath(import.meta.url));
const DURATION_MS = 3_000;
const WARMUP_MS = 500;
const ROUNDS = 3;
const CONCURRENCY = 32;
const KEY = '00000000-0000-4000-8000-000000000000:emulator-secret';

async function serve(kind) {
  if (kind === 'bare') {
    // What the emulator answers for a completed character sheet, as a fixed string.
    const body = JSON.stringify({
      status: 'completed',
      request_id: '7f0c2a5e-1d4b-4c1e-9a7b-2b8e3c4d5f60',
      status_url: 'http://127.0.0.1:1/requests/7f0c2a5e-1d4b-4c1e-9a7b-2b8e3c4d5f60/status',
      cancel_url: 'http://127.0.0.1:1/requests/7f0c2a5e-1d4b-4c1e-9a7b-2b8e3c4d5f60/cancel',
      images: [{ url: 'http://127.0.0.1:1/cdn/outputs/7f0c2a5e-1d4b-4c1e-9a7b-2b8e3c4d5f60/sheet.png' }],
    });
    const server = createServer({ keepAliveTimeout: 5_000 }, (req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    });
    server.listen(0, '127.0.0.1', () =>
      process.send({ port: server.address().port, path: '/requests/7f0c2a5e-1d4b-4c1e-9a7b-2b8e3c4d5f60/status' }),
    );
  } else {
    const { startEmulator } = await import('../dist/emulator/index.js');
    const emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
    const res = await fetch(`${emu.url}/vendor/ai-influencer`, {
      method: 'POST',
      headers: { authorization: `Key ${KEY}`, 'content-type': 'application/json' },
      body: '{}',
    });
    const { request_id: id } = await res.json();
    await new Promise((r) => setTimeout(r, 20)); // let it complete (time scale 0)
    process.send({ port: emu.port, path: `/requests/${id}/status` });
  }
  process.on('message', (m) => {
    if (m === 'stop') process.exit(0);
  });
}

async function startChild(kind) {
  const child = fork(fileURLToPath(import.meta.url), ['--serve', kind], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const info = await new Promise((resolve, reject) => {
    child.once('message', resolve);
    child.once('exit', (code) => reject(new Error(`${kind} server exited with ${code}`)));
  });
  return { child, ...info };
}

async function load(port, path, ms) {
  const pool = new Pool(`http://127.0.0.1:${port}`, { connections: CONCURRENCY, pipelining: 1, keepAliveTimeout: 10_000 });
  const headers = { authorization: `Key ${KEY}` };
  let ok = 0;
  let failed = 0;
  const deadline = Date.now() + ms;
  const worker = async () => {
    while (Date.now() < deadline) {
      const res = await pool.request({ path, method: 'GET', headers });
      await res.body.text();
      if (res.statusCode === 200) ok++;
      else failed++;
    }
  };
  const started = Date.now();
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const elapsed = Date.now() - started;
  await pool.close();
  return { rps: (ok / elapsed) * 1000, ok, failed };
}

async function measure(kind) {
  const { child, port, path } = await startChild(kind);
  await load(port, path, WARMUP_MS);
  const result = await load(port, path, DURATION_MS);
  child.send('stop');
  await new Promise((r) => child.once('exit', r));
  if (result.failed > 0) throw new Error(`${kind}: ${result.failed} non-200 answers`);
  return result.rps;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function measureAll() {
  const bare = [];
  const emulator = [];
  for (let round = 0; round < ROUNDS; round++) {
    bare.push(await measure('bare'));
    emulator.push(await measure('emulator'));
  }
  const bareRps = median(bare);
  const emuRps = median(emulator);
  const ratio = emuRps / bareRps;
  const pass = ratio >= 0.25 && emuRps >= 5_000;
  const results = {
    name: 'emulator-status',
    date: new Date().toISOString(),
    node: process.version,
    // The commit measured, as bench/lib/harness.mjs writeResults records it for the others.
    commit: spawnSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: here, encoding: 'utf8' }).stdout?.trim() || undefined,
    concurrency: CONCURRENCY,
    duration_ms: DURATION_MS,
    rounds: ROUNDS,
    bare_rps: bare.map(Math.round),
    emulator_rps: emulator.map(Math.round),
    bare_median_rps: Math.round(bareRps),
    emulator_median_rps: Math.round(emuRps),
    ratio: Math.round(ratio * 1000) / 1000,
    targets: { min_ratio: 0.25, min_rps: 5_000 },
    pass,
  };
  mkdirSync(join(here, 'results'), { recursive: true });
  writeFileSync(join(here, 'results', 'emulator-status.json'), `${JSON.stringify(results, null, 2)}\n`);
  const row = (name, xs, m) =>
    `${name.padEnd(18)} ${xs.map((x) => String(Math.round(x)).padStart(8)).join(' ')} ${String(Math.round(m)).padStart(10)}`;
  console.log(`status requests per second, ${CONCURRENCY} concurrent, ${DURATION_MS / 1000} s x ${ROUNDS} rounds`);
  console.log(`${'server'.padEnd(18)} ${['round 1', 'round 2', 'round 3'].map((s) => s.padStart(8)).join(' ')} ${'median'.padStart(10)}`);
  console.log(row('bare node:http', bare, bareRps));
  console.log(row('emulator', emulator, emuRps));
  console.log(
    `ratio emulator/bare: ${(ratio * 100).toFixed(1)}% (target >= 25%), emulator ${Math.round(emuRps)} req/s (target >= 5000): ${pass ? 'PASS' : 'FAIL'}`,
  );
  if (!pass) process.exitCode = 1;
}

if (process.argv[2] === '--serve') await serve(process.argv[3]);
else await measureAll();
