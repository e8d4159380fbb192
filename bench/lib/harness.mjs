// Shared pieces of the benchmarks: child processes for the emulator and genpipe, a bare node:http
// baseline, medians. Everything listens on and talks to 127.0.0.1 only; every loop is bounded.
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';

/** The bench/ folder. */
export const here = dirname(dirname(fileURLToPath(import.meta.url)));

export const root = dirname(here);
export const bin = join(root, 'bin', 'genpipe.js');
export const HF_KEY = '00000000-0000-4000-8000-000000000000:emulator-secret';

export const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Starts `genpipe emulator` in a child process; resolves with its URL once it listens. */
export function startEmulatorProcess(args = []) {
  const child = spawn(process.execPath, [bin, 'emulator', '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let buffer = '';
    const timer = setTimeout(() => reject(new Error('the emulator did not start within 20 s')), 20_000);
    child.stdout.on('data', (chunk) => {
      buffer += chunk.toString();
      const match = /^listening on (http:\/\/127\.0\.0\.1:\d+)$/m.exec(buffer);
      if (match) {
        clearTimeout(timer);
        resolve({
          url: match[1],
          child,
          cpu: () => cpuOfProcess(child.pid),
          stop: () =>
            new Promise((r) => {
              child.once('exit', r);
              child.kill('SIGINT');
            }),
        });
      }
    });
    child.once('exit', (code) => reject(new Error(`the emulator exited with ${code}`)));
  });
}

/**
 * Runs genpipe in a child process; resolves with its exit code, wall time and peak RSS. With
 * `discardStdout` its output goes to /dev/null, as a user redirecting a big report would send it
 * to a file: collected into a string here, 300 MB of report cost this process (on the same two
 * cores) more than genpipe took to write it.
 */
export function runGenpipe(args, env = {}, { discardStdout = false, nodeArgs = [] } = {}) {
  const started = process.hrtime.bigint();
  const child = spawn(process.execPath, [...nodeArgs, join(here, 'lib', 'measure-cli.mjs'), ...args], {
    stdio: ['ignore', discardStdout ? 'ignore' : 'pipe', 'pipe'],
    env: { ...process.env, HF_KEY, ...env },
  });
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (c) => (stdout += c));
  child.stderr.on('data', (c) => (stderr += c));
  return new Promise((resolve) => {
    child.once('exit', (code) => {
      const measured = measuredIn(stderr) ?? {};
      resolve({
        code,
        wallMs: Number(process.hrtime.bigint() - started) / 1e6,
        maxRssMb: measured.maxRssMb,
        cpu: cpuOfMeasure(measured),
        stdout,
        stderr,
      });
    });
  });
}

/** Requests per second a bare node:http server answers on loopback, at `concurrency`, for `seconds`. */
export async function bareHttpRate({ concurrency = 32, seconds = 3 } = {}) {
  const body = JSON.stringify({ status: 'completed', request_id: '00000000-0000-4000-8000-000000000000' });
  const server = createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${server.address().port}/requests/x/status`;
  const dispatcher = new Agent({ connections: concurrency });
  let count = 0;
  const deadline = Date.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (Date.now() < deadline) {
        const res = await request(url, { dispatcher });
        await res.body.dump();
        count++;
      }
    }),
  );
  await dispatcher.close();
  await new Promise((r) => server.close(r));
  return count / seconds;
}

/** What a `__measure__` line on `stderr` reported (lib/measure-line.mjs), or undefined. */
export function measuredIn(stderr) {
  const line = stderr.split('\n').find((l) => l.startsWith('__measure__'));
  return line === undefined ? undefined : JSON.parse(line.slice('__measure__'.length));
}

/** User + system seconds of a CPU reading (cpuOfProcess, cpuOfMeasure); NaN without one. */
export const cpuSeconds = (cpu) => (cpu ? cpu.userS + cpu.systemS : NaN);

/** CPU seconds (user, system) a `__measure__` line reported, or undefined. */
export const cpuOfMeasure = (measured) => (measured.userS === undefined ? undefined : { userS: measured.userS, systemS: measured.systemS });

/**
 * CPU seconds (user, system) a running process has used so far, every thread, from
 * /proc/<pid>/stat (Linux; in clock ticks of 1/100 s, the kernel's USER_HZ); undefined elsewhere.
 */
export function cpuOfProcess(pid) {
  try {
    // The command name in parentheses may hold spaces; the fields after it are fixed.
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return { userS: Number(fields[11]) / 100, systemS: Number(fields[12]) / 100 };
  } catch {
    return undefined;
  }
}

let ownScratch;

/**
 * A fresh directory for a benchmark's files (`name` starts its name). Under `npm run bench` every
 * one sits in the root bench/run.mjs made (GENPIPE_BENCH_SCRATCH), removed after the last
 * benchmark; a benchmark run by itself removes its own when its process exits. Never in between,
 * while something is measured: on a file system without a journal, as this machine's ext4 is, each
 * file created in the minute after a mass delete scans past the freed inodes (ext4's
 * recently_deleted). A 10,000-instance genpipe run started right after 150,000 files were removed
 * spent 16.3 s in the kernel instead of 3.9 s, and took 1.42x the wall time (2026-11-26).
 * BENCH_KEEP=1 keeps the files.
 */
export function scratchDir(name) {
  const shared = process.env.GENPIPE_BENCH_SCRATCH;
  if (shared) return mkdtempSync(join(shared, `${name}-`));
  if (ownScratch === undefined) {
    ownScratch = mkdtempSync(join(tmpdir(), 'genpipe-bench-'));
    if (!process.env.BENCH_KEEP) process.once('exit', () => rmSync(ownScratch, { recursive: true, force: true }));
  }
  return mkdtempSync(join(ownScratch, `${name}-`));
}

export function writeResults(name, results) {
  mkdirSync(join(here, 'results'), { recursive: true });
  const commit = spawnSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' }).stdout?.trim() || undefined;
  writeFileSync(
    join(here, 'results', `${name}.json`),
    `${JSON.stringify({ benchmark: name, node: process.version, commit, measured_at: new Date().toISOString(), ...results }, null, 2)}\n`,
  );
}

/** A port free on 127.0.0.1 right now (for a receiver whose public URL must name it). */
export async function freePort() {
  const server = createServer();
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  await new Promise((r) => server.close(r));
  return port;
}
