import { spawn, type ChildProcess } from 'node:child_process';
import { afterAll, beforeAll } from 'vitest';
import { GenerationClient } from '../../src/api/client.js';
import { resolveConfig } from '../../src/api/config.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { parseRedisUrl, type RedisTarget } from '../../src/fleet/redis.js';
import { BIN, HF_KEY, sheetsManifest } from '../run/runner-helpers.js';
import { startTestRedis, type TestRedis } from './redis-server.js';

/** Fast polling for an emulator whose durations are scaled down. */
export const FAST_POLLING = 'defaults:\n  polling: { initial_ms: 100, min_ms: 20, max_ms: 400 }';

/** A manifest of `count` character sheets with fast polling (see sheetsManifest). */
export const fastSheets = (dir: string, count: number, name: string, brief?: string): string =>
  sheetsManifest(dir, count, { name, extra: FAST_POLLING, ...(brief === undefined ? {} : { brief }) });

/** A redis-server of the file's own for its tests (started before them, removed after them). */
export function useTestRedis(): { readonly url: string } {
  let redis: TestRedis | undefined;
  beforeAll(async () => {
    redis = await startTestRedis();
  });
  afterAll(async () => {
    await redis?.dispose();
  });
  return {
    get url(): string {
      if (!redis) throw new Error('the test Redis is not started yet: read its url inside a test');
      return redis.url;
    },
  };
}

export interface InProcessFleet {
  target: RedisTarget;
  emu: Emulator;
  client: GenerationClient;
}

/**
 * For tests of the fleet's parts in this process: a redis-server of the file's own (useTestRedis),
 * an emulator at time scale 0.001 and a client of it, started before the file's tests and stopped
 * after them. Read the fields inside tests (they are set by then).
 */
export function useInProcessFleet(): InProcessFleet {
  const redis = useTestRedis();
  const fleet = {} as InProcessFleet;
  beforeAll(async () => {
    fleet.target = parseRedisUrl(redis.url);
    fleet.emu = await startEmulator({ port: 0, timeScale: 0.001, log: () => {} });
    fleet.client = new GenerationClient(resolveConfig({ flags: { baseUrl: fleet.emu.url }, env: { HF_KEY } }));
  });
  afterAll(async () => {
    await fleet.client?.close();
    await fleet.emu?.close();
  });
  return fleet;
}

export interface WorkerProcess {
  child: ChildProcess;
  name: string;
  output(): string;
  /** Resolves with the exit code (or the signal's name) once it ends. */
  exited: Promise<number | string>;
}

/** Starts `genpipe worker` as its own process and resolves once it printed its `ready` line. */
export async function startWorkerProcess(
  redisUrl: string,
  serviceUrl: string,
  name: string,
  extra: readonly string[] = [],
  env: Record<string, string> = {},
): Promise<WorkerProcess> {
  const child = spawn(process.execPath, [BIN, 'worker', '--redis', redisUrl, '--name', name, ...extra], {
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', HF_KEY, GENPIPE_BASE_URL: serviceUrl, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  const exited = new Promise<number | string>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal ?? 'unknown')));
  const ready = new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      if (/^ready\b|^\{"time":"[^"]+","type":"worker_ready"/m.test(stdout)) resolve();
    });
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    void exited.then((code) => reject(new Error(`worker ${name} exited (${code}) before it was ready:\n${stdout}${stderr}`)));
    setTimeout(() => reject(new Error(`worker ${name} was not ready within 15 s:\n${stdout}${stderr}`)), 15_000).unref();
  });
  await ready;
  return { child, name, output: () => stdout + stderr, exited };
}

/** Stops every worker still running (SIGKILL), for afterEach. */
export async function killAll(workers: readonly WorkerProcess[]): Promise<void> {
  for (const w of workers) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
  await Promise.all(workers.map((w) => w.exited));
}
