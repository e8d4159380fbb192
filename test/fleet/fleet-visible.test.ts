// A fleet you can see, with `genpipe worker` processes and `genpipe queue status` against a
// redis-server of the file's own and a real emulator: BullMQ's count of active jobs beside the sum
// of the live workers' own counts (equal when idle, equal again within one heartbeat under load),
// a worker killed -9 shown lost with the age of its last heartbeat (its record kept for minutes),
// one log line per job (plain and --json-logs), and a worker's messages never suggest --emulator.
// Runs the built binary.
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { HEARTBEAT_MS, LOCK_MS, queueStatus, WORKER_RECORD_TTL_MS, workerKey, type QueueStatus } from '../../src/fleet/queue-admin.js';
import { parseRedisUrl } from '../../src/fleet/redis.js';
import { cleanTemps, runCli, tempDir } from '../run/runner-helpers.js';
import { fastSheets, killAll, startWorkerProcess, useTestRedis, type WorkerProcess } from './fleet-helpers.js';

const redis = useTestRedis();
const workers: WorkerProcess[] = [];
let emu: Emulator | undefined;

afterEach(async () => {
  await killAll(workers.splice(0));
  await emu?.close();
  emu = undefined;
  cleanTemps();
});

async function worker(service: Emulator, name: string, queue: string, extra: string[] = []): Promise<WorkerProcess> {
  const w = await startWorkerProcess(redis.url, service.url, name, ['--queue', queue, '--concurrency', '3', ...extra]);
  workers.push(w);
  return w;
}

const status = (queue: string): Promise<QueueStatus> => queueStatus(parseRedisUrl(redis.url), queue);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function until<T>(look: () => Promise<T>, ok: (value: T) => boolean, ms: number, what: string): Promise<T> {
  const end = Date.now() + ms;
  // Bounded by the deadline.
  for (;;) {
    const value = await look();
    if (ok(value)) return value;
    if (Date.now() > end) throw new Error(`not within ${ms} ms: ${what} (last: ${JSON.stringify(value)})`);
    await sleep(200);
  }
}

const PER_JOB = /^worker (\S+): job (sheets\[[^\]]+\]) of run (\S+) \(character-sheet\): completed in \d+\.\d s, from \S+Z to \S+Z$/gm;

describe('queue status beside the workers’ own counts', () => {
  it(
    'are equal when idle, equal again within one heartbeat under load, and each worker logs one line per job',
    { timeout: 120_000 },
    async () => {
      emu = await startEmulator({ port: 0, timeScale: 0.4, log: () => {} });
      const service = emu;
      const queue = 'visible';
      const [w1, w2] = [await worker(service, 'v1', queue), await worker(service, 'v2', queue)];
      // Idle: nothing active on either side.
      const idle = await runCli(['queue', 'status', '--redis', redis.url, '--queue', queue]);
      expect(idle.code, idle.stderr).toBe(0);
      expect(idle.stdout).toContain("active: 0 in the queue, 0 by the live workers' own count (of 6 they run at once)");
      expect(idle.stdout).toContain('workers: 2 live\n');

      const dir = tempDir();
      const run = runCli(
        ['run', fastSheets(dir, 18, 'seen'), '--out', `${dir}/runs`, '--redis', redis.url, '--queue', queue, '--no-local-worker', '--yes'],
        { env: { GENPIPE_BASE_URL: service.url }, timeoutMs: 100_000 },
      );
      // Under load: both workers full (6 jobs active in BullMQ)...
      const full = await until(
        () => status(queue),
        (s) => s.totals.active === 6,
        30_000,
        'six jobs active',
      );
      const since = Date.now();
      expect(full.liveWorkers.concurrency).toBe(6);
      // ...and the workers' own sum, from heartbeats at most one beat old, says the same within a beat.
      const agreed = await until(
        () => status(queue),
        (s) => s.liveWorkers.active === s.totals.active,
        HEARTBEAT_MS + 2_000,
        'the counts agree',
      );
      expect(Date.now() - since).toBeLessThanOrEqual(HEARTBEAT_MS + 2_000);
      expect(agreed.liveWorkers.count).toBe(2);

      const done = await run;
      expect(done.code, done.stderr).toBe(0);
      // Idle again: equal once each worker has beaten since its last job.
      const after = await until(
        () => status(queue),
        (s) => s.totals.active === 0 && s.liveWorkers.active === 0,
        HEARTBEAT_MS + 2_000,
        'idle again',
      );
      expect(after.liveWorkers.count).toBe(2);

      // One line per job, by the worker that ended it: 18 in all, each instance once.
      const lines = [...`${w1.output()}\n${w2.output()}`.matchAll(PER_JOB)];
      expect(lines).toHaveLength(18);
      expect(new Set(lines.map((m) => m[2])).size).toBe(18);
      expect(lines.every((m) => m[1] === 'v1' || m[1] === 'v2')).toBe(true);
    },
  );
});

