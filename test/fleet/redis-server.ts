/**
 * A redis-server of the test's own, on a free loopback port, that the test can stop and start
 * again (with AOF, so a restart keeps the queue). Debian's redis-server: `npm test` installs it
 * when it is missing (scripts/ensure-test-deps.mjs); a test never skips for want of it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort } from '../free-port.js';

export interface TestRedis {
  port: number;
  url: string;
  /** kill -9 (a crash) or SIGTERM. */
  stop(signal?: NodeJS.Signals): Promise<void>;
  /** Starts it again on the same port and directory (the AOF is read back). */
  start(): Promise<void>;
  /** Stops it and removes its directory. */
  dispose(): Promise<void>;
  /** Sends a signal to the running server: SIGSTOP makes it a Redis that stops answering, SIGCONT brings it back. */
  signal(signal: NodeJS.Signals): void;
}

export async function startTestRedis(options: { appendonly?: boolean } = {}): Promise<TestRedis> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'genpipe-redis-'));
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
      options.appendonly ? 'yes' : 'no',
      '--appendfsync',
      'always',
      '--protected-mode',
      'yes',
    ];
    const proc = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    proc.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    proc.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const spawnError = new Promise<never>((_, reject) =>
      proc.once('error', (error) =>
        reject(
          new Error(
            `redis-server could not be started (${error.message}); run \`node scripts/ensure-test-deps.mjs\` or install Debian's redis-server.`,
          ),
        ),
      ),
    );
    child = proc;
    const deadline = Date.now() + 10_000;
    // Bounded by the deadline.
    for (;;) {
      const probe = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
      probe.on('error', () => {});
      try {
        await Promise.race([probe.connect().then(() => probe.ping()), spawnError]);
        // Still loading the AOF answers LOADING: wait for a real PONG.
        return;
      } catch (error) {
        if (Date.now() > deadline || proc.exitCode !== null)
          throw new Error(`redis-server on port ${port} did not come up: ${(error as Error).message}\n${output}`, { cause: error });
        await new Promise((r) => setTimeout(r, 50));
      } finally {
        probe.disconnect();
      }
    }
  };
  const stop = async (signal: NodeJS.Signals = 'SIGKILL'): Promise<void> => {
    const proc = child;
    child = undefined;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    proc.kill(signal);
    await exited;
  };
  await start();
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    stop,
    start,
    signal: (signal) => void child?.kill(signal),
    dispose: async () => {
      child?.kill('SIGCONT');
      await stop('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
