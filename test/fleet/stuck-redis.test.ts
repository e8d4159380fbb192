// A Redis that accepts connections and never answers, and stops that must end
// whatever Redis or the service does. A loopback TCP server of the test's own plays the stuck
// Redis (and, for the service, a stuck HTTP server). Each child process has a hard limit: past it,
// it is killed and its exit code is null, so "ends by itself" is what each assertion checks.
import { readFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { cleanTemps, findRunDir, runCli, sheetsManifest, tempDir } from '../run/runner-helpers.js';

/** Accepts every connection and never writes a byte. */
async function silentServer(): Promise<{ server: Server; url: (scheme: string) => string; connections: () => number }> {
  const sockets = new Set<Socket>();
  let count = 0;
  const server = createServer((socket) => {
    count++;
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
    socket.resume();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const close = server.close.bind(server);
  server.close = ((cb?: (err?: Error) => void) => {
    for (const s of sockets) s.destroy();
    return close(cb);
  }) as typeof server.close;
  return { server, url: (scheme) => `${scheme}://127.0.0.1:${port}`, connections: () => count };
}

let stuck: Awaited<ReturnType<typeof silentServer>>;
let emu: Emulator;
beforeAll(async () => {
  stuck = await silentServer();
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterAll(async () => {
  await new Promise<void>((resolve) => stuck.server.close(() => resolve()));
  await emu.close();
  cleanTemps();
});

const ONE_SENTENCE =
  /^genpipe: Redis at redis:\/\/127\.0\.0\.1:\d+ could not be reached \(ETIMEDOUT: it accepted the connection but did not answer\); start it, or check --redis \/ GENPIPE_REDIS_URL\.\n$/;

describe('a Redis that accepts connections and never answers', () => {
  it(
    'queue status, queue limits, schedule list, schedule add, worker, run --redis and resume --redis each end with exit 5 and one sentence, sending nothing',
    { timeout: 180_000 },
    async () => {
      const redis = stuck.url('redis');
      const dir = tempDir();
      const env = { GENPIPE_BASE_URL: emu.url };
      // A finished local run, to resume with --redis.
      const out = tempDir();
      const local = await runCli(['run', sheetsManifest(dir, 1, { name: 'stuckresume' }), '--out', out, '--rate', '1000'], { env });
      expect(local.code, local.stderr).toBe(0);
      const runDir = findRunDir(out, 'stuckresume');
      const before = emu.requests.inspect({}).length;
      const commands = [
        ['queue', 'status', '--redis', redis],
        ['queue', 'limits', '--redis', redis, '--concurrency', '2'],
        ['schedule', 'list', '--redis', redis],
        [
          'schedule',
          'add',
          sheetsManifest(dir, 1, { name: 'stuckschedule' }),
          '--cron',
          '30 2 * * *',
          '--out',
          tempDir(),
          '--redis',
          redis,
        ],
        ['worker', '--redis', redis],
        ['run', sheetsManifest(dir, 2, { name: 'stuckrun' }), '--out', tempDir(), '--redis', redis, '--yes'],
        ['resume', runDir, '--redis', redis],
      ];
      await Promise.all(
        commands.map(async (argv) => {
          // 15 s: the bound; the child is killed past it (exit code null).
          const result = await runCli(argv, { env, timeoutMs: 15_000 });
          expect(result.code, `${argv.slice(0, 2).join(' ')}: ${result.stderr}`).toBe(5);
          expect(result.stderr, argv.slice(0, 2).join(' ')).toMatch(ONE_SENTENCE);
        }),
      );
      expect(emu.requests.inspect({}).length).toBe(before);
      expect(stuck.connections()).toBeGreaterThanOrEqual(commands.length);
    },
  );
});

/**
 * Answers what the start-up check sends (PING, INFO, CLIENT) as Redis 7 would, then nothing: a
 * Redis that stops answering once the work has begun.
 */
async function stallingRedis(): Promise<{ server: Server; url: string; stalls: () => number }> {
  let stalls = 0;
  const info = 'redis_version:7.2.0\r\nloading:0\r\nmaxmemory_policy:noeviction\r\n';
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
    let stalled = false;
    socket.on('data', (chunk: Buffer) => {
      // Each command is a RESP array of bulk strings: its name is the first one.
      for (const match of chunk.toString('latin1').matchAll(/\*\d+\r\n\$\d+\r\n([A-Za-z]+)\r\n/g)) {
        if (stalled) return;
        const name = (match[1] as string).toUpperCase();
        if (name === 'PING') socket.write('+PONG\r\n');
        else if (name === 'INFO') socket.write(`$${info.length}\r\n${info}\r\n`);
        else if (name === 'CLIENT' || name === 'SELECT') socket.write('+OK\r\n');
        else {
          stalled = true;
          stalls++;
        }
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const close = server.close.bind(server);
  server.close = ((cb?: (err?: Error) => void) => {
    for (const s of sockets) s.destroy();
    return close(cb);
  }) as typeof server.close;
  return { server, url: `redis://127.0.0.1:${(server.address() as AddressInfo).port}`, stalls: () => stalls };
}

describe('a Redis that answers the start-up check, then stops answering', () => {
  it(
    'queue status, queue limits and schedule list end with exit 5 and one sentence, not an internal error',
    { timeout: 120_000 },
    async () => {
      const stalling = await stallingRedis();
      try {
        await Promise.all(
          [
            ['queue', 'status'],
            ['queue', 'limits', '--concurrency', '2'],
            ['schedule', 'list'],
          ].map(async (argv) => {
            const result = await runCli([...argv, '--redis', stalling.url], { timeoutMs: 15_000 });
            expect(result.code, `${argv.join(' ')}: ${result.stderr}`).toBe(5);
            expect(result.stderr).toMatch(
              /^genpipe: Redis at redis:\/\/127\.0\.0\.1:\d+ failed a command \(ETIMEDOUT: it stopped answering\); check it, then run the command again\.\n$/,
            );
          }),
        );
      } finally {
        await new Promise<void>((resolve) => stalling.server.close(() => resolve()));
      }
    },
  );
});

describe("a Redis that answers the start-up check, then stops answering as the fleet's queue opens", () => {
  it(
    'run --redis and resume --redis end with exit 5 and one sentence within the bound, having sent nothing (soak seed 50484 waited 120 s)',
    { timeout: 60_000 },
    async () => {
      const stalling = await stallingRedis();
      try {
        const dir = tempDir();
        const env = { GENPIPE_BASE_URL: emu.url, GENPIPE_REDIS_STALL_MS: '3000' };
        const out = tempDir();
        const local = await runCli(['run', sheetsManifest(dir, 1, { name: 'stallresume' }), '--out', out, '--rate', '1000'], { env });
        expect(local.code, local.stderr).toBe(0);
        const before = emu.requests.inspect({}).length;
        const commands = [
          ['run', sheetsManifest(dir, 2, { name: 'stallrun' }), '--out', tempDir(), '--redis', stalling.url, '--yes'],
          ['resume', findRunDir(out, 'stallresume'), '--redis', stalling.url],
        ];
        await Promise.all(
          commands.map(async (argv) => {
            const result = await runCli(argv, { env, timeoutMs: 15_000 });
            expect(result.code, `${argv[0]}: ${result.stderr}`).toBe(5);
            // One sentence naming Redis, never an internal error or a stack.
            expect(result.stderr, argv[0]).toMatch(/^genpipe: Redis at redis:\/\/127\.0\.0\.1:\d+ [^\n]+\.\n$/);
          }),
        );
        expect(emu.requests.inspect({}).length).toBe(before);
        expect(stalling.stalls()).toBeGreaterThan(0);
      } finally {
        await new Promise<void>((resolve) => stalling.server.close(() => resolve()));
      }
    },
  );
});

/** The bound: SIGINT or SIGTERM ends any genpipe process within 5 s (its forced exit is at 4 s). */
const SIGNAL_BOUND_MS = 5_000;

describe('Ctrl-C and SIGTERM end any genpipe process within 5 s, whatever Redis or the service does', () => {
  it('SIGINT during queue status against the stuck Redis: exit 130', { timeout: 30_000 }, async () => {
    const seen = stuck.connections();
    // Once the stuck Redis has its connection, genpipe is waiting on it: then Ctrl-C.
    const whenConnected = (send: (signal: NodeJS.Signals) => void): void => {
      const timer = setInterval(() => {
        if (stuck.connections() === seen) return;
        clearInterval(timer);
        send('SIGINT');
      }, 20);
      timer.unref();
    };
    const result = await runCli(['queue', 'status', '--redis', stuck.url('redis')], { timeoutMs: 15_000, onSpawn: whenConnected });
    expect(result.code, result.stderr).toBe(130);
    expect(result.msAfterSignal).toBeLessThanOrEqual(SIGNAL_BOUND_MS);
  });

  it(
    'SIGTERM to a worker whose Redis stopped answering once it started: the process ends (exit 143 or 130)',
    { timeout: 60_000 },
    async () => {
      const stalling = await stallingRedis();
      try {
        // Once a connection of the worker waits on an unanswered command: then SIGTERM.
        const whenStuck = (send: (signal: NodeJS.Signals) => void): void => {
          const timer = setInterval(() => {
            if (stalling.stalls() === 0) return;
            clearInterval(timer);
            send('SIGTERM');
          }, 20);
          timer.unref();
        };
        const result = await runCli(['worker', '--redis', stalling.url], {
          env: { GENPIPE_BASE_URL: emu.url },
          onSpawn: whenStuck,
          timeoutMs: 20_000,
        });
        expect([130, 143], result.stderr).toContain(result.code);
        expect(result.msAfterSignal).toBeLessThanOrEqual(SIGNAL_BOUND_MS);
      } finally {
        await new Promise<void>((resolve) => stalling.server.close(() => resolve()));
      }
    },
  );

  it(
    'SIGTERM during a run whose service never answers: the process ends (exit 143 or 130), and the run resumes against a service that answers',
    { timeout: 60_000 },
    async () => {
      const out = tempDir();
      const manifest = sheetsManifest(tempDir(), 2, { name: 'stuckservice' });
      // The submit waits on a service that never answers; SIGTERM once the run has started.
      const result = await runCli(['run', manifest, '--out', out, '--rate', '1000'], {
        env: { GENPIPE_BASE_URL: stuck.url('http') },
        killWhen: { signal: 'SIGTERM', pattern: /running stuckservice/ },
        timeoutMs: 20_000,
      });
      expect([130, 143]).toContain(result.code);
      expect(result.msAfterSignal).toBeLessThanOrEqual(SIGNAL_BOUND_MS);
      const runDir = findRunDir(out, 'stuckservice');
      const report = await runCli(['report', runDir]);
      expect(report.code, report.stderr).toBe(0);
      const resumed = await runCli(['resume', runDir, '--base-url', emu.url, '--retry', 'unknown', '--rate', '1000'], {
        timeoutMs: 30_000,
      });
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(resumed.stdout).toContain('2 completed');
    },
  );
});

/** The bound on obeying a signal while genpipe waits on a Redis that accepted the connection. */
const CONNECT_WAIT_BOUND_MS = 2_000;

describe('a signal while run, resume and worker wait on a Redis that accepted and never answers', () => {
  // Each command against the stuck Redis, signalled once the stuck Redis has its connection.
  const cases: Array<{ name: string; signal: NodeJS.Signals; argv: () => string[]; runDir?: () => string }> = [];
  let resumeDir = '';
  beforeAll(async () => {
    const out = tempDir();
    const local = await runCli(['run', sheetsManifest(tempDir(), 1, { name: 'waitresume' }), '--out', out, '--rate', '1000'], {
      env: { GENPIPE_BASE_URL: emu.url },
    });
    expect(local.code, local.stderr).toBe(0);
    resumeDir = findRunDir(out, 'waitresume');
  });
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    cases.push(
      {
        name: 'run --redis',
        signal,
        argv: () => ['run', sheetsManifest(tempDir(), 2, { name: 'waitrun' }), '--out', tempDir(), '--redis', stuck.url('redis'), '--yes'],
      },
      { name: 'resume --redis', signal, argv: () => ['resume', resumeDir, '--redis', stuck.url('redis')], runDir: () => resumeDir },
      { name: 'worker --redis', signal, argv: () => ['worker', '--redis', stuck.url('redis')] },
    );
  }
  for (const c of cases) {
    it(`${c.signal} to ${c.name}: exit 130 within 2 s, the journal untouched`, { timeout: 30_000 }, async () => {
      const journal = c.runDir ? readFileSync(join(c.runDir(), 'journal.jsonl')) : undefined;
      const seen = stuck.connections();
      const whenConnected = (send: (signal: NodeJS.Signals) => void): void => {
        const timer = setInterval(() => {
          if (stuck.connections() === seen) return;
          clearInterval(timer);
          send(c.signal);
        }, 20);
        timer.unref();
      };
      const started = performance.now();
      const result = await runCli(c.argv(), { env: { GENPIPE_BASE_URL: emu.url }, timeoutMs: 15_000, onSpawn: whenConnected });
      expect(result.code, result.stderr).toBe(130);
      expect(result.msAfterSignal).toBeLessThanOrEqual(CONNECT_WAIT_BOUND_MS);
      // Obeyed, not a Redis failure that happened to come soon after: the check's own deadline is 3 s.
      expect(performance.now() - started).toBeLessThan(3_000 + 2_000);
      expect(result.stderr).toMatch(
        /^genpipe: Interrupted while connecting to Redis at redis:\/\/127\.0\.0\.1:\d+; nothing was changed\.\n$/,
      );
      if (journal) expect(readFileSync(join(c.runDir!(), 'journal.jsonl')).equals(journal)).toBe(true);
    });
  }
});
