// One writer per run: a holder displaced by --break-lock, or by a stale-lock
// takeover while it was paused (SIGSTOP), stops before the new holder sends anything, so 40 keyless
// images cost exactly 40 requests; neither process crashes on the other's files (never exit 70).
// The built CLI against an emulator on 127.0.0.1; the lock's stale period is lowered to 6 s.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { findRunDir, runCli, tempDir, type CliResult } from './runner-helpers.js';

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterAll(async () => {
  await emu.close();
});

function images(dir: string, name: string): string {
  const path = join(dir, `${name}.yaml`);
  writeFileSync(
    path,
    `version: 1\nname: ${name}\nprices: { soul-standard: 0.03 }\nsteps:\n  p:\n    model: soul-standard\n    matrix: { n: { range: { from: 1, to: 40 } } }\n    input: { prompt: "Poster {{ n }}", aspect_ratio: "1:1", resolution: 1080p }\n`,
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
