// The run's figures agree: an interrupted run's summary counts add
// up to its instances, in flight included; and a run made on the embedded emulator, killed, then
// resumed on a fresh one, says the same thing in its summary, report.json and `genpipe runs`: what
// the dead service had in flight is unknown everywhere (journaled as `forgotten`), never "failed"
// in one place and "in flight" in another.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator } from '../../src/emulator/index.js';
import { findRunDir, runCli, tempDir } from './runner-helpers.js';

const COUNTED = ['completed', 'failed', 'nsfw', 'canceled', 'unknown', 'reused', 'in flight', 'not started'] as const;

/** The counts of a summary line (`… interrupted; 8 completed, 0 failed, …, 8 in flight, 64 not started; …`). */
function summaryCounts(output: string, pipeline: string): Record<string, number> {
  const line = output.split('\n').find((l) => l.startsWith(`${pipeline} `) && /; \d+ completed/.test(l));
  expect(line, output).toBeDefined();
  const counts: Record<string, number> = {};
  // The counts are the line's second part: its money (`+ up to US$0.40 unknown`) is not a count.
  const part = (line ?? '').split('; ')[1] ?? '';
  for (const m of part.matchAll(/(\d+) (completed|failed|nsfw|canceled|unknown|reused|in flight|not started)\b/g))
    counts[m[2] as string] = Number(m[1]);
  return counts;
}

const sum = (counts: Record<string, number>): number => COUNTED.reduce((n, k) => n + (counts[k] ?? 0), 0);

function sheets(dir: string, name: string, count: number): string {
  const path = join(dir, `${name}.yaml`);
  writeFileSync(
    path,
    `version: 1\nname: ${name}\ndefaults:\n  polling: { initial_ms: 100, min_ms: 20, max_ms: 400 }\nsteps:\n  s:\n    model: character-sheet\n    matrix: { seed: { range: { from: 1, to: ${count} } } }\n    input: { tier: cats, seed: "{{ seed }}" }\n`,
  );
  return path;
}

describe("a run's figures agree", () => {
  it("an interrupted run's summary adds up to its instances, the ones in flight included", { timeout: 60_000 }, async () => {
    // Slow enough that sheets are in flight when Ctrl-C comes.
    const emu = await startEmulator({ port: 0, timeScale: 0.3, log: () => {} });
    try {
      const dir = tempDir();
      const stop = new AbortController();
      const output: string[] = [];
      const io: CliIO = {
        out: (t) => output.push(t),
        write: async (t) => void output.push(t),
        err: (t) => output.push(t),
        env: { GENPIPE_BASE_URL: emu.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` },
        signal: stop.signal,
      };
      const running = main(['run', sheets(dir, 'adds-up', 30), '--out', join(dir, 'runs'), '--concurrency', '6', '--quiet'], io);
      const end = Date.now() + 20_000;
      // Bounded by the deadline.
      while (emu.requests.active < 6 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
      stop.abort();
      expect(await running).toBe(130);
      const counts = summaryCounts(output.join('\n'), 'adds-up');
      expect(counts['in flight']).toBeGreaterThan(0);
      expect(sum(counts)).toBe(30);
    } finally {
      await emu.close();
    }
  });

  it(
    'a resume stopped by its budget at once still counts what earlier starts finished beyond where its walk stopped',
    { timeout: 60_000 },
    async () => {
      // Half the sheets fail, so a failed one comes before completed ones in the walk.
      const emu = await startEmulator({ port: 0, timeScale: 0.02, seed: 7, failureRate: 0.5, log: () => {} });
      try {
        const dir = tempDir();
        const out = join(dir, 'runs');
        const output: string[] = [];
        const io: CliIO = {
          out: (t) => output.push(t),
          write: async (t) => void output.push(t),
          err: (t) => output.push(t),
          env: { GENPIPE_BASE_URL: emu.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` },
          signal: new AbortController().signal,
        };
        const path = sheets(dir, 'beyond', 12);
        expect(await main(['run', path, '--out', out, '--concurrency', '1', '--quiet'], io)).toBe(1);
        const runDir = findRunDir(out, 'beyond');
        const report = (): { counts: Record<string, number>; netUsd: number } =>
          (JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { total: { counts: Record<string, number>; netUsd: number } })
            .total;
        const first = report();
        const lines = (
          JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { instances: { instance: string; status: string }[] }
        ).instances;
        const seedOf = (id: string): number => Number(/seed=(\d+)/.exec(id)?.[1]);
        const firstFailed = Math.min(...lines.filter((l) => l.status === 'failed').map((l) => seedOf(l.instance)));
        // The case under test: completed sheets lie after the first failed one.
        expect(lines.some((l) => l.status === 'completed' && seedOf(l.instance) > firstFailed)).toBe(true);
        // Retrying the failed ones with no money left: the budget stops the walk at the first of them.
        output.length = 0;
        const code = await main(
          ['resume', runDir, '--retry', 'failed', '--budget', String(first.netUsd), '--concurrency', '1', '--quiet'],
          io,
        );
        expect(code, output.join('\n')).toBe(3);
        const counts = summaryCounts(output.join('\n'), 'beyond');
        expect(sum(counts)).toBe(12);
        expect(counts.completed).toBe(first.counts.completed);
        const after = report().counts;
        expect(counts.completed).toBe(after.completed);
        expect((counts.failed ?? 0) + (counts['not started'] ?? 0)).toBe((after.failed ?? 0) + (after.not_started ?? 0));
      } finally {
        await emu.close();
      }
    },
  );

  it(
    'an --emulator run killed mid-way and resumed on a fresh emulator: summary, report.json and `genpipe runs` tell the same counts and money',
    { timeout: 90_000 },
    async () => {
      const dir = tempDir();
      const out = join(dir, 'runs');
      const path = sheets(dir, 'forgotten', 40);
      // A power cut right after the 10th submit: sheets in flight at the embedded emulator die with it.
      const killed = await runCli(['run', path, '--emulator', '--out', out, '--yes', '--concurrency', '8'], {
        env: { GENPIPE_CRASH_AT: 'after_post:10' },
        timeoutMs: 60_000,
      });
      expect(killed.signal).toBe('SIGKILL');
      const runDir = findRunDir(out, 'forgotten');
      const resumed = await runCli(['resume', runDir, '--emulator', '--yes'], { timeoutMs: 60_000 });
      expect(resumed.code, resumed.stderr).toBe(1);
      const counts = summaryCounts(resumed.stdout + resumed.stderr, 'forgotten');
      expect(sum(counts)).toBe(40);
      expect(counts.unknown).toBeGreaterThan(0);
      const total = (
        JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as {
          total: { counts: Record<string, number>; netUsd: number; unknownUsd: number };
        }
      ).total;
      expect(total.counts).toMatchObject({
        completed: counts.completed,
        failed: counts.failed ?? 0,
        unknown: counts.unknown,
        in_flight: 0,
        not_started: 0,
      });
      expect(total.unknownUsd).toBeCloseTo((counts.unknown ?? 0) * 0.05, 6);
      expect(total.netUsd + total.unknownUsd).toBeCloseTo(2, 6);
      const listed = await runCli(['runs', '--out', out]);
      expect(listed.stdout).toContain(`${counts.completed}/40 completed`);
      expect(listed.stdout).toMatch(
        new RegExp(
          `US\\$${total.netUsd.toFixed(2).replace('.', '\\.')} \\+ up to US\\$${total.unknownUsd.toFixed(2).replace('.', '\\.')} unknown`,
        ),
      );
    },
  );
});
