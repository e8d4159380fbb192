/**
 * The processes a random history drives: the built CLI (`node bin/genpipe.js`, i.e. dist/) as a
 * child process with a hard time bound, a `genpipe worker`, and a redis-server of the history's own
 * on a free loopback port (AOF on, so a kill -9 and restart keeps the queue). No vitest import: the
 * soak script (bench/soak.mjs) bundles this with esbuild and runs it outside vitest.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { startTestRedis, type TestRedis } from '../fleet/redis-server.js';

export const KEY_ID = '00000000-0000-4000-8000-000000000000';
export const HF_KEY = `${KEY_ID}:emulator-secret`;

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

/**
 * `genpipe worker` on the queue; resolves once it printed `ready`. Bounded: 30 s, since a soak
 * starts many processes at once on two cores; a worker not ready by then is killed, not left behind.
 */
export async function startWorker(bin: string, redisUrl: string, queue: string, serviceUrl: string, name: string): Promise<WorkerHandle> {
  const child = spawn(process.execPath, [bin, 'worker', '--redis', redisUrl, '--queue', queue, '--name', name, '--concurrency', '4'], {
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', HF_KEY, GENPIPE_BASE_URL: serviceUrl },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`worker ${name} was not ready within 30 s:\n${out}`));
    }, 30_000);
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

export type RedisHandle = TestRedis;

/** A redis-server of the history's own, with its AOF synced on every write, so a restart keeps the queue (stop: kill -9). */
export const startRedis = (): Promise<RedisHandle> => startTestRedis({ appendonly: true });
