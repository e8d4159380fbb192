// Schedules on a fleet: `genpipe schedule` keeps cron schedules in Redis (BullMQ job schedulers),
// workers started with --runs take each tick's run and coordinate it, and a run whose worker died
// is resumed by another. Against a redis-server of the test's own, worker processes and an emulator.
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Queue } from 'bullmq';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { commandOptions, parseRedisUrl } from '../../src/fleet/redis.js';
import { runsQueueName, type ScheduledRunData } from '../../src/fleet/schedules.js';
import type { JournalRecord } from '../../src/run/journal/journal-records.js';
import { cleanTemps, expectOneRequestPerKey, journalOf, runCli, spentUsd, tempDir } from '../run/runner-helpers.js';
import { FAST_POLLING, fastSheets, killAll, startWorkerProcess, useTestRedis, type WorkerProcess } from './fleet-helpers.js';

const redis = useTestRedis();
let emu: Emulator;
const workers: WorkerProcess[] = [];
/** Emulators a test started for itself, closed after it. */
const closing: Emulator[] = [];

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0.1, log: () => {} });
});

afterEach(async () => {
  await killAll(workers.splice(0));
  for (const e of closing.splice(0)) await e.close();
  cleanTemps();
});

afterAll(async () => {
  await emu?.close();
});

const manifest = (dir: string): string => fastSheets(dir, 4, 'nightly', 'Nightly mascot {{ run.id }}');

/**
 * Each coordinator's time on a run: from a run_started to its run_finished, or, for one that
 * crashed, to the last record it wrote before the next run_started.
 */
function segments(records: readonly JournalRecord[]): [number, number][] {
  const out: [number, number][] = [];
  let open: number | undefined;
  let last = 0;
  for (const r of records) {
    const at = (r as { at?: number }).at ?? last;
    if (r.type === 'run_started') {
      if (open !== undefined) out.push([open, last]);
      open = at;
    }
    if (r.type === 'run_finished' && open !== undefined) {
      out.push([open, at]);
      open = undefined;
    }
    last = at;
  }
  return out;
}

/** The owner of the highest generation of a pipeline lock (see src/run/lock/lock.ts), if any. */
function lockOwner(lock: string): { pid: number; runId: string } | undefined {
  try {
    const generations = readdirSync(lock)
      .filter((n) => /^g-\d+$/.test(n))
      .sort((a, b) => Number(b.slice(2)) - Number(a.slice(2)));
    const top = generations[0];
    if (top === undefined || existsSync(join(lock, top, 'released'))) return undefined;
    return JSON.parse(readFileSync(join(lock, top, 'owner.json'), 'utf8')) as { pid: number; runId: string };
  } catch {
    return undefined;
  }
}