describe('a worker that died', () => {
  it(
    'is shown lost with the age of its last heartbeat, and its record outlives the lock lease by minutes',
    { timeout: 60_000 },
    async () => {
      emu = await startEmulator({ port: 0, timeScale: 0.01, log: () => {} });
      const queue = 'died';
      await worker(emu, 'stays', queue);
      const gone = await worker(emu, 'gone', queue);
      const fresh = await runCli(['queue', 'status', '--redis', redis.url, '--queue', queue]);
      expect(fresh.stdout).not.toMatch(/lost/);
      expect(fresh.stdout).toContain('workers: 2 live\n');
      gone.child.kill('SIGKILL');
      await gone.exited;
      // Not lost while its heartbeat is younger than the lock lease.
      const s = await until(
        () => status(queue),
        (x) => x.workers.some((w) => w.name === 'gone' && w.lost),
        LOCK_MS + HEARTBEAT_MS + 3_000,
        'gone is lost',
      );
      const lost = s.workers.find((w) => w.name === 'gone');
      expect(lost?.lastSeenS).toBeGreaterThanOrEqual(LOCK_MS / 1000);
      expect(s.liveWorkers.count).toBe(1);
      const text = await runCli(['queue', 'status', '--redis', redis.url, '--queue', queue]);
      expect(text.stdout).toMatch(/^ {2}gone: lost \(last seen (\d+) s ago\), host /m);
      expect(Number(/last seen (\d+) s ago/.exec(text.stdout)?.[1])).toBeGreaterThanOrEqual(LOCK_MS / 1000);
      expect(text.stdout).toMatch(/^ {2}stays: host /m);
      expect(text.stdout).toContain('workers: 1 live, 1 lost\n');
      // Its record stays for minutes (WORKER_RECORD_TTL_MS), not seconds.
      const client = new Redis(redis.url);
      try {
        const ttl = await client.pttl(workerKey(queue, 'gone'));
        expect(ttl).toBeGreaterThan(WORKER_RECORD_TTL_MS - 30_000);
        expect(WORKER_RECORD_TTL_MS).toBeGreaterThanOrEqual(60_000);
      } finally {
        client.disconnect();
      }
    },
  );
});

describe('worker logs', () => {
  it('--json-logs: a worker_ready event first, then one job_finished event per job', { timeout: 60_000 }, async () => {
    emu = await startEmulator({ port: 0, timeScale: 0.01, log: () => {} });
    const queue = 'json-logs';
    const w = await worker(emu, 'j1', queue, ['--json-logs']);
    const dir = tempDir();
    const done = await runCli(
      ['run', fastSheets(dir, 3, 'logged'), '--out', `${dir}/runs`, '--redis', redis.url, '--queue', queue, '--no-local-worker', '--yes'],
      { env: { GENPIPE_BASE_URL: emu.url }, timeoutMs: 50_000 },
    );
    expect(done.code, done.stderr).toBe(0);
    await until(
      async () => w.output(),
      (o) => (o.match(/"job_finished"/g) ?? []).length >= 3,
      5_000,
      'three job events',
    );
    const events = w
      .output()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(events[0]).toMatchObject({ type: 'worker_ready', worker: 'j1', queue, concurrency: 3 });
    const jobs = events.filter((e) => e.type === 'job_finished');
    expect(jobs).toHaveLength(3);
    for (const job of jobs) {
      expect(job).toMatchObject({ worker: 'j1', model: 'character-sheet', outcome: 'completed' });
      expect(job.durationMs).toBeTypeOf('number');
      expect(Date.parse(job.endedAt as string) - Date.parse(job.startedAt as string)).toBe(job.durationMs);
    }
    // Nothing but events on its stdout.
    expect(
      w
        .output()
        .split('\n')
        .filter((l) => l.startsWith('ready')),
    ).toEqual([]);
  });

  it('a worker with no service address never suggests --emulator, which it refuses; run does suggest it', async () => {
    const home = tempDir();
    const env = { HOME: home, XDG_CONFIG_HOME: home, GENPIPE_BASE_URL: '' };
    const refused = await runCli(['worker', '--redis', redis.url], { env });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/No service address is set: use --base-url, GENPIPE_BASE_URL or base_url in the config file\./);
    expect(refused.stderr).not.toContain('--emulator');
    const emulatorFlag = await runCli(['worker', '--redis', redis.url, '--emulator'], { env });
    expect(emulatorFlag.code).toBe(2);
    expect(emulatorFlag.stderr).toMatch(/Unknown option '--emulator'/);
    const dir = tempDir();
    const run = await runCli(['run', fastSheets(dir, 1, 'noaddr'), '--out', `${dir}/runs`, '--yes'], { env });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('(or --emulator)');
  });
});
