// Trust: a run always ends, pays once, and tells the truth about money. Each test
// drives the built CLI (or runPlan in-process where a seam is needed) against a real emulator on
// loopback, and checks the emulator's own records and ledger, not only what genpipe says.
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseCsv } from 'csv-parse/sync';
import { afterAll, describe, expect, it } from 'vitest';
import { GenpipeError } from '../../src/api/errors.js';
import type { RunEvent } from '../../src/run/events.js';
import { buildCostReport } from '../../src/report/cost-report.js';
import { runPlan, type RateLimiter } from '../../src/run/runner.js';
import { closeRun, prepareRun } from './pin-helpers.js';
import {
  BIN,
  cleanTemps,
  emuRequests,
  expectNoSecret,
  freePort,
  marketingManifest,
  waitForRequests,
  findRunDir,
  HF_KEY,
  journalOf,
  runCli,
  sha256File,
  sheetsManifest,
  spentUsd,
  tempDir,
  withEmulator,
} from './runner-helpers.js';

afterAll(cleanTemps);

const reportOf = (runDir: string): { total: { netUsd: number; estimatedUsd: number; counts: Record<string, number>; rerolls: number } } =>
  JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8'));

describe('a run always ends', () => {
  it(
    'a service answering 429 to every submit ends the run by itself: exit 5, nothing charged, resumable',
    { timeout: 90_000 },
    async () => {
      const dir = tempDir();
      const faults = join(dir, 'throttled.yaml');
      writeFileSync(faults, 'submit:\n  rate_429: 1\n');
      await withEmulator({ timeScale: 0, faults }, async (emu) => {
        const out = tempDir();
        const manifest = sheetsManifest(dir, 4, { name: 'throttled' });
        const result = await runCli(['run', manifest, '--base-url', emu.url, '--out', out, '--retry-budget', '3', '--rate', '1000'], {
          timeoutMs: 60_000,
        });
        expect(result.code, result.stderr).toBe(5);
        expect(result.stderr).toContain('The service kept failing, so the run stopped instead of retrying without end');
        expect(emuRequests(emu)).toHaveLength(0);
        expect(spentUsd(emu)).toBe(0);
        const runDir = findRunDir(out, 'throttled');
        // Every refused submit is settled in the journal: a resume sends it as new, never as unknown.
        const records = journalOf(runDir).records;
        const refused = records.filter((r) => r.type === 'refused');
        expect(refused.length).toBeGreaterThan(0);
        expect(new Set(refused.map((r) => (r as { code: string }).code))).toEqual(new Set(['rate_limited']));
        expect(reportOf(runDir).total.netUsd).toBe(0);
        expect(records.at(-1)).toMatchObject({ type: 'run_finished', outcome: 'stopped' });
      });
    },
  );

  it(
    'the watchdog ends a run whose limiter never serves its waiters: an internal error naming the state, journal flushed',
    { timeout: 30_000 },
    async () => {
      await withEmulator({ timeScale: 0 }, async (emu) => {
        const dir = tempDir();
        const manifest = sheetsManifest(dir, 5, { name: 'stuck' });
        const run = await prepareRun(emu, manifest);
        const { plan, hash, runId, runDir, client } = run;
        // The shape of the TokenBucket hang: waiters queued, no timer pending, nobody ever served.
        const broken: RateLimiter = { take: () => new Promise<void>(() => {}), sleeping: false, waiting: 0 };
        try {
          const error = await runPlan({
            plan,
            client,
            runDir,
            runId,
            planHash: hash,
            signal: new AbortController().signal,
            concurrency: 2,
            limiter: broken,
            watchdogMs: 50,
          }).catch((e: unknown) => e);
          expect(error).toBeInstanceOf(GenpipeError);
          expect((error as GenpipeError).code).toBe('internal');
          // A step's first submit goes alone (first-answer-gate.ts): the second slot waits for its answer.
          expect((error as GenpipeError).message).toMatch(
            /^The run is stuck: nothing is in flight and no timer is pending, with 1 waiting for the rate limiter, 1 waiting for the first answer of step sheets, 1 waiting for a concurrency slot\. .*genpipe resume/,
          );
          expect(emuRequests(emu)).toHaveLength(0);
          expect(journalOf(runDir).records.at(-1)).toMatchObject({ type: 'run_finished', outcome: 'stopped' });
        } finally {
          await closeRun(run);
        }
      });
    },
  );

  it('the watchdog leaves alone a run whose limiter is sleeping towards its next token', { timeout: 30_000 }, async () => {
    await withEmulator({ timeScale: 0 }, async (emu) => {
      const dir = tempDir();
      const manifest = sheetsManifest(dir, 3, { name: 'slow' });
      const run = await prepareRun(emu, manifest);
      const { plan, hash, runId, runDir, client } = run;
      // A slow but honest limiter: each token comes 300 ms later, with its timer pending meanwhile,
      // i.e. several watchdog looks (50 ms) with no other progress.
      let sleeping = 0;
      const slow: RateLimiter = {
        take: () => {
          sleeping++;
          return new Promise<void>((resolve) => setTimeout(resolve, 300)).finally(() => sleeping--);
        },
        get sleeping() {
          return sleeping > 0;
        },
        waiting: 0,
      };
      try {
        const summary = await runPlan({
          plan,
          client,
          runDir,
          runId,
          planHash: hash,
          signal: new AbortController().signal,
          concurrency: 1,
          limiter: slow,
          watchdogMs: 50,
          poll: { floorMs: 1, baseMs: 2, capMs: 20 },
        });
        expect(summary.outcome).toBe('completed');
        expect(summary.counts.completed).toBe(3);
      } finally {
        await closeRun(run);
      }
    });
  });

  it(
    'Ctrl-C while a plan of millions is being checked ends at once: exit 130, nothing sent, no run directory',
    { timeout: 90_000 },
    async () => {
      await withEmulator({ timeScale: 0 }, async (emu) => {
        const dir = tempDir();
        const out = tempDir();
        const manifest = join(dir, 'huge.yaml');
        writeFileSync(
          manifest,
          `version: 1\nname: huge\nsteps:\n  sheets:\n    model: character-sheet\n    matrix:\n      seed: { range: { from: 1, to: 1000000 } }\n      variation_index: { range: { from: 0, to: 4 } }\n    input: { tier: cats, seed: "{{ seed }}", variation_index: "{{ variation_index }}" }\n`,
        );
        // Without the pass yielding to the event loop, the signal would wait for the whole check,
        // and the run would then start (a run directory, requests) before stopping.
        const result = await runCli(['run', manifest, '--base-url', emu.url, '--out', out, '--budget', '1000000'], {
          killWhen: { signal: 'SIGINT', pattern: /checking every instance before anything is spent: [0-9,]+ of 5,000,000/ },
          timeoutMs: 80_000,
        });
        expect(result.code, result.stderr).toBe(130);
        expect(result.stderr).toContain('Interrupted while checking the plan; nothing was sent.');
        expect(emuRequests(emu)).toHaveLength(0);
        expect(readdirSync(out)).toEqual([]);
      });
    },
  );

  it('a reader of stdout that leaves (| head -1) does not interrupt the run: it finishes quietly', { timeout: 60_000 }, async () => {
    await withEmulator({ timeScale: 0.002 }, async (emu) => {
      const dir = tempDir();
      const out = tempDir();
      const manifest = sheetsManifest(dir, 12, { name: 'piped' });
      const child = spawn(
        process.execPath,
        [BIN, 'run', manifest, '--base-url', emu.url, '--out', out, '--json-logs', '--concurrency', '2'],
        {
          env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', HF_KEY },
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      let stderr = '';
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      // Like `head -1`: read the first line, then close the pipe while the run goes on.
      await new Promise<void>((resolve) => child.stdout.once('data', () => resolve()));
      child.stdout.destroy();
      const killer = setTimeout(() => child.kill('SIGKILL'), 45_000);
      const code = await new Promise<number | null>((resolve) => child.on('close', (c) => resolve(c)));
      clearTimeout(killer);
      expect(code, stderr).toBe(0);
      expect(stderr).toBe('');
      const runDir = findRunDir(out, 'piped');
      expect(journalOf(runDir).records.at(-1)).toMatchObject({ type: 'run_finished', outcome: 'completed' });
      expect(emuRequests(emu).filter((r) => r.status === 'completed')).toHaveLength(12);
    });
  });
});

describe('one run per pipeline', () => {
  it(
    '--break-lock takes the lock from a live run, naming it; the displaced run notices and stops with exit 4, resumable',
    { timeout: 90_000 },
    async () => {
      // Requests stay queued for a minute: the first run is live, with work in flight, when it loses the lock.
      await withEmulator(
        { timeScale: 1, durations: { 'character-sheet': { queuedMs: [60_000, 60_000], runMs: [1_000, 1_000] } } },
        async (emu) => {
          const dir = tempDir();
          const out = tempDir();
          const manifest = sheetsManifest(dir, 2, { name: 'locked' });
          // Every process here shares one stale period, as on a host where it is set: the first run
          // then refreshes its lock every 2 s, so it is live, not stale, however long the runs
          // below take to start. (With the breaker alone at 6 s, the first run's lock, refreshed
          // every 10 s by default, looked stale once they took over 6 s: on a loaded machine.)
          const lockEnv = { GENPIPE_LOCK_STALE_MS: '12000' };
          const first = runCli(['run', manifest, '--base-url', emu.url, '--out', out], { timeoutMs: 80_000, env: lockEnv });
          expect(await waitForRequests(emu, 2)).toBe(true);
          const runDir = findRunDir(out, 'locked');
          const firstId = runDir.split('/').pop() as string;

          const skipped = await runCli(['run', manifest, '--base-url', emu.url, '--out', out], { env: lockEnv });
          expect(skipped.code).toBe(4);
          // Taken deliberately; the second run stops at once (a budget of 0) and lets the lock go.
          // A live run on this host is broken only with --force.
          const refused = await runCli(['run', manifest, '--base-url', emu.url, '--out', out, '--break-lock', '--budget', '0'], {
            env: lockEnv,
          });
          expect(refused.code).toBe(4);
          expect(refused.stderr).toContain('--break-lock refused: run ');
          const breaker = await runCli(['run', manifest, '--base-url', emu.url, '--out', out, '--break-lock', '--force', '--budget', '0'], {
            env: lockEnv,
          });
          expect(breaker.code, breaker.stderr).toBe(3);
          expect(breaker.stderr).toContain(`--break-lock took the pipeline's lock from run ${firstId} (pid `);

          const displaced = await first;
          expect(displaced.code, displaced.stderr).toBe(4);
          expect(displaced.stderr).toMatch(/lock/i);
          expect(journalOf(runDir).records.at(-1)).toMatchObject({ type: 'run_finished' });
          // Nothing was sent twice: two requests, one per key.
          expect(emuRequests(emu)).toHaveLength(2);
        },
      );
    },
  );
});

describe('nothing is paid twice or for nothing', () => {
  it('a service that refuses connections: exit 5, nothing spent in report.md and genpipe runs', { timeout: 60_000 }, async () => {
    const dir = tempDir();
    const out = tempDir();
    // Nothing listens there: every connection is refused.
    const port = await freePort();
    const manifest = sheetsManifest(dir, 6, { name: 'offline' });
    const result = await runCli(['run', manifest, '--base-url', `http://127.0.0.1:${port}`, '--out', out], { timeoutMs: 45_000 });
    expect(result.code, result.stderr).toBe(5);
    expect(result.stderr).toContain('The service could not be reached');
    expect(result.stderr).toContain('nothing was sent');
    const runDir = findRunDir(out, 'offline');
    const report = reportOf(runDir);
    expect(report.total.netUsd).toBe(0);
    expect(report.total.estimatedUsd).toBe(0);
    expect(readFileSync(join(runDir, 'report.md'), 'utf8')).toContain('Net **US$0.00**');
    const runs = await runCli(['runs', '--out', out, '--json']);
    expect(runs.code, runs.stderr).toBe(0);
    const listed = JSON.parse(runs.stdout) as { netUsd: number }[];
    expect(listed).toHaveLength(1);
    expect(listed[0]?.netUsd).toBe(0);
    for (const r of journalOf(runDir).records.filter((r) => r.type === 'refused')) expect(r).toMatchObject({ code: 'not_sent' });
    expectNoSecret(runDir, result.stdout + result.stderr);
  });

  it('--cancel-on-abort journals each accepted cancel as canceled, and the summary counts them', { timeout: 60_000 }, async () => {
    // Requests stay queued for 20 s, so every cancel comes while they can still be canceled.
    await withEmulator(
      { timeScale: 1, durations: { 'character-sheet': { queuedMs: [20_000, 20_000], runMs: [1_000, 1_000] } } },
      async (emu) => {
        const dir = tempDir();
        const manifest = sheetsManifest(dir, 4, { name: 'canceled' });
        const run = await prepareRun(emu, manifest);
        const { plan, hash, runId, runDir, client } = run;
        const controller = new AbortController();
        try {
          // Ctrl-C once all four are submitted and journaled (a cancel needs the request id).
          let submitted = 0;
          const running = runPlan({
            plan,
            client,
            runDir,
            runId,
            planHash: hash,
            signal: controller.signal,
            concurrency: 4,
            cancelOnAbort: true,
            onEvent: (event) => {
              if (event.type === 'instance_submitted' && ++submitted === 4) controller.abort(new Error('interrupted'));
            },
          });
          const summary = await running;
          expect(summary.outcome).toBe('aborted');
          expect(summary.counts.canceled).toBe(4);
          expect(emuRequests(emu).map((r) => r.status)).toEqual(['canceled', 'canceled', 'canceled', 'canceled']);
          const finals = journalOf(runDir).records.filter((r) => r.type === 'status');
          expect(finals.map((r) => (r as { status: string }).status)).toEqual(['canceled', 'canceled', 'canceled', 'canceled']);
          // Canceled requests are refunded, and the report agrees with the ledger.
          expect(spentUsd(emu)).toBe(0);
          const report = await buildCostReport(runDir);
          expect(report.total.counts.canceled).toBe(4);
          expect(report.total.netUsd).toBe(spentUsd(emu));
        } finally {
          await closeRun(run);
        }
      },
    );
  });

  it(
    'a flipped byte in an unanswered keyless intent: resume refuses (exit 2, file and line); --accept-corrupt makes it unknown, never paid again',
    { timeout: 90_000 },
    async () => {
      await withEmulator({ timeScale: 0 }, async (emu) => {
        const dir = tempDir();
        const out = tempDir();
        const manifest = marketingManifest(dir, 3, 'damaged');
        // Killed right after the second POST left: its intent is synced, its answer never journaled.
        const crashed = await runCli(['run', manifest, '--base-url', emu.url, '--out', out, '--concurrency', '1'], {
          env: { GENPIPE_CRASH_AT: 'after_post:2' },
        });
        expect(crashed.signal).toBe('SIGKILL');
        expect(emuRequests(emu)).toHaveLength(2);
        const runDir = findRunDir(out, 'damaged');
        const path = join(runDir, 'journal.jsonl');
        const lines = readFileSync(path, 'utf8').split('\n');
        const at = lines.findIndex((l) => l.includes('"type":"intent"') && l.includes('ads[n=2]'));
        expect(at).toBeGreaterThan(0);
        // One bit of the body hash flips on disk.
        const line = lines[at]!;
        const hashAt = line.indexOf('"bodyHash":"') + 20;
        lines[at] = line.slice(0, hashAt) + (line[hashAt] === 'a' ? 'b' : 'a') + line.slice(hashAt + 1);
        writeFileSync(path, lines.join('\n'));
        const before = readFileSync(path);

        const refused = await runCli(['resume', runDir, '--base-url', emu.url]);
        expect(refused.code).toBe(2);
        expect(refused.stderr).toContain(`${path} may be damaged: line ${at + 1}`);
        expect(refused.stderr).toContain('--accept-corrupt');
        expect(readFileSync(path)).toEqual(before);
        expect(emuRequests(emu)).toHaveLength(2);

        const accepted = await runCli(['resume', runDir, '--base-url', emu.url, '--accept-corrupt']);
        expect(accepted.code).toBe(1);
        expect(accepted.stderr).toContain(`journal line ${at + 1} is damaged: ads[n=2] is treated as unknown`);
        // ads[n=3] is sent; ads[n=2], whose intent was damaged, is not sent again.
        const rows = emuRequests(emu);
        expect(rows).toHaveLength(3);
        expect(new Set(rows.map((r) => r.body_hash)).size).toBe(3);
        // Its only line is damaged and may have been an intent whose POST spent money (it did):
        // every view says unknown, its money unknown, never "not started" (nothing spent).
        const report = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as {
          total: { counts: Record<string, number>; unpricedInstances: number };
          instances: { instance: string; status: string; unpricedInstances: number }[];
        };
        expect(report.total.counts).toMatchObject({ completed: 2, not_started: 0, unknown: 1 });
        const damagedLine = report.instances.find((l) => l.instance === 'ads[n=2]');
        expect(damagedLine).toMatchObject({ status: 'unknown' });
        // Its money is unknown too: the model has no price here, so it counts as an unpriced
        // attempt (never US$0 spent), as the two sent and paid do.
        expect(damagedLine?.unpricedInstances).toBe(1);
        expect(report.total.unpricedInstances).toBe(3);
        expect(spentUsd(emu)).toBeGreaterThan(0);
        // The summary's count is the report's.
        expect(accepted.stdout).not.toContain('not started');
        expect(Number(/(\d+) unknown/.exec(accepted.stdout)?.[1])).toBe(report.total.counts.unknown);
        const md = readFileSync(join(runDir, 'report.md'), 'utf8');
        expect(md).toMatch(/\| ads\[n=2\] \| unknown \|/);
        const csv = parseCsv(readFileSync(join(runDir, 'outputs.csv'), 'utf8'), { columns: true }) as Record<string, string>[];
        expect(csv.find((r) => r.instance === 'ads[n=2]')).toMatchObject({ status: 'unknown' });
        // `genpipe report`, reading the journal anew, says the same.
        const again = await runCli(['report', runDir, '--json']);
        expect(again.code, again.stderr).toBe(0);
        expect((JSON.parse(again.stdout) as typeof report).total.counts).toEqual(report.total.counts);
      });
    },
  );

  it(
    "a damaged line that names no instance (the run_finished record) changes no instance's status: --accept-corrupt resumes, every instance still completed",
    { timeout: 90_000 },
    async () => {
      await withEmulator({ timeScale: 0 }, async (emu) => {
        const dir = tempDir();
        const out = tempDir();
        const manifest = marketingManifest(dir, 3, 'nameless');
        expect((await runCli(['run', manifest, '--base-url', emu.url, '--out', out])).code).toBe(0);
        const runDir = findRunDir(out, 'nameless');
        const path = join(runDir, 'journal.jsonl');
        const lines = readFileSync(path, 'utf8').split('\n');
        const at = lines.findIndex((l) => l.includes('"type":"run_finished"'));
        expect(at).toBeGreaterThan(0);
        // One byte of the outcome flips on disk: a line of the run, no instance's.
        const line = lines[at]!;
        const outcomeAt = line.indexOf('"outcome":"') + 11;
        lines[at] = line.slice(0, outcomeAt) + (line[outcomeAt] === 'x' ? 'y' : 'x') + line.slice(outcomeAt + 1);
        writeFileSync(path, lines.join('\n'));

        const accepted = await runCli(['resume', runDir, '--base-url', emu.url, '--accept-corrupt']);
        expect(accepted.code, accepted.stderr).toBe(0);
        expect(accepted.stderr).toContain(
          `journal line ${at + 1} is damaged: every instance not yet submitted or final is treated as unknown`,
        );
        expect(emuRequests(emu)).toHaveLength(3);
        const report = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as {
          total: { counts: Record<string, number>; unknownUsd: number };
        };
        expect(report.total.counts).toMatchObject({ completed: 3, unknown: 0, not_started: 0 });
        expect(report.total.unknownUsd).toBe(0);
        expect(accepted.stdout).not.toContain('unknown');
        const csv = parseCsv(readFileSync(join(runDir, 'outputs.csv'), 'utf8'), { columns: true }) as Record<string, string>[];
        expect(csv.map((r) => r.status)).toEqual(['completed', 'completed', 'completed']);
      });
    },
  );

  it(
    'a run made on the embedded emulator, resumed with --emulator: its in-flight requests are unknown, not failed; --retry unknown sends them',
    { timeout: 90_000 },
    async () => {
      const dir = tempDir();
      const out = tempDir();
      const manifest = sheetsManifest(dir, 6, { name: 'offline' });
      // Killed right after the third POST: requests in flight at an emulator that dies with the process.
      const crashed = await runCli(['run', manifest, '--emulator', '--out', out], {
        env: { GENPIPE_CRASH_AT: 'after_post:3', HF_KEY: '' },
      });
      expect(crashed.signal).toBe('SIGKILL');
      const runDir = findRunDir(out, 'offline');
      const inFlight = new Set(
        journalOf(runDir)
          .records.filter((r) => r.type === 'intent')
          .map((r) => (r as { instance: string }).instance),
      );
      const finished = new Set(
        journalOf(runDir)
          .records.filter((r) => r.type === 'status')
          .map((r) => (r as { instance: string }).instance),
      );
      const lost = [...inFlight].filter((id) => !finished.has(id));
      expect(lost.length).toBeGreaterThan(0);

      const resumed = await runCli(['resume', runDir, '--emulator'], { env: { HF_KEY: '' } });
      expect(resumed.code, resumed.stderr).toBe(1);
      expect(resumed.stdout).toContain(`${lost.length} unknown`);
      expect(resumed.stdout).toMatch(/ 0 failed/);

      const retried = await runCli(['resume', runDir, '--emulator', '--retry', 'unknown'], { env: { HF_KEY: '' } });
      expect(retried.code, retried.stderr).toBe(0);
      expect(retried.stdout).toContain('6 completed, 0 failed');
    },
  );

  it(
    'keys belong to a run: two runs of one manifest make their own requests; --reuse makes none and reports reused at US$0',
    { timeout: 90_000 },
    async () => {
      await withEmulator({ timeScale: 0 }, async (emu) => {
        const dir = tempDir();
        const out = tempDir();
        const manifest = sheetsManifest(dir, 6, { name: 'again' });
        const common = ['--base-url', emu.url, '--out', out];
        expect((await runCli(['run', manifest, ...common])).code).toBe(0);
        expect((await runCli(['run', manifest, ...common])).code).toBe(0);
        expect(emuRequests(emu)).toHaveLength(12);
        expect(new Set(emuRequests(emu).map((r) => r.idempotency_key)).size).toBe(12);
        const spentBefore = spentUsd(emu);
        const earlier = new Set(readRunDirs(out, 'again'));

        const reused = await runCli(['run', manifest, ...common, '--reuse']);
        expect(reused.code, reused.stderr).toBe(0);
        expect(reused.stdout).toContain('6 reused');
        expect(emuRequests(emu)).toHaveLength(12);
        expect(spentUsd(emu)).toBe(spentBefore);
        // The new run's directory (not the last by name: two runs started in the same second sort by their random suffix).
        const added = readRunDirs(out, 'again').filter((d) => !earlier.has(d));
        expect(added).toHaveLength(1);
        const third = added[0] as string;
        const report = reportOf(third);
        expect(report.total.counts.reused).toBe(6);
        expect(report.total.netUsd).toBe(0);
        // The files are there, byte for byte those of an earlier run, and outputs.csv says reused.
        const csv = readFileSync(join(third, 'outputs.csv'), 'utf8').trim().split(/\r?\n/).slice(1);
        expect(csv).toHaveLength(6);
        for (const row of csv) {
          expect(row).toContain(',reused,');
          const file = /,(outputs\/[^,]+),([0-9a-f]{64}),/.exec(row);
          expect(file).not.toBeNull();
          expect(sha256File(join(third, file![1]!))).toBe(file![2]);
        }
      });
    },
  );

  it('resume --retry failed sends new requests, with new keys, only for the failed instances', { timeout: 90_000 }, async () => {
    await withEmulator({ timeScale: 0, failureRate: 0.3, seed: 11 }, async (emu) => {
      const dir = tempDir();
      const out = tempDir();
      const manifest = sheetsManifest(dir, 12, { name: 'flaky' });
      const first = await runCli(['run', manifest, '--base-url', emu.url, '--out', out]);
      expect(first.code).toBe(1);
      const before = emuRequests(emu);
      const failed = before.filter((r) => r.status === 'failed');
      expect(failed.length).toBeGreaterThan(0);
      expect(failed.length).toBeLessThan(12);
      const runDir = findRunDir(out, 'flaky');

      const plain = await runCli(['resume', runDir, '--base-url', emu.url]);
      expect(plain.code).toBe(1);
      expect(emuRequests(emu)).toHaveLength(before.length);

      const retried = await runCli(['resume', runDir, '--base-url', emu.url, '--retry', 'failed']);
      const after = emuRequests(emu);
      expect(after).toHaveLength(before.length + failed.length);
      const oldKeys = new Set(before.map((r) => r.idempotency_key));
      for (const row of after.slice(before.length)) expect(oldKeys.has(row.idempotency_key)).toBe(false);
      const retries = journalOf(runDir).records.filter((r) => r.type === 'retry');
      expect(retries).toHaveLength(failed.length);
      expect(retried.code).toBe(after.slice(before.length).some((r) => r.status === 'failed') ? 1 : 0);
    });
  });

  it(
    '--retry takes only failed, canceled, nsfw and unknown, and only on a resume (exit 2, nothing sent)',
    { timeout: 30_000 },
    async () => {
      await withEmulator({ timeScale: 0 }, async (emu) => {
        const dir = tempDir();
        const manifest = sheetsManifest(dir, 2, { name: 'refused' });
        const bad = await runCli(['run', manifest, '--base-url', emu.url, '--out', join(dir, 'out'), '--retry', 'failed']);
        expect(bad.code).toBe(2);
        expect(bad.stderr).toContain('--retry starts new attempts of instances of an earlier run');
        const typo = await runCli(['resume', join(dir, 'nowhere'), '--base-url', emu.url, '--retry', 'failed,complete']);
        expect(typo.code).toBe(2);
        expect(typo.stderr).toContain('"complete" is none of them');
        expect(emuRequests(emu)).toHaveLength(0);
      });
    },
  );

  it(
    'a re-roll sends a seed outside the sweep, journals it, and counts it apart from finished instances',
    { timeout: 90_000 },
    async () => {
      await withEmulator({ timeScale: 0, nsfwRate: 0.25, seed: 5 }, async (emu) => {
        const dir = tempDir();
        const out = tempDir();
        const manifest = sheetsManifest(dir, 20, { name: 'reroll', extra: 'defaults: { on_nsfw: reroll }' });
        const result = await runCli(['run', manifest, '--base-url', emu.url, '--out', out, '--json-logs']);
        const rows = emuRequests(emu) as unknown as { details: { seed_given: number }; status: string }[];
        const seeds = rows.map((r) => r.details.seed_given);
        const rerolledSeeds = seeds.filter((s) => s > 20);
        expect(rows.filter((r) => r.status === 'nsfw').length).toBeGreaterThan(0);
        // Every request beyond the 20 planned ones is a re-roll, with a seed no instance has and no other re-roll took.
        expect(rerolledSeeds).toHaveLength(rows.length - 20);
        expect(new Set(seeds).size).toBe(seeds.length);
        const runDir = findRunDir(out, 'reroll');
        const journaled = journalOf(runDir)
          .records.filter((r) => r.type === 'reroll')
          .map((r) => (r as { seed: number }).seed);
        expect(journaled.sort()).toEqual([...rerolledSeeds].sort());
        // Each re-rolled instance's outputs.csv row has the last seed it was re-rolled to.
        const lastSeed = new Map<string, number>();
        for (const r of journalOf(runDir).records) if (r.type === 'reroll') lastSeed.set(r.instance, (r as { seed: number }).seed);
        expect(lastSeed.size).toBeGreaterThan(0);
        const csvRows = parseCsv(readFileSync(join(runDir, 'outputs.csv'), 'utf8'), { columns: true }) as Record<string, string>[];
        for (const [instance, seed] of lastSeed) {
          expect(csvRows.find((row) => row.instance === instance)?.reroll_seed, instance).toBe(String(seed));
        }
        const report = reportOf(runDir);
        expect(report.total.rerolls).toBe(journaled.length);
        // The refunded nsfw attempts and the re-rolls that replaced them: the report is the ledger.
        expect(report.total.netUsd).toBe(spentUsd(emu));
        // Progress: an instance finishes once, whatever its re-rolls: never more finished than planned.
        const events = result.stdout
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l) as RunEvent);
        const finished = events.filter((e) => e.type === 'instance_finished');
        expect(finished).toHaveLength(20);
        expect(events.filter((e) => e.type === 'instance_rerolled')).toHaveLength(journaled.length);
      });
    },
  );
});

function readRunDirs(out: string, pipeline: string): string[] {
  // Run ids start with a UTC stamp: sorted names are in start order to the second only.
  return readdirSync(join(out, pipeline), { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => join(out, pipeline, d.name))
    .sort();
}
