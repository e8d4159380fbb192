// Money counted per attempt: after runs, resumes and retries, the report is the
// emulator's ledger to the cent (invariant A), and an attempt whose end is unknown is shown apart,
// with the ledger inside [net, net + unknown] (invariant B). Each defect of the issue that lives here
// is pinned by name. The CLI runs in-process against a real emulator on 127.0.0.1.
import { mkdtempSync, readdirSync, readFileSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CliIO } from '../../../src/cli/io.js';
import { main } from '../../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../../src/emulator/index.js';
import { ReviewStore } from '../../../src/review/review-store.js';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

let emu: Emulator;
let dir: string;

beforeEach(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  dir = mkdtempSync(join(tmpdir(), 'genpipe-money-'));
});
afterEach(async () => {
  await emu.close();
});

async function genpipe(...argv: string[]): Promise<Run> {
  const stdout: string[] = [];
  const stderr: string[] = [];
  const io: CliIO = {
    out: (t) => stdout.push(t),
    write: async (t) => void stdout.push(t),
    err: (t) => stderr.push(t),
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` },
    signal: new AbortController().signal,
  };
  const code = await main(argv, io);
  return { code, stdout: stdout.join('\n'), stderr: stderr.join('\n') };
}

/** US$ the account spent at the emulator (charges and reserves less refunds). */
const ledgerUsd = (): number => Math.round(emu.ledger.netMicros((e) => e.key_id === DEFAULT_KEY_ID)) / 1e6;
const requests = (): number => emu.requests.inspect({}).length;

function manifest(name: string, body: string): string {
  const path = join(dir, `${name}.yaml`);
  writeFileSync(path, `version: 1\nname: ${name}\n${body}`);
  return path;
}

const sheets = (name: string, count: number, extra = ''): string =>
  manifest(
    name,
    `${extra}steps:\n  s:\n    model: character-sheet\n    matrix: { seed: { range: { from: 1, to: ${count} } } }\n    input: { tier: cats, seed: "{{ seed }}" }\n`,
  );

function runDirOf(out: string, pipeline: string): string {
  const runs = readdirSync(join(out, pipeline)).filter((n) => !n.startsWith('.'));
  expect(runs).toHaveLength(1);
  return join(out, pipeline, runs[0] as string);
}

interface Total {
  netUsd: number;
  unknownUsd: number;
  unpricedInstances: number;
  counts: Record<string, number>;
}
const totalOf = (runDir: string): Total => (JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { total: Total }).total;

describe('money per attempt: the report is the ledger on every path', () => {
  it('--retry rejected keeps the rejected attempts in the report, and a repeat with no new decision sends nothing', async () => {
    const out = join(dir, 'runs');
    expect((await genpipe('run', sheets('rejects', 3), '--out', out, '--quiet')).code).toBe(0);
    const runDir = runDirOf(out, 'rejects');
    const review = new ReviewStore(runDir);
    await review.apply({ instance: 's[seed=1]', decision: 'rejected' });
    await review.apply({ instance: 's[seed=2]', decision: 'rejected' });
    const remade = await genpipe('resume', runDir, '--retry', 'rejected', '--quiet');
    expect(remade.code, remade.stderr).toBe(0);
    expect(requests()).toBe(5);
    expect(ledgerUsd()).toBe(0.25);
    // The two rejected results were paid for, and so were their remakes.
    expect(totalOf(runDir)).toMatchObject({ netUsd: 0.25, unknownUsd: 0 });
    // The decisions judged the outputs now set aside: a repeat remakes nothing and pays nothing.
    const repeat = await genpipe('resume', runDir, '--retry', 'rejected', '--quiet');
    expect(repeat.code, repeat.stderr).toBe(0);
    expect(requests()).toBe(5);
    expect(totalOf(runDir).netUsd).toBe(ledgerUsd());
  });

  it("a budget given to --retry rejected covers the run's whole life", async () => {
    const out = join(dir, 'runs');
    expect((await genpipe('run', sheets('rejects-budget', 3), '--out', out, '--quiet')).code).toBe(0);
    const runDir = runDirOf(out, 'rejects-budget');
    const review = new ReviewStore(runDir);
    for (const seed of [1, 2, 3]) await review.apply({ instance: `s[seed=${seed}]`, decision: 'rejected' });
    // US$0.15 paid already: US$0.22 leaves room for one remake, not three.
    const remade = await genpipe('resume', runDir, '--retry', 'rejected', '--budget', '0.22', '--quiet');
    expect(remade.code, remade.stderr).toBe(3);
    expect(ledgerUsd()).toBe(0.2);
    expect(ledgerUsd()).toBeLessThanOrEqual(0.22);
    expect(totalOf(runDir).netUsd).toBe(ledgerUsd());
  });

  it('--retry unknown keeps the unknown attempt apart, and the ledger lies within [net, net + unknown]', async () => {
    const out = join(dir, 'runs');
    const path = manifest(
      'posters',
      'prices: { soul-standard: 0.03 }\nsteps:\n  p:\n    model: soul-standard\n    matrix: { n: [1, 2, 3] }\n    input: { prompt: "Poster {{ n }}", aspect_ratio: "1:1", resolution: 1080p }\n',
    );
    // Processed and charged, then the connection drops: a keyless submit whose fate genpipe cannot know.
    emu.forceFaults('submit', 'reset_after', 'reset_after', 'reset_after');
    const first = await genpipe('run', path, '--out', out, '--quiet');
    expect(first.code).toBe(1);
    const runDir = runDirOf(out, 'posters');
    expect(ledgerUsd()).toBe(0.09);
    expect(totalOf(runDir)).toMatchObject({ netUsd: 0, unknownUsd: 0.09 });
    expect(readFileSync(join(runDir, 'report.md'), 'utf8')).toContain('Unknown: up to US$0.09 more');
    const retried = await genpipe('resume', runDir, '--retry', 'unknown', '--quiet');
    expect(retried.code, retried.stderr).toBe(0);
    expect(ledgerUsd()).toBe(0.18);
    const total = totalOf(runDir);
    expect(total).toMatchObject({ netUsd: 0.09, unknownUsd: 0.09 });
    expect(ledgerUsd()).toBeGreaterThanOrEqual(total.netUsd);
    expect(ledgerUsd()).toBeLessThanOrEqual(total.netUsd + total.unknownUsd + 1e-9);
  });

  it('a resume keeps the budget the run was started with', async () => {
    const out = join(dir, 'runs');
    const path = sheets('budgeted', 10, 'defaults: { budget_usd: 5 }\n');
    const first = await genpipe('run', path, '--out', out, '--budget', '0.2', '--quiet');
    expect(first.code).toBe(3);
    expect(ledgerUsd()).toBe(0.2);
    const runDir = runDirOf(out, 'budgeted');
    // A plain resume: the run's budget, not the manifest's, and over the run's whole life.
    const resumed = await genpipe('resume', runDir, '--quiet');
    expect(resumed.code).toBe(3);
    expect(ledgerUsd()).toBe(0.2);
    // A flag that changes it is said, and then holds.
    const raised = await genpipe('resume', runDir, '--budget', '0.3');
    expect(raised.code).toBe(3);
    expect(raised.stderr).toContain('budget: US$0.20 → US$0.30');
    expect(ledgerUsd()).toBe(0.3);
    expect(totalOf(runDir).netUsd).toBe(0.3);
  });

  it('a --reuse run interrupted early and continued with a plain resume still reuses, paying only for the new instances', async () => {
    const out = join(dir, 'runs');
    expect((await genpipe('run', sheets('reused', 4), '--out', out, '--quiet')).code).toBe(0);
    expect(requests()).toBe(4);
    // The same pipeline grown to 8 sheets, run with --reuse and interrupted as soon as its directory exists.
    const grown = sheets('reused', 8);
    const controller = new AbortController();
    let runDir = '';
    const io: CliIO = {
      out: () => {},
      write: async () => {},
      err: () => {},
      env: { GENPIPE_BASE_URL: emu.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` },
      signal: controller.signal,
      onRunDir: async (d) => {
        runDir = d;
        controller.abort(new Error('interrupted'));
      },
    };
    expect(await main(['run', grown, '--out', out, '--reuse', '--quiet'], io)).toBe(130);
    expect(requests()).toBe(4);
    // What the README prescribes after a crash: a plain resume. It reuses the 4 and pays for 4.
    const resumed = await genpipe('resume', runDir, '--quiet');
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(requests()).toBe(8);
    expect(ledgerUsd()).toBe(0.4);
    expect(totalOf(runDir)).toMatchObject({ netUsd: 0.2, counts: expect.objectContaining({ completed: 4, reused: 4 }) });
  });

  it('an unpriced step reads "unpriced", never US$0.00, in the report and `genpipe runs`', async () => {
    const out = join(dir, 'runs');
    const path = manifest(
      'unpriced',
      'steps:\n  p:\n    model: soul-standard\n    input: { prompt: "A poster", aspect_ratio: "1:1", resolution: 1080p }\n',
    );
    expect((await genpipe('run', path, '--out', out, '--quiet')).code).toBe(0);
    expect(ledgerUsd()).toBe(0.03);
    const runDir = runDirOf(out, 'unpriced');
    expect(totalOf(runDir).unpricedInstances).toBe(1);
    const md = readFileSync(join(runDir, 'report.md'), 'utf8');
    expect(md).toMatch(/\| p \| completed \| [^|]+ \| unpriced \|/);
    const runs = await genpipe('runs', '--out', out);
    expect(runs.stdout).toContain('unpriced');
    expect(runs.stdout).not.toContain('US$0.00');
  });

  it('a journal emptied to 0 bytes is refused by resume (exit 2), and nothing is sent', async () => {
    const out = join(dir, 'runs');
    expect((await genpipe('run', sheets('emptied', 3), '--out', out, '--quiet')).code).toBe(0);
    const runDir = runDirOf(out, 'emptied');
    truncateSync(join(runDir, 'journal.jsonl'), 0);
    const resumed = await genpipe('resume', runDir);
    expect(resumed.code).toBe(2);
    expect(resumed.stderr).toContain('holds no run_started record');
    expect(requests()).toBe(3);
    expect(ledgerUsd()).toBe(0.15);
  });
});