describe('genpipe schedule', () => {
  // Four CLI processes, each starting up and reaching Redis: 20 s was too close on a busy machine.
  it(
    'refuses a cron expression that is not one, and a manifest that does not load, before anything is stored',
    { timeout: 60_000 },
    async () => {
      const dir = tempDir();
      const bad = await runCli([
        'schedule',
        'add',
        manifest(dir),
        '--cron',
        'every night',
        '--out',
        join(dir, 'runs'),
        '--redis',
        redis.url,
        '--queue',
        'refused',
      ]);
      expect(bad.code).toBe(2);
      expect(bad.stderr).toMatch(
        /^genpipe: --cron "every night" is not a schedule: .+\. Five fields \(minute hour day month weekday\), or six with seconds first\.\n$/,
      );
      const missing = await runCli([
        'schedule',
        'add',
        join(dir, 'nope.yaml'),
        '--cron',
        '30 2 * * *',
        '--out',
        join(dir, 'runs'),
        '--redis',
        redis.url,
        '--queue',
        'refused',
      ]);
      expect(missing.code).toBe(2);
      expect((await runCli(['schedule', 'list', '--redis', redis.url, '--queue', 'refused'])).stdout).toBe('no schedules\n');
      const gone = await runCli(['schedule', 'remove', 'nightly', '--redis', redis.url, '--queue', 'refused']);
      expect(gone.code).toBe(1);
    },
  );

  it('the spend guard covers schedules: add refuses a big estimate with no budget, and a tick whose estimate grew spends nothing', async () => {
    const dir = tempDir();
    const out = join(dir, 'runs');
    const queue = 'guarded';
    // 4 sheets, US$0.20, over a --confirm-over of US$0.10: refused without --budget or --yes, nothing stored.
    const path = fastSheets(dir, 4, 'guarded', 'A mascot');
    const refused = await runCli([
      'schedule',
      'add',
      path,
      '--cron',
      '*/2 * * * * *',
      '--out',
      out,
      '--redis',
      redis.url,
      '--queue',
      queue,
      '--confirm-over',
      '0.1',
    ]);
    expect(refused.code).toBe(2);
    expect(refused.stdout).toContain('each run is estimated at US$0.20 (4 instances), with no budget');
    expect(refused.stderr).toContain(
      'over the --confirm-over limit of US$0.10, with no budget: add --budget USD to cap each run, or --yes to approve this estimate',
    );
    expect((await runCli(['schedule', 'list', '--redis', redis.url, '--queue', queue])).stdout).toBe('no schedules\n');
    // Approved at US$0.20; then the manifest grows to 8 sheets (US$0.40): each tick refuses, sending nothing.
    const approved = await runCli([
      'schedule',
      'add',
      path,
      '--cron',
      '*/2 * * * * *',
      '--out',
      out,
      '--redis',
      redis.url,
      '--queue',
      queue,
      '--confirm-over',
      '0.1',
      '--yes',
    ]);
    expect(approved.code, approved.stderr).toBe(0);
    fastSheets(dir, 8, 'guarded', 'A mascot');
    const requestsBefore = emu.requests.inspect({}).length;
    const worker = await startWorkerProcess(redis.url, emu.url, 'g1', ['--queue', queue, '--runs']);
    workers.push(worker);
    const deadline = Date.now() + 20_000;
    // Bounded by the deadline.
    while (Date.now() < deadline && !/The scheduled run of guarded was not started/.test(worker.output()))
      await new Promise((r) => setTimeout(r, 100));
    expect((await runCli(['schedule', 'remove', 'guarded', '--redis', redis.url, '--queue', queue])).code).toBe(0);
    expect(worker.output()).toContain(
      'The scheduled run of guarded was not started: This run is estimated at US$0.40 (8 instances), over the US$0.20 approved when the schedule was added, with no budget; nothing was sent.',
    );
    expect(emu.requests.inspect({}).length).toBe(requestsBefore);
    expect(existsSync(join(out, 'guarded'))).toBe(false);
  }, 60_000);

  it("a schedule priced per instance (a formula, a table) approved with --yes runs on its tick: add approved what the run's guard finds", async () => {
    const dir = tempDir();
    const out = join(dir, 'runs');
    const queue = 'per-instance';
    const write = (name: string, text: string): string => {
      const path = join(dir, `${name}.yaml`);
      writeFileSync(path, `version: 1\nname: ${name}\n${FAST_POLLING}\n${text}`);
      return path;
    };
    const step = (price: string): string =>
      `steps:\n  s:\n    model: character-sheet\n${price}    matrix: { seed: { range: { from: 1, to: 3 } } }\n    input: { tier: cats, seed: "{{ seed }}" }\n`;
    // 3 instances at US$0.051, US$0.052 and US$0.053 once priced; nothing known from the counts.
    const formula = write('formula', step('    price_usd: "{{ 0.05 + input.seed * 0.001 }}"\n'));
    // 3 instances at US$0.05 once priced (US$0.15); US$150 from the counts (each at the dearest row).
    const table = write('table', `prices:\n  character-sheet:\n    - { when: { tier: dogs }, usd: 50 }\n    - { usd: 0.05 }\n${step('')}`);
    for (const path of [formula, table]) {
      const added = await runCli([
        'schedule',
        'add',
        path,
        '--cron',
        '*/2 * * * * *',
        '--out',
        out,
        '--redis',
        redis.url,
        '--queue',
        queue,
        '--confirm-over',
        '0.1',
        '--yes',
      ]);
      expect(added.code, added.stderr).toBe(0);
    }
    // Both are over the limit of US$0.10 once priced: --yes approved the priced figure, the one each tick is checked against.
    const q = new Queue<ScheduledRunData>(runsQueueName(queue), { connection: commandOptions(parseRedisUrl(redis.url)) });
    try {
      expect((await q.getJobScheduler('formula'))?.template?.data?.approvedUsd).toBeCloseTo(0.156, 9);
      expect((await q.getJobScheduler('table'))?.template?.data?.approvedUsd).toBeCloseTo(0.15, 9);
    } finally {
      await q.close();
    }
    // An emulator of its own: what these runs spend is not counted in the other tests' totals.
    const own = await startEmulator({ port: 0, timeScale: 0.1, log: () => {} });
    closing.push(own);
    const worker = await startWorkerProcess(redis.url, own.url, 'p1', ['--queue', queue, '--runs']);
    workers.push(worker);
    const finished = (name: string): boolean => {
      const root = join(out, name);
      if (!existsSync(root)) return false;
      return readdirSync(root)
        .filter((n) => !n.startsWith('.') && n !== 'not-started.jsonl')
        .some((n) => existsSync(join(root, n, 'journal.jsonl')) && journalOf(join(root, n)).records.at(-1)?.type === 'run_finished');
    };
    const deadline = Date.now() + 30_000;
    // Bounded by the deadline.
    while (Date.now() < deadline && !(finished('formula') && finished('table')) && !/was not started/.test(worker.output()))
      await new Promise((r) => setTimeout(r, 100));
    for (const name of ['formula', 'table'])
      expect((await runCli(['schedule', 'remove', name, '--redis', redis.url, '--queue', queue])).code).toBe(0);
    expect(worker.output()).not.toContain('was not started');
    expect(finished('formula'), worker.output()).toBe(true);
    expect(finished('table'), worker.output()).toBe(true);
    expect(own.requests.inspect({}).length).toBeGreaterThan(0);
  }, 90_000);

  it("3 workers with --runs and a schedule every 2 s for 20 s: one run per tick at most, never two at once, a killed coordinator's run taken over and finished", async () => {
    const dir = tempDir();
    const out = join(dir, 'runs');
    const queue = 'sched';
    for (const name of ['s1', 's2', 's3']) workers.push(await startWorkerProcess(redis.url, emu.url, name, ['--queue', queue, '--runs']));
    const added = await runCli([
      'schedule',
      'add',
      manifest(dir),
      '--cron',
      '*/2 * * * * *',
      '--out',
      out,
      '--redis',
      redis.url,
      '--queue',
      queue,
    ]);
    expect(added.code).toBe(0);
    expect(added.stdout).toMatch(/^each run is estimated at US\$0\.20 \(4 instances\), with no budget$/m);
    expect(added.stdout).toMatch(/^schedule nightly: \*\/2 \* \* \* \* \*, runs \S+nightly\.yaml into \S+; next \d{4}-/m);
    const listed = JSON.parse((await runCli(['schedule', 'list', '--redis', redis.url, '--queue', queue, '--json'])).stdout) as {
      name: string;
      cron: string;
    }[];
    expect(listed.map((s) => [s.name, s.cron])).toEqual([['nightly', '*/2 * * * * *']]);
    const started = Date.now();
    // Kill the worker that coordinates a run (the pid in the pipeline's lock), once that run has sent something.
    let killed: WorkerProcess | undefined;
    const deadline = started + 15_000;
    // Bounded by the deadline.
    while (!killed && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      const owner = lockOwner(join(out, 'nightly', '.lock'));
      if (!owner) continue;
      const runDir = join(out, 'nightly', owner.runId);
      if (!existsSync(join(runDir, 'journal.jsonl'))) continue;
      const records = journalOf(runDir).records;
      if (!records.some((r) => r.type === 'submitted') || records.at(-1)?.type === 'run_finished') continue;
      killed = workers.find((w) => w.child.pid === owner.pid);
    }
    expect(killed, 'no worker was coordinating a run').toBeDefined();
    killed?.child.kill('SIGKILL');
    await new Promise((r) => setTimeout(r, Math.max(0, started + 20_000 - Date.now())));
    expect((await runCli(['schedule', 'remove', 'nightly', '--redis', redis.url, '--queue', queue])).code).toBe(0);
    const ticks = Math.ceil((Date.now() - started) / 2_000) + 1;
    // Let the last runs and the takeover (a lock of 10 s, a stall check every 5 s) finish.
    const settle = Date.now() + 60_000;
    const runDirs = (): string[] =>
      readdirSync(join(out, 'nightly'))
        // not-started.jsonl: the ticks skipped while a run held the lock.
        .filter((n) => !n.startsWith('.') && n !== 'not-started.jsonl')
        .map((n) => join(out, 'nightly', n));
    // A tick's run creates its directory a moment before its journal: one without a journal yet is
    // still starting, not finished.
    const finished = (runDir: string): boolean =>
      existsSync(join(runDir, 'journal.jsonl')) && journalOf(runDir).records.at(-1)?.type === 'run_finished';
    // Bounded by the deadline.
    while (
      Date.now() < settle &&
      !(
        runDirs().length > 0 &&
        runDirs().every(finished) &&
        workers.some((w) => w !== killed && /taking over the scheduled run of nightly/.test(w.output()))
      )
    ) {
      await new Promise((r) => setTimeout(r, 250));
    }
    const dirs = runDirs();
    expect(dirs.length).toBeGreaterThanOrEqual(2);
    expect(dirs.length).toBeLessThanOrEqual(ticks);
    const all: [number, number][] = [];
    let resumed = 0;
    for (const runDir of dirs) {
      const records = journalOf(runDir).records;
      const finish = records.filter((r) => r.type === 'run_finished').at(-1) as { outcome?: string } | undefined;
      expect(finish?.outcome, runDir).toBe('completed');
      if (records.filter((r) => r.type === 'run_started').length > 1) resumed++;
      all.push(...segments(records));
    }
    expect(resumed, "the killed coordinator's run was resumed by another worker").toBeGreaterThanOrEqual(1);
    all.sort((a, b) => a[0] - b[0]);
    for (let i = 1; i < all.length; i++) expect(all[i]![0], 'two runs of the schedule at once').toBeGreaterThanOrEqual(all[i - 1]![1]);
    expectOneRequestPerKey(emu);
    expect(spentUsd(emu)).toBeCloseTo(dirs.length * 4 * 0.05, 6);
  }, 150_000);
});
