// One writer per run: a holder displaced by --break-lock, or by a stale-lock
// takeover while it was paused (SIGSTOP), stops before the new holder sends anything, so 40 keyless
// images cost exactly 40 requests; neither process crashes on the other's files (never exit 70).
// The built CLI against an emulator on 127.0.0.1; the lock's stale period is lowered to 6 s.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { FAULT_PROFILES, NO_ROUTE_FAULTS } from '../../src/emulator/faults.js';
import { findRunDir, journalOf, runCli, spentUsd, tempDir, type CliResult } from './runner-helpers.js';

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterAll(async () => {
  await emu.close();
});

function images(dir: string, name: string, count = 40): string {
  const path = join(dir, `${name}.yaml`);
  writeFileSync(
    path,
    `version: 1\nname: ${name}\nprices: { soul-standard: 0.03 }\nsteps:\n  p:\n    model: soul-standard\n    matrix: { n: { range: { from: 1, to: ${count} } } }\n    input: { prompt: "Poster {{ n }}", aspect_ratio: "1:1", resolution: 1080p }\n`,
  );
  return path;
}

const env = (): Record<string, string> => ({ GENPIPE_BASE_URL: emu.url, GENPIPE_LOCK_STALE_MS: '6000' });

async function until(what: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  // Bounded by the deadline.
  while (!what() && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
}

describe('a run taken over stops before the new holder sends anything', () => {
  it(
    '--break-lock of a live run on this host is refused without --force, and with it 40 keyless images cost 40 requests',
    { timeout: 120_000 },
    async () => {
      const dir = tempDir();
      const out = join(dir, 'runs');
      const before = emu.requests.inspect({}).length;
      let sent = 0;
      const first = runCli(['run', images(dir, 'broken'), '--out', out, '--rate', '4', '--concurrency', '4'], {
        env: env(),
        timeoutMs: 100_000,
      });
      await until(() => (sent = emu.requests.inspect({}).length - before) >= 8, 30_000);
      expect(sent).toBeGreaterThanOrEqual(8);
      const runDir = findRunDir(out, 'broken');
      const refused = await runCli(['resume', runDir, '--break-lock'], { env: env() });
      expect(refused.code).toBe(4);
      expect(refused.stderr).toMatch(/--break-lock refused: run \S+ holds the pipeline's lock and is alive on this host \(pid \d+/);
      const second = await runCli(['resume', runDir, '--break-lock', '--force'], { env: env(), timeoutMs: 100_000 });
      const old: CliResult = await first;
      expect(old.code, old.stderr).toBe(4);
      expect([0, 1]).toContain(second.code);
      expect(second.stderr).not.toMatch(/internal error|ENOENT/);
      expect(emu.requests.inspect({}).length - before).toBe(40);
      const report = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { total: { netUsd: number; unknownUsd: number } };
      // Every request is in the report, known or unknown: none paid for twice, none lost.
      expect(Math.round((report.total.netUsd + report.total.unknownUsd) / 0.03)).toBe(40);
    },
  );

  it(
    'a run paused (SIGSTOP) past the stale period and taken over stops at its next submit when it wakes: 40 requests',
    { timeout: 120_000 },
    async () => {
      const dir = tempDir();
      const out = join(dir, 'runs');
      const before = emu.requests.inspect({}).length;
      let pause: ((signal: NodeJS.Signals) => void) | undefined;
      const first = runCli(['run', images(dir, 'paused'), '--out', out, '--rate', '4', '--concurrency', '4'], {
        env: env(),
        timeoutMs: 100_000,
        onSpawn: (send) => (pause = send),
      });
      await until(() => emu.requests.inspect({}).length - before >= 8, 30_000);
      pause?.('SIGSTOP');
      const runDir = findRunDir(out, 'paused');
      // Past the stale period (6 s): a plain resume takes the lock over as stale.
      await new Promise((r) => setTimeout(r, 7_000));
      const second = runCli(['resume', runDir], { env: env(), timeoutMs: 100_000 });
      await until(() => emu.requests.inspect({}).length - before >= 20, 30_000);
      process.kill((await firstPid(out)) ?? 0, 'SIGCONT');
      const [old, resumed] = await Promise.all([first, second]);
      expect(old.code, old.stderr).toBe(4);
      expect(resumed.stderr).not.toMatch(/internal error|ENOENT/);
      expect([0, 1]).toContain(resumed.code);
      expect(emu.requests.inspect({}).length - before).toBe(40);
    },
  );
});

/** The pid of the run that first held the pipeline's lock (its owner record of generation 1). */
async function firstPid(out: string): Promise<number | undefined> {
  const { readdirSync } = await import('node:fs');
  for (const pipeline of readdirSync(out)) {
    try {
      return (JSON.parse(readFileSync(join(out, pipeline, '.lock', 'g-1', 'owner.json'), 'utf8')) as { pid: number }).pid;
    } catch {
      // Cleaned up after the takeover: the owner record is gone.
    }
  }
  return undefined;
}

describe('a displaced holder writes nothing after the new holder starts', () => {
  it(
    'SIGSTOP past the stale period with submits in flight, a takeover, then SIGCONT: the old holder appends nothing after the new run_started, and no progress or summary claims a failure the report lacks',
    { timeout: 120_000 },
    async () => {
      // Each submit waits 1.5 s before the service processes it: the pause catches some in flight,
      // answered while the holder is stopped, and read by it when it wakes.
      const slow = await startEmulator({
        port: 0,
        timeScale: 0,
        log: () => {},
        faults: {
          ...FAULT_PROFILES.none,
          name: 'slow-submits',
          routes: { ...FAULT_PROFILES.none.routes, submit: { ...NO_ROUTE_FAULTS, latency_ms: 1_500 } },
        },
      });
      try {
        const dir = tempDir();
        const out = join(dir, 'runs');
        const env = { GENPIPE_BASE_URL: slow.url, GENPIPE_LOCK_STALE_MS: '6000' };
        const manifest = images(dir, 'fenced', 12);
        let pause: ((signal: NodeJS.Signals) => void) | undefined;
        const first = runCli(['run', manifest, '--out', out, '--rate', '1000', '--concurrency', '4', '--progress-interval', '1'], {
          env,
          timeoutMs: 100_000,
          onSpawn: (send) => (pause = send),
        });
        // Stopped once submits are journaled and on their way, before the service answers them.
        const unansweredNow = (): boolean => {
          try {
            const records = journalOf(findRunDir(out, 'fenced')).records;
            return records.filter((r) => r.type === 'intent').length > records.filter((r) => r.type === 'submitted').length;
          } catch {
            return false;
          }
        };
        await until(unansweredNow, 30_000);
        await new Promise((r) => setTimeout(r, 150));
        pause?.('SIGSTOP');
        const runDir = findRunDir(out, 'fenced');
        await new Promise((r) => setTimeout(r, 7_000));
        const second = runCli(['resume', runDir, '--progress-interval', '1'], { env, timeoutMs: 100_000 });
        await until(() => journalOf(runDir).records.filter((r) => r.type === 'run_started').length >= 2, 30_000);
        process.kill((await firstPid(out)) ?? 0, 'SIGCONT');
        const [old, resumed] = await Promise.all([first, second]);
        expect(old.code, old.stderr).toBe(4);
        expect([0, 1]).toContain(resumed.code);

        const records = journalOf(runDir).records;
        const takeover = records.findLastIndex((r) => r.type === 'run_started');
        const before = records.slice(0, takeover);
        const after = records.slice(takeover + 1);
        // The pause caught a submit the service took while the old holder was stopped.
        const unanswered = new Set(before.filter((r) => r.type === 'intent').map((r) => r.instance));
        for (const r of before) if (r.type === 'submitted' || r.type === 'status') unanswered.delete(r.instance);
        expect(unanswered.size, records.map((r) => `${r.type} ${'instance' in r ? r.instance : ''}`).join('\n')).toBeGreaterThan(0);
        // After the new holder's run_started, only its own records: none about a submit it did not
        // make (the old holder's answers), one run_finished, no record twice.
        const own = new Set(after.filter((r) => r.type === 'intent').map((r) => r.instance));
        const foreign = after.filter((r) => r.type === 'submitted' && !own.has(r.instance));
        expect(foreign).toEqual([]);
        expect(after.filter((r) => r.type === 'run_finished')).toHaveLength(1);
        const seen = after
          .map((r) => `${r.type} ${'instance' in r ? r.instance : ''}`)
          .filter((k) => !k.startsWith('intent') && !k.startsWith('run_'));
        expect(seen.length).toBe(new Set(seen).size);
        expect(old.stderr).not.toMatch(/internal error/);

        // Progress and summary count failures as the report does.
        const report = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as {
          total: { counts: Record<string, number> };
        };
        const counts = report.total.counts;
        const failedInReport = (counts.failed ?? 0) + (counts.nsfw ?? 0) + (counts.canceled ?? 0);
        for (const [who, result] of [
          ['resume', resumed],
          ['old holder', old],
        ] as const) {
          for (const m of result.stderr.matchAll(/^progress: \d+\/\d+ done \((\d+) failed(?:, (\d+) unknown)?\)/gm))
            expect(Number(m[1]), `${who}: ${m[0]}`).toBeLessThanOrEqual(failedInReport);
          for (const m of result.stdout.matchAll(/; (\d+) completed, (\d+) failed, (\d+) nsfw, (\d+) canceled/g))
            expect(Number(m[2]) + Number(m[3]) + Number(m[4]), `${who}: ${m[0]}`).toBeLessThanOrEqual(failedInReport);
        }
        // Unknown apart from failures, as the report counts them, and counted once.
        const lastProgress = [...resumed.stderr.matchAll(/^progress: .*$/gm)].at(-1)?.[0] ?? '';
        expect(lastProgress).toMatch(new RegExp(`\\(${failedInReport} failed, ${counts.unknown} unknown\\)`));
        expect(resumed.stdout).toContain(`, ${counts.unknown} unknown;`);

        // What the old holder was paid for and could not journal it said, pair by pair; adopted,
        // they complete the run with no second POST, and the report is the ledger.
        const pairs = [...old.stderr.matchAll(/--adopt '([^']+)'$/gm)].map((m) => m[1] as string);
        expect(pairs.length).toBe(counts.unknown);
        const posts = slow.requests.inspect({}).length;
        const adopted = await runCli(['resume', runDir, ...pairs.flatMap((p) => ['--adopt', p])], { env, timeoutMs: 60_000 });
        expect(adopted.code, adopted.stderr).toBe(0);
        expect(slow.requests.inspect({}).length).toBe(posts);
        expect(posts).toBe(12);
        const final = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as {
          total: { netUsd: number; unknownUsd: number; counts: Record<string, number> };
        };
        expect(final.total.counts.completed).toBe(12);
        expect(final.total.unknownUsd).toBe(0);
        expect(final.total.netUsd).toBeCloseTo(spentUsd(slow), 6);
      } finally {
        await slow.close();
      }
    },
  );
});
