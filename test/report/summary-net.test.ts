// The summary line's money is the report's net, with unknown and unpriced apart, whatever way the
// run ends: completed, stopped at its budget, failed, or interrupted by Ctrl-C. Read against the
// report.json the run wrote, through the one formatter.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../src/emulator/index.js';
import { formatSpend } from '../../src/util/format-usd.js';
import { findRunDir, tempDir } from '../run/runner-helpers.js';

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0.3, log: () => {} });
});
afterAll(async () => {
  await emu.close();
});

function manifest(dir: string, name: string, count: number, extra = '', brief = 'a mascot'): string {
  const path = join(dir, `${name}.yaml`);
  writeFileSync(
    path,
    `version: 1\nname: ${name}\ndefaults:\n  polling: { initial_ms: 100, min_ms: 20, max_ms: 400 }\n${extra}\nsteps:\n  s:\n    model: character-sheet\n    matrix: { seed: { range: { from: 1, to: ${count} } } }\n    input: { tier: cats, seed: "{{ seed }}", brief: ${JSON.stringify(brief)} }\n`,
  );
  return path;
}

async function run(args: string[], signal: AbortSignal = new AbortController().signal): Promise<{ code: number; out: string }> {
  const output: string[] = [];
  const io: CliIO = {
    out: (t) => output.push(t),
    write: async (t) => void output.push(t),
    err: (t) => output.push(t),
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` },
    signal,
  };
  const code = await main(args, io);
  return { code, out: output.join('\n') };
}

/** The summary line's money, and what the report says it should be. */
function moneyOf(out: string, pipeline: string, runs: string): { said: string; report: string } {
  const line = out.split('\n').find((l) => l.startsWith(`${pipeline} `) && /; \d+ completed/.test(l)) ?? '';
  const said = /; net (.*?); [\d.]+ s; /.exec(line)?.[1] ?? `(no net in: ${line})`;
  const report = JSON.parse(readFileSync(join(findRunDir(runs, pipeline), 'report.json'), 'utf8')) as {
    total: { netUsd: number; unknownUsd: number; unpricedInstances: number };
  };
  return { said, report: formatSpend(report.total) };
}

describe("the summary line's money", () => {
  it('is the report net when the run completes, fails, or stops at its budget', { timeout: 60_000 }, async () => {
    const dir = tempDir();
    const runs = join(dir, 'runs');
    const done = await run(['run', manifest(dir, 'done', 4), '--out', runs, '--quiet']);
    expect(done.code).toBe(0);
    expect(moneyOf(done.out, 'done', runs)).toEqual({ said: 'US$0.20', report: 'US$0.20' });

    // Failed requests are refunded (spec §8): the net is the completed ones'.
    const failed = await run(['run', manifest(dir, 'failed', 3, '', '[emulator:fail] broken'), '--out', runs, '--quiet']);
    expect(failed.code).toBe(1);
    expect(failed.out).toMatch(/^failed \S+: failed; /m);
    expect(moneyOf(failed.out, 'failed', runs)).toEqual({ said: 'US$0.00', report: 'US$0.00' });

    const budget = await run(['run', manifest(dir, 'budget', 6, '  concurrency: 1\n  budget_usd: 0.1'), '--out', runs, '--quiet']);
    expect(budget.code).toBe(3);
    const m = moneyOf(budget.out, 'budget', runs);
    expect(m.said).toBe(m.report);
    expect(m.said).toBe('US$0.10');
  });

  it('is the report net, unknown and in flight apart, when Ctrl-C interrupts the run', { timeout: 60_000 }, async () => {
    const dir = tempDir();
    const runs = join(dir, 'runs');
    const stop = new AbortController();
    const running = run(['run', manifest(dir, 'ctrl-c', 20), '--out', runs, '--concurrency', '4', '--quiet'], stop.signal);
    const end = Date.now() + 20_000;
    // Bounded by the deadline.
    while (emu.requests.active < 4 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    stop.abort();
    const result = await running;
    expect(result.code).toBe(130);
    expect(result.out).toMatch(/^ctrl-c \S+: interrupted; /m);
    const m = moneyOf(result.out, 'ctrl-c', runs);
    expect(m.said).toBe(m.report);
  });
});
