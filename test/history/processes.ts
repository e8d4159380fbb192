/**
 * The processes a random history drives: the built CLI (`node bin/genpipe.js`, i.e. dist/) as a
 * child process with a hard time bound, a `genpipe worker`, and a redis-server of the history's own
 * on a free loopback port (AOF on, so a kill -9 and restart keeps the queue). No vitest import: the
 * soak script (bench/soak.mjs) bundles this with esbuild and runs it outside vitest.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';

export const KEY_ID = '00000000-0000-4000-8000-000000000000';
export const HF_KEY = `${KEY_ID}:emulator-secret`;

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  ms: number;
  /** The hard bound was hit and the child was SIGKILLed by it (a history failure, not a chosen kill). */
  timedOut: boolean;
}

export interface SpawnOptions {
  bin: string;
  env: Record<string, string>;
  /** A chosen kill -9 this long after spawn. */
  killAfterMs?: number | undefined;
  /** Hard bound on the command; past it the child is SIGKILLed and timedOut is set. */
  boundMs: number;
  /** Called once the child runs, with a function that signals it (a chosen kill -9 or Ctrl-C). */
  onSpawn?: (send: (signal: NodeJS.Signals) => void) => void;
}

export function runCli(args: readonly string[], options: SpawnOptions): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const child = spawn(process.execPath, [options.bin, ...args], {
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', HF_KEY, ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    const send = (signal: NodeJS.Signals): void => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    };
    const kill = (): void => send('SIGKILL');
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timers: NodeJS.Timeout[] = [];
    if (options.killAfterMs !== undefined) timers.push(setTimeout(kill, options.killAfterMs));
    timers.push(
      setTimeout(() => {
        timedOut = child.exitCode === null && child.signalCode === null;
        kill();
      }, options.boundMs),
    );
    options.onSpawn?.(send);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      for (const t of timers) clearTimeout(t);
      resolve({ code, signal, stdout, stderr, ms: Date.now() - started, timedOut });
    });
  });
}

export interface WorkerHandle {
  child: ChildProcess;
  exited: Promise<void>;
  output(): string;
}

/** `genpipe worker` on the queue; resolves once it printed `ready` (bounded: 15 s). */
export async function startWorker(bin: string, redisUrl: string, queue: string, serviceUrl: string, name: string): Promise<WorkerHandle> {
  const child = spawn(process.execPath, [bin, 'worker', '--redis', redisUrl, '--queue', queue, '--name', name, '--concurrency', '4'], {
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', HF_KEY, GENPIPE_BASE_URL: serviceUrl },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`worker ${name} was not ready within 15 s:\n${out}`)), 15_000);
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (/^ready\b/m.test(out)) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.stderr?.on('data', (chunk: Buffer) => (out += chunk.toString()));
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`worker ${name} exited before it was ready:\n${out}`));
    });
  });
  return { child, exited, output: () => out };
}

export async function stopWorker(worker: WorkerHandle | undefined): Promise<void> {
  if (!worker) return;
  if (worker.child.exitCode === null && worker.child.signalCode === null) worker.child.kill('SIGKILL');
  await worker.exited;
}

export interface RedisHandle {
  url: string;
  /** kill -9 */
  stop(): Promise<void>;
  start(): Promise<void>;
  dispose(): Promise<void>;
}

export async function startRedis(): Promise<RedisHandle> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'genpipe-history-redis-'));
  let child: ChildProcess | undefined;
  const start = async (): Promise<void> => {
    const args = [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--dir',
      dir,
      '--save',
      '',
      '--appendonly',
      'yes',
      '--appendfsync',
      'always',
      '--protected-mode',
      'yes',
    ];
    const proc = spawn('redis-server', args, { stdio: 'ignore' });
    child = proc;
    const failed = new Promise<never>((_, reject) =>
      proc.once('error', (e) => reject(new Error(`redis-server could not be started (${e.message}); install Debian's redis-server.`))),
    );
    const deadline = Date.now() + 10_000;
    // Bounded by the deadline.
    for (;;) {
      const probe = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
      probe.on('error', () => {});
      try {
        await Promise.race([probe.connect().then(() => probe.ping()), failed]);
        return;
      } catch (error) {
        if (Date.now() > deadline || proc.exitCode !== null)
          throw new Error(`redis-server on port ${port} did not come up: ${(error as Error).message}`, { cause: error });
        await new Promise((r) => setTimeout(r, 50));
      } finally {
        probe.disconnect();
      }
    }
  };
  const stop = async (): Promise<void> => {
    const proc = child;
    child = undefined;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    proc.kill('SIGKILL');
    await exited;
  };
  await start();
  return {
    url: `redis://127.0.0.1:${port}`,
    stop,
    start,
    dispose: async () => {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
