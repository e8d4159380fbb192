// The fleet as users run it: `genpipe worker` processes, `genpipe queue`, and `genpipe run --redis`
// as the coordinator, against a redis-server of the test's own and a real emulator. These run the
// built binary (`npm test` builds first).
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { afterEach, describe, expect, it } from 'vitest';
import type { Emulator } from '../../src/emulator/index.js';
import { startEmulator } from '../../src/emulator/index.js';
import { FAULT_PROFILES, NO_ROUTE_FAULTS } from '../../src/emulator/faults.js';
import {
  cleanTemps,
  emuRequests,
  expectCompletedRun,
  expectNoSecret,
  expectOneRequestPerKey,
  findRunDir,
  freePort,
  journalOf,
  runCli,
  SECRET,
  spentUsd,
  tempDir,
  waitForRequests,
} from '../run/runner-helpers.js';
import { fastSheets, killAll, startWorkerProcess, useTestRedis, type WorkerProcess } from './fleet-helpers.js';
import { parseRedisUrl } from '../../src/fleet/redis.js';
import { startTestRedis } from './redis-server.js';

const redis = useTestRedis();
const workers: WorkerProcess[] = [];
const emulators: Emulator[] = [];

afterEach(async () => {
  await killAll(workers.splice(0));
  for (const emu of emulators.splice(0)) await emu.close();
  cleanTemps();
});

async function emulator(timeScale: number): Promise<Emulator> {
  const emu = await startEmulator({ port: 0, timeScale, log: () => {} });
  emulators.push(emu);
  return emu;
}

async function worker(emu: Emulator, name: string, queue: string, concurrency = 8): Promise<WorkerProcess> {
  const w = await startWorkerProcess(redis.url, emu.url, name, ['--queue', queue, '--concurrency', String(concurrency)]);
  workers.push(w);
  return w;
}

const env = (emu: Emulator): Record<string, string> => ({ GENPIPE_BASE_URL: emu.url });

/**
 * Waits until `condition` holds, checking every 20 ms for at most `timeoutMs` (generous: these
 * tests assert what happens, not how fast), and fails the test with `what` when it never does.
 */
async function until(condition: () => boolean | Promise<boolean>, what: string, timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  // Bounded by the deadline.
  while (!(await condition())) {
    if (Date.now() > end) throw new Error(`gave up after ${timeoutMs / 1000} s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('genpipe on a fleet (BullMQ on Redis)', () => {
  it('Redis unreachable at start: run, worker and queue exit 5 with one sentence, and nothing is sent or created', async () => {
    const emu = await emulator(0.01);
    const dir = tempDir();
    const manifest = fastSheets(dir, 3, 'fleet');
    const dead = `redis://127.0.0.1:${await freePort()}`;
    const run = await runCli(['run', manifest, '--out', join(dir, 'runs'), '--redis', dead, '--yes'], { env: env(emu) });
    expect(run.code).toBe(5);
    expect(run.stderr).toMatch(
      /^genpipe: Redis at redis:\/\/127\.0\.0\.1:\d+ could not be reached \(ECONNREFUSED\); start it, or check --redis \/ GENPIPE_REDIS_URL\.\n$/,
    );
    // No run directory: only the line a night that did not run leaves (not-started.jsonl).
    expect(readdirSync(join(dir, 'runs', 'fleet'))).toEqual(['not-started.jsonl']);
    expect(emu.requests.byId.size).toBe(0);
    const viaEnv = await runCli(['worker'], { env: { ...env(emu), GENPIPE_REDIS_URL: dead } });
    expect(viaEnv.code).toBe(5);
    expect(viaEnv.stderr).toMatch(/could not be reached/);
    expect(viaEnv.stdout).toBe('');
    const status = await runCli(['queue', 'status', '--redis', dead]);
    expect(status.code).toBe(5);
    // redis_url in the config file, when no flag or GENPIPE_REDIS_URL names one.
    const config = join(dir, 'genpipe.yaml');
    writeFileSync(config, `redis_url: ${dead}\n`);
    const viaConfig = await runCli(['run', manifest, '--out', join(dir, 'runs'), '--yes'], {
      env: { ...env(emu), GENPIPE_CONFIG: config },
    });
    expect(viaConfig.code).toBe(5);
    expect(viaConfig.stderr).toMatch(/^genpipe: Redis at redis:\/\/127\.0\.0\.1:\d+ could not be reached/);
    // Still no run directory, and each run that did not start has its line.
    expect(readdirSync(join(dir, 'runs', 'fleet'))).toEqual(['not-started.jsonl']);
    expect(
      readFileSync(join(dir, 'runs', 'fleet', 'not-started.jsonl'), 'utf8')
        .trim()
        .split('\n'),
    ).toHaveLength(2);
  });

  it('genpipe worker refuses --webhook-url without --listen, and a --listen that is not HOST:PORT: exit 2, one sentence, nothing sent', async () => {
    const emu = await emulator(0.01);
    const hook = ['worker', '--redis', redis.url, '--queue', 'refused'];
    const alone = await runCli([...hook, '--webhook-url', 'http://127.0.0.1:9/hooks'], { env: env(emu) });
    expect(alone.code).toBe(2);
    expect(alone.stderr).toBe(
      'genpipe: --webhook-url and --listen go together: the service posts to the URL, which must reach the receiver listening on HOST:PORT.\n',
    );
    const bad = await runCli([...hook, '--webhook-url', 'http://127.0.0.1:9/hooks', '--listen', 'nowhere'], { env: env(emu) });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toBe('genpipe: --listen takes HOST:PORT, such as 127.0.0.1:8787, not "nowhere".\n');
    expect(alone.stdout + bad.stdout).toBe('');
    // A grace that the 5 s stop bound could not keep is refused, not cut short.
    const long = await runCli([...hook, '--grace', '10'], { env: env(emu) });
    expect(long.code).toBe(2);
    expect(long.stderr).toMatch(/^genpipe: --grace 10 is over 3 s: a genpipe process ends within 5 s of SIGTERM, [^\n]+\.\n$/);
    expect(emu.stats.total).toBe(0);
  });

  it('a password in the Redis URL never reaches output or the run directory', async () => {
    const emu = await emulator(0.01);
    const dir = tempDir();
    const manifest = fastSheets(dir, 2, 'secretive');
    const url = `redis://:${SECRET}@127.0.0.1:${await freePort()}`;
    const run = await runCli(['run', manifest, '--out', join(dir, 'runs'), '--redis', url, '--yes'], { env: env(emu) });
    expect(run.code).toBe(5);
    expectNoSecret(undefined, run.stdout + run.stderr);
  });

  it('three workers and a coordinator under a queue cap of 8: 300 sheets, never more than 8 in flight at the service, every one completed, one request per key', async () => {
    const emu = await emulator(0.01);
    const dir = tempDir();
    const queue = 'quota';
    const limits = await runCli(['queue', 'limits', '--redis', redis.url, '--queue', queue, '--concurrency', '8']);
    expect(limits.stdout).toBe('queue quota: concurrency 8, rate unlimited\n');
    await Promise.all([worker(emu, 'q1', queue), worker(emu, 'q2', queue), worker(emu, 'q3', queue)]);
    const run = await runCli(
      [
        'run',
        fastSheets(dir, 300, 'fleet'),
        '--out',
        join(dir, 'runs'),
        '--redis',
        redis.url,
        '--queue',
        queue,
        '--concurrency',
        '64',
        '--yes',
        '--quiet',
      ],
      { env: env(emu), timeoutMs: 120_000 },
    );
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const runDir = findRunDir(join(dir, 'runs'), 'fleet');
    expectCompletedRun(runDir, emu, 300);
    expect(expectOneRequestPerKey(emu).size).toBe(300);
    expect(emu.requests.peakActive).toBeGreaterThan(1);
    expect(emu.requests.peakActive).toBeLessThanOrEqual(8);
    expect(spentUsd(emu)).toBeCloseTo(300 * 0.05, 6);
    // Read back from Redis: the cap in force, and every job's result removed once journaled.
    const status = JSON.parse((await runCli(['queue', 'status', '--redis', redis.url, '--queue', queue, '--json'])).stdout) as {
      limits: { concurrency: number };
      totals: Record<string, number>;
      workers: { name: string; host: string; pid: number }[];
    };
    expect(status.limits.concurrency).toBe(8);
    expect(status.totals).toEqual({ waiting: 0, active: 0, delayed: 0, completed: 0, failed: 0 });
    expect(status.workers.map((w) => w.name)).toEqual(['q1', 'q2', 'q3']);
    expect(status.workers.every((w) => w.pid > 0 && w.host.length > 0)).toBe(true);
  }, 180_000);

  it('two pipelines from two coordinators on one queue share its cap, and both finish', async () => {
    const emu = await emulator(0.02);
    const dir = tempDir();
    const queue = 'shared';
    expect((await runCli(['queue', 'limits', '--redis', redis.url, '--queue', queue, '--concurrency', '4'])).code).toBe(0);
    await Promise.all([worker(emu, 'p1', queue), worker(emu, 'p2', queue)]);
    const flags = [
      '--out',
      join(dir, 'runs'),
      '--redis',
      redis.url,
      '--queue',
      queue,
      '--no-local-worker',
      '--concurrency',
      '20',
      '--yes',
      '--quiet',
    ];
    const [a, b] = await Promise.all([
      runCli(['run', fastSheets(dir, 20, 'alpha'), ...flags], { env: env(emu), timeoutMs: 120_000 }),
      runCli(['run', fastSheets(dir, 20, 'beta'), ...flags], { env: env(emu), timeoutMs: 120_000 }),
    ]);
    expect([a.code, b.code]).toEqual([0, 0]);
    expectCompletedRun(findRunDir(join(dir, 'runs'), 'alpha'), emu, 20);
    expectCompletedRun(findRunDir(join(dir, 'runs'), 'beta'), emu, 20);
    expect(expectOneRequestPerKey(emu).size).toBe(40);
    expect(emu.requests.peakActive).toBeGreaterThan(1);
    expect(emu.requests.peakActive).toBeLessThanOrEqual(4);
  }, 180_000);

  it("workers with --webhook-url and --listen follow their requests by webhook: one confirming status GET per request, from the coordinator's own worker too", async () => {
    // Sheets take at least 1.275 s here and the manifest polls every 100-400 ms, so a polled
    // request is looked at several times; one followed by webhook once, after its delivery.
    const emu = await emulator(0.15);
    const dir = tempDir();
    const queue = 'hooks';
    const hooked = async (name: string): Promise<{ w: WorkerProcess; port: number }> => {
      // A port found free may be taken before the worker listens on it (by another process's
      // outbound connection: on a loaded machine it happened once in 1,460 tests): another is
      // tried, five times at most. The refusal is the worker's own sentence, exit 2.
      for (let attempt = 1; ; attempt++) {
        const port = await freePort();
        try {
          const w = await startWorkerProcess(redis.url, emu.url, name, [
            '--queue',
            queue,
            '--webhook-url',
            `http://127.0.0.1:${port}/hooks`,
            '--listen',
            `127.0.0.1:${port}`,
          ]);
          workers.push(w);
          return { w, port };
        } catch (error) {
          if (attempt >= 5 || !(error as Error).message.includes('EADDRINUSE')) throw error;
        }
      }
    };
    const [first, second] = await Promise.all([hooked('h1'), hooked('h2')]);
    const [h1, h2] = [first.w, second.w];
    const ports = [first.port, second.port];
    expect(h1.output()).toMatch(
      new RegExp(`^ready: worker h1 on queue hooks at redis://127\\.0\\.0\\.1:\\d+, 8 at once, webhooks on 127\\.0\\.0\\.1:${ports[0]}\n`),
    );
    const statusGets = (): number => emu.stats.byRoute.get('GET /requests/:id/status') ?? 0;
    const flags = ['--out', join(dir, 'runs'), '--redis', redis.url, '--queue', queue, '--concurrency', '12', '--yes', '--quiet'];
    const run = await runCli(['run', fastSheets(dir, 12, 'hooked'), ...flags, '--no-local-worker'], { env: env(emu), timeoutMs: 120_000 });
    expect(run.code).toBe(0);
    expectCompletedRun(findRunDir(join(dir, 'runs'), 'hooked'), emu, 12);
    expect(statusGets()).toBe(12);
    // Each request carried the webhook URL of the worker that sent it, with a token no output shows.
    const targets = [...emu.requests.byId.values()].map((r) => r.webhook?.url ?? '');
    expect(targets.every((u) => ports.some((p) => u.startsWith(`http://127.0.0.1:${p}/hooks/`)))).toBe(true);
    for (const token of new Set(targets.map((u) => u.split('/').pop() ?? '')))
      expectNoSecret(findRunDir(join(dir, 'runs'), 'hooked'), run.stdout + run.stderr + h1.output() + h2.output(), token);
    // The coordinator's own worker, given the flags, follows its requests by webhook as well.
    await killAll(workers.splice(0));
    emu.stats.reset();
    const port = await freePort();
    const own = await runCli(
      ['run', fastSheets(dir, 6, 'own'), ...flags, '--webhook-url', `http://127.0.0.1:${port}/hooks`, '--listen', `127.0.0.1:${port}`],
      { env: env(emu), timeoutMs: 120_000 },
    );
    expect(own.code).toBe(0);
    expectCompletedRun(findRunDir(join(dir, 'runs'), 'own'), emu, 6);
    expect(statusGets()).toBe(6);
    // Without a worker of its own the flags would serve nothing: refused before anything is sent.
    const before = emu.requests.byId.size;
    const refused = await runCli(
      [
        'run',
        fastSheets(dir, 3, 'refused'),
        ...flags,
        '--no-local-worker',
        '--webhook-url',
        `http://127.0.0.1:${port}/hooks`,
        '--listen',
        `127.0.0.1:${port}`,
      ],
      { env: env(emu) },
    );
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/^genpipe: With --redis, --webhook-url and --listen serve the coordinator's own worker/);
    expect(emu.requests.byId.size).toBe(before);
  }, 180_000);

  it('a 429 storm slows the submits of every worker, not to a halt, measured at the service across three worker processes, and the run still completes paying once', async () => {
    // No queue cap: without each worker's route limiter the workers would keep sending new jobs
    // between refusals. Sheets of 0.17 s or more, 12 slots across the fleet.
    const emu = await emulator(0.02);
    const dir = tempDir();
    const queue = 'storm';
    await Promise.all([worker(emu, 's1', queue, 4), worker(emu, 's2', queue, 4), worker(emu, 's3', queue, 4)]);
    const submits = (): number => emu.stats.byRoute.get('POST /vendor/ai-influencer') ?? 0;
    const rateOver = async (ms: number): Promise<number> => {
      const from = submits();
      // A measuring window, not synchronisation: the rate is counted over this much time.
      await new Promise((r) => setTimeout(r, ms));
      return ((submits() - from) * 1000) / ms;
    };
    const running = runCli(
      [
        'run',
        fastSheets(dir, 400, 'storm'),
        '--out',
        join(dir, 'runs'),
        '--redis',
        redis.url,
        '--queue',
        queue,
        '--no-local-worker',
        '--concurrency',
        '400',
        '--yes',
        '--quiet',
      ],
      { env: env(emu), timeoutMs: 150_000 },
    );
    await waitForRequests(emu, 30, 30_000);
    const before = await rateOver(2_000);
    // A quarter of the submits answered 429 with Retry-After: 1 s, for about 3 s from the first.
    emu.faults.set({
      ...FAULT_PROFILES.none,
      name: 'storm',
      routes: { ...FAULT_PROFILES.none.routes, submit: { ...NO_ROUTE_FAULTS, rate_429: 0.25, retry_after_s: 1 } },
    });
    await until(() => (emu.faults.injected['submit.rate_429'] ?? 0) > 0, 'the first 429 of the storm');
    const during = await rateOver(3_000);
    emu.faults.set(FAULT_PROFILES.none);
    const run = await running;
    expect(run.code).toBe(0);
    expectCompletedRun(findRunDir(join(dir, 'runs'), 'storm'), emu, 400);
    expect(expectOneRequestPerKey(emu).size).toBe(400);
    // A 429 is never charged: 400 sheets cost what 400 sheets cost.
    expect(spentUsd(emu)).toBeCloseTo(400 * 0.05, 6);
    expect(emu.faults.injected['submit.rate_429'] ?? 0).toBeGreaterThan(0);
    expect(before).toBeGreaterThan(10);
    // Measured here: about 0.5x the rate before the storm (each worker's submit route slowed);
    // without any limiter about 0.8x (the refused jobs' own waits). Not a halt: submits go on.
    expect(during).toBeLessThan(before * 0.7);
    expect(during).toBeGreaterThan(0);
  }, 180_000);

  it('kill -9 of a worker mid-run: its jobs finish on the others (the first within 20 s), nothing is charged twice, and SIGTERM stops a worker with exit 0', async () => {
    const emu = await emulator(0.1);
    const dir = tempDir();
    const queue = 'deadworker';
    const doomed = await worker(emu, 'doomed', queue, 8);
    const running = runCli(
      [
        'run',
        fastSheets(dir, 24, 'dw'),
        '--out',
        join(dir, 'runs'),
        '--redis',
        redis.url,
        '--queue',
        queue,
        '--no-local-worker',
        '--concurrency',
        '24',
        '--yes',
        '--quiet',
      ],
      { env: env(emu), timeoutMs: 120_000 },
    );
    // Only the doomed worker exists yet: the requests at the service are its jobs.
    expect(await waitForRequests(emu, 8)).toBe(true);
    doomed.child.kill('SIGKILL');
    const killedAt = Date.now();
    expect(await doomed.exited).toBe('SIGKILL');
    const held = new Set((emu.requests.inspect({}) as { request_id: string }[]).map((r) => r.request_id));
    const [survivor] = await Promise.all([worker(emu, 'survivor', queue), worker(emu, 'other', queue)]);
    const run = await running;
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const runDir = findRunDir(join(dir, 'runs'), 'dw');
    const { requestIds } = expectCompletedRun(runDir, emu, 24);
    expect(expectOneRequestPerKey(emu).size).toBe(24);
    expect(spentUsd(emu)).toBeCloseTo(24 * 0.05, 6);
    // The dead worker's requests were followed to their end by the others, not sent again.
    const heldInstances = [...requestIds].filter(([, id]) => held.has(id)).map(([instance]) => instance);
    expect(heldInstances.length).toBeGreaterThanOrEqual(8);
    const firstRecovered = Math.min(
      ...journalOf(runDir)
        .records.filter((r) => r.type === 'status' && heldInstances.includes(r.instance))
        .map((r) => (r as { at: number }).at),
    );
    expect(firstRecovered - killedAt).toBeLessThan(20_000);
    survivor?.child.kill('SIGTERM');
    expect(await survivor?.exited).toBe(0);
  }, 180_000);

  it('kill -9 of the coordinator mid-run: genpipe resume RUN_DIR --redis completes it, collecting what finished meanwhile, with nothing paid twice', async () => {
    const emu = await emulator(0.05);
    const dir = tempDir();
    const queue = 'deadcoordinator';
    await Promise.all([worker(emu, 'c1', queue), worker(emu, 'c2', queue)]);
    const manifest = fastSheets(dir, 30, 'dc');
    const args = [
      '--out',
      join(dir, 'runs'),
      '--redis',
      redis.url,
      '--queue',
      queue,
      '--no-local-worker',
      '--concurrency',
      '30',
      '--yes',
      '--quiet',
    ];
    let kill: ((signal: NodeJS.Signals) => void) | undefined;
    const first = runCli(['run', manifest, ...args], { env: env(emu), onSpawn: (send) => (kill = send), timeoutMs: 120_000 });
    expect(await waitForRequests(emu, 12)).toBe(true);
    kill?.('SIGKILL');
    expect((await first).signal).toBe('SIGKILL');
    const runDir = findRunDir(join(dir, 'runs'), 'dc');
    // The workers go on while the coordinator is down: results wait in Redis (a job's result is
    // removed once journaled, so `completed` counts the ones no coordinator collected yet). Wait
    // until one more finished after the kill, so that the resume has something to collect, or,
    // when the workers finished every job before the first count (a loaded machine, whose CLI
    // starts slowly: every remaining job then finished with the coordinator down), until none is
    // left to run and results wait.
    const totals = async (): Promise<{ completed: number; waiting: number; active: number; delayed: number }> => {
      const status = await runCli(['queue', 'status', '--redis', redis.url, '--queue', queue, '--json']);
      expect(status.code).toBe(0);
      return (JSON.parse(status.stdout) as { totals: { completed: number; waiting: number; active: number; delayed: number } }).totals;
    };
    const atKill = (await totals()).completed;
    await until(async () => {
      const t = await totals();
      return t.completed > atKill || (t.completed > 0 && t.waiting + t.active + t.delayed === 0);
    }, 'a job that finished while the coordinator was down');
    const resumed = await runCli(['resume', runDir, '--redis', redis.url, '--queue', queue, '--no-local-worker', '--quiet'], {
      env: env(emu),
      timeoutMs: 120_000,
    });
    // The killed coordinator's lock is stale (its pid is gone): taken over, and said so.
    expect(resumed.stderr).toMatch(/^note: took over the stale lock of run \S+ \(pid \d+ on [^)]+\)\.\n$/);
    expect(resumed.code).toBe(0);
    expectCompletedRun(runDir, emu, 30);
    expect(expectOneRequestPerKey(emu).size).toBe(30);
    expect(spentUsd(emu)).toBeCloseTo(30 * 0.05, 6);
    expect(readdirSync(join(runDir, 'outputs', 'sheets'))).toHaveLength(30);
  }, 180_000);

  it.each([
    ['a plain resume', []],
    ['a resume with --retry unknown', ['--retry', 'unknown']],
  ])(
    'kill -9 of the coordinator with keyless jobs still queued: %s collects every result the worker finished meanwhile, sends none again, and its report equals the ledger',
    async (_, flags) => {
      // Soul Standard at 0.1: 0.5-1.3 s a job, so the kill comes before the first result is read.
      const emu = await emulator(0.1);
      const dir = tempDir();
      const queue = `deadkeyless${flags.length}`;
      // One worker taking 2 at a time: most of the 20 jobs are still waiting, never sent, when the coordinator dies.
      await worker(emu, 'k1', queue, 2);
      const manifest = join(dir, 'keyless.yaml');
      writeFileSync(
        manifest,
        `version: 1\nname: keyless\ndefaults:\n  polling: { initial_ms: 100, min_ms: 20, max_ms: 400 }\nsteps:\n  pics:\n    model: soul-standard\n    price_usd: 0.03\n    matrix:\n      n: { range: { from: 1, to: 20 } }\n    input:\n      prompt: "Picture {{ n }} of a cat"\n      aspect_ratio: "1:1"\n      resolution: "720p"\n`,
      );
      const args = ['--out', join(dir, 'runs'), '--redis', redis.url, '--queue', queue, '--no-local-worker', '--yes', '--quiet'];
      let kill: ((signal: NodeJS.Signals) => void) | undefined;
      const first = runCli(['run', manifest, ...args, '--concurrency', '20'], {
        env: env(emu),
        onSpawn: (send) => (kill = send),
        timeoutMs: 120_000,
      });
      // Read in this process: a `genpipe queue status` per look would be slower than the window.
      const counts = new Queue(queue, { connection: parseRedisUrl(redis.url).options });
      const jobs = async (): Promise<number> => Object.values(await counts.getJobCounts()).reduce((a, b) => a + b, 0);
      try {
        // Killed once every instance is queued (none journaled without its job) and the worker began.
        await until(async () => emu.requests.byId.size >= 2 && (await jobs()) === 20, 'the 20 jobs queued and 2 sent');
      } finally {
        await counts.close();
      }
      kill?.('SIGKILL');
      expect((await first).signal).toBe('SIGKILL');
      const runDir = findRunDir(join(dir, 'runs'), 'keyless');
      const journaled = journalOf(runDir).records;
      const intents = journaled.filter((r) => r.type === 'intent').length;
      const submitted = journaled.filter((r) => r.type === 'submitted').length;
      // The history this test is about: keyless intents the dead coordinator never saw answered.
      expect(intents - submitted).toBeGreaterThan(0);
      // The worker goes on: every job queued is sent, once, and its result waits in Redis.
      await until(() => emu.requests.byId.size >= 20 && [...emu.requests.byId.values()].every((r) => r.settled), 'the queued jobs to end');

      const resumed = await runCli(['resume', runDir, '--redis', redis.url, '--queue', queue, '--no-local-worker', '--quiet', ...flags], {
        env: env(emu),
        timeoutMs: 120_000,
      });
      expect(resumed.code, resumed.stderr).toBe(0);
      expectCompletedRun(runDir, emu, 20, 'pics');
      // Each instance paid once: every result collected from Redis, none sent by the resume.
      expect(emu.requests.byId.size).toBe(20);
      expect(new Set(emuRequests(emu).map((r) => r.body_hash)).size).toBe(20);
      expect(spentUsd(emu)).toBeCloseTo(20 * 0.03, 6);
      const { total } = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { total: { netUsd: number; unknownUsd: number } };
      expect(total).toMatchObject({ netUsd: spentUsd(emu), unknownUsd: 0 });

      // Nothing is unknown any more: the README's remedy for unknowns sends nothing.
      const retried = await runCli(
        ['resume', runDir, '--redis', redis.url, '--queue', queue, '--no-local-worker', '--retry', 'unknown', '--quiet'],
        {
          env: env(emu),
          timeoutMs: 60_000,
        },
      );
      expect(retried.code, retried.stderr).toBe(0);
      expect(emu.requests.byId.size).toBe(20);
    },
    180_000,
  );

  it.each([
    ['with AOF', true],
    ['that lost every job (no persistence): keyed jobs are handed out again under their keys', false],
  ])(
    'a Redis restart %s, mid-run: workers and coordinator say so on one line, reconnect, and the run completes with nothing lost or paid twice',
    async (_, appendonly) => {
      const aof = await startTestRedis({ appendonly });
      try {
        const emu = await emulator(0.05);
        const dir = tempDir();
        const queue = 'restart';
        const w = await startWorkerProcess(aof.url, emu.url, 'r1', ['--queue', queue]);
        workers.push(w);
        let coordinatorSaid = '';
        const running = runCli(
          [
            'run',
            fastSheets(dir, 40, 'rr'),
            '--out',
            join(dir, 'runs'),
            '--redis',
            aof.url,
            '--queue',
            queue,
            '--concurrency',
            '40',
            '--yes',
            '--quiet',
          ],
          { env: env(emu), timeoutMs: 120_000, onStderr: (text) => (coordinatorSaid = text) },
        );
        expect(await waitForRequests(emu, 10)).toBe(true);
        await aof.stop('SIGKILL');
        // Down until both processes found it so (a reconnect refused), which they say on one line.
        await until(() => /lost Redis/.test(w.output()) && /lost Redis/.test(coordinatorSaid), 'both processes to say they lost Redis');
        await aof.start();
        const run = await running;
        expect(run.code).toBe(0);
        // One line when it is lost (and one when it is back), never a stack trace.
        expect(run.stderr).toMatch(
          /^warning: (coordinator|worker \S+) lost Redis at redis:\/\/127\.0\.0\.1:\d+ \(\w+\); retrying with backoff\.$/m,
        );
        expect(run.stderr).not.toMatch(/\n\s+at /);
        const runDir = findRunDir(join(dir, 'runs'), 'rr');
        expectCompletedRun(runDir, emu, 40);
        expect(expectOneRequestPerKey(emu).size).toBe(40);
        expect(spentUsd(emu)).toBeCloseTo(40 * 0.05, 6);
        expect(w.output()).toMatch(/lost Redis/);
      } finally {
        await aof.dispose();
      }
    },
    180_000,
  );
});
