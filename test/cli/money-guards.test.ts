// Money guards of validate, plan and run against a real emulator on 127.0.0.1: a budget with an
// unpriced step is refused by all three, and a big run with no budget is confirmed first (asked on
// a terminal, refused elsewhere), before any lock, run directory or request.
import { existsSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../src/emulator/index.js';
import { Queue } from 'bullmq';
import { commandOptions, parseRedisUrl } from '../../src/fleet/redis.js';
import { runsQueueName, type ScheduledRunData } from '../../src/fleet/schedules.js';
import { useTestRedis } from '../fleet/fleet-helpers.js';

type Captured = CliIO & { stdout: string[]; stderr: string[]; questions: string[] };

function capture(env: NodeJS.ProcessEnv, answer?: string): Captured {
  const stdout: string[] = [];
  const stderr: string[] = [];
  const questions: string[] = [];
  const io: Captured = {
    stdout,
    stderr,
    questions,
    out: (t) => stdout.push(t),
    write: async (t) => void stdout.push(t),
    err: (t) => stderr.push(t),
    env,
    signal: new AbortController().signal,
  };
  if (answer !== undefined) {
    io.prompt = async (question) => {
      questions.push(question);
      return answer;
    };
  }
  return io;
}

const dir = mkdtempSync(join(tmpdir(), 'genpipe-money-'));
let emulator: Emulator;
let env: NodeJS.ProcessEnv;
/** Generation requests the emulator held when the test started. */
let requestsBefore = 0;

beforeAll(async () => {
  emulator = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  env = { GENPIPE_BASE_URL: emulator.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` };
});
afterAll(async () => {
  await emulator.close();
});
beforeEach(() => {
  emulator.stats.reset();
  requestsBefore = emulator.requests.inspect({}).length;
});

/** Nothing reached the emulator since the test started: no generation request, and no HTTP request at all. */
function expectNothingSent(): void {
  expect(emulator.requests.inspect({}).length - requestsBefore).toBe(0);
  expect(emulator.stats.total).toBe(0);
}

let files = 0;
function manifest(text: string): string {
  const path = join(dir, `m${files++}.yaml`);
  writeFileSync(path, text);
  return path;
}

const sheets = (count: number, name: string, extra = ''): string =>
  manifest(
    `version: 1\nname: ${name}\n${extra}steps:\n  s:\n    model: character-sheet\n    matrix: { seed: { range: { from: 1, to: ${count} } } }\n    input: { tier: cats, seed: "{{ seed }}" }\n`,
  );

// Priced per instance by a prices table: US$0.01 each once priced; before the instances are
// checked, each counts at the table's dearest row (US$50).
const table = (count: number, name: string): string =>
  manifest(
    `version: 1\nname: ${name}\nprices:\n  character-sheet:\n    - { when: { tier: dogs }, usd: 50 }\n    - { usd: 0.01 }\n` +
      `steps:\n  s:\n    model: character-sheet\n    matrix: { seed: { range: { from: 1, to: ${count} } } }\n    input: { tier: cats, seed: "{{ seed }}" }\n`,
  );

// The ads step sits at line 9, col 3; the budget's value at line 3, col 25.
const unpricedText = `version: 1
name: unpriced
defaults: { budget_usd: 5 }
steps:
  sheets:
    model: character-sheet
    matrix: { seed: [1, 2] }
    input: { tier: cats, seed: "{{ seed }}" }
  ads:
    model: marketing-image
    input: { prompt: shoes }
`;

describe('a budget with a step of unknown price', () => {
  const refusal = (path: string, budget: string): string =>
    `genpipe: ${path}:9:3: steps.ads: a budget is set (${budget}) but step ads (marketing-image) has no price, so the budget cannot be kept; ` +
    `add its price in US$ per instance to the manifest's prices table (prices: { "marketing-image": 0.10 }) or set price_usd on the step`;

  it('validate refuses it with exit 2, one located sentence, nothing sent', async () => {
    const path = manifest(unpricedText);
    const io = capture(env);
    expect(await main(['validate', path], io)).toBe(2);
    expect(io.stderr).toEqual([refusal(path, `budget_usd 5 at ${path}:3:25`)]);
    expect(io.stdout).toEqual([]);
    expectNothingSent();
  });

  it('plan refuses it too (a run would), before printing a plan that cannot run', async () => {
    const path = manifest(unpricedText);
    for (const args of [[], ['--json']]) {
      const io = capture(env);
      expect(await main(['plan', path, ...args], io)).toBe(2);
      expect(io.stderr).toEqual([refusal(path, `budget_usd 5 at ${path}:3:25`)]);
      expect(io.stdout).toEqual([]);
    }
    expectNothingSent();
  });

  it('run refuses it before the lock and the run directory, budget_usd or --budget', async () => {
    const path = manifest(unpricedText);
    const out = join(dir, 'out-unpriced');
    const io = capture(env);
    expect(await main(['run', path, '--out', out], io)).toBe(2);
    expect(io.stderr).toEqual([refusal(path, `budget_usd 5 at ${path}:3:25`)]);

    const noBudget = manifest(unpricedText.replace('defaults: { budget_usd: 5 }\n', 'defaults: {}\n'));
    const flagged = capture(env);
    expect(await main(['run', noBudget, '--out', out, '--budget', '3', '--yes'], flagged)).toBe(2);
    expect(flagged.stderr).toEqual([refusal(noBudget, '--budget 3')]);
    // Not even the pipeline's folder (where the lock lives).
    expect(existsSync(out)).toBe(false);
    expectNothingSent();
  });

  it('run refuses it too when another step is priced per instance by a table, nothing created or sent', async () => {
    const path = manifest(
      unpricedText.replace(
        'steps:\n',
        'prices:\n  character-sheet:\n    - { when: { tier: dogs }, usd: 50 }\n    - { usd: 0.01 }\nsteps:\n',
      ),
    );
    const out = join(dir, 'out-unpriced-table');
    const io = capture(env);
    expect(await main(['run', path, '--out', out, '--confirm-over', '0'], io)).toBe(2);
    expect(io.stderr).toEqual([refusal(path, `budget_usd 5 at ${path}:3:25`).replace(':9:3:', ':13:3:')]);
    expect(existsSync(out)).toBe(false);
    expectNothingSent();
  });

  it('a priced step under a budget validates (the guard refuses only what it must)', async () => {
    const path = manifest(unpricedText.replace('steps:\n', 'prices: { marketing-image: 0.04 }\nsteps:\n'));
    const io = capture(env);
    expect(await main(['validate', path], io)).toBe(0);
    expect(io.stdout).toEqual([
      `${path}: valid; 2 step(s), 3 instance(s), estimated US$0.14`,
      "price of sheets: US$0.05 each, from the service's list price",
      "price of ads: US$0.04 each, from the manifest's prices table (a flat guess); token-priced, so provisional: the service charges an estimate at submit and reconciles it to actual token usage later, which genpipe cannot see",
    ]);
  });
});

describe('validate and an estimate over the budget', () => {
  it('warns with both figures, and still exits 0', async () => {
    const path = sheets(30, 'over', 'defaults: { budget_usd: 1 }\n');
    const io = capture(env);
    expect(await main(['validate', path], io)).toBe(0);
    expect(io.stdout).toEqual([
      `${path}: valid; 1 step(s), 30 instance(s), estimated US$1.50`,
      "price of s: US$0.05 each, from the service's list price",
      `warning: the estimate of US$1.50 is over the budget of US$1.00 (budget_usd 1 at ${path}:3:25); a run stops submitting before going over it`,
    ]);
    const within = capture(env);
    expect(await main(['validate', sheets(20, 'within', 'defaults: { budget_usd: 1 }\n')], within)).toBe(0);
    expect(within.stdout).toHaveLength(2);
  });
});

describe('genpipe run of a big plan with no budget', () => {
  it('is refused without a terminal: exit 2, one sentence naming --yes and the budget, nothing sent or created', async () => {
    // 2,001 sheets: US$100.05, a cent over the default --confirm-over of US$100.
    const path = sheets(2001, 'big');
    const out = join(dir, 'out-big');
    const io = capture(env);
    expect(await main(['run', path, '--out', out], io)).toBe(2);
    expect(io.stderr).toEqual([
      'genpipe: This run is estimated at US$100.05 (2,001 instances), over the --confirm-over limit of US$100.00, and there is no terminal to confirm it on: ' +
        'pass --yes to run it anyway, or set a budget (budget_usd in the manifest, or --budget USD) to cap what it spends.',
    ]);
    expect(existsSync(out)).toBe(false);
    expectNothingSent();
  });

  it('the default limit is US$100: a run estimated at exactly US$100.00 starts without a question', async () => {
    const priced = (price: number, name: string): string =>
      manifest(
        `version: 1\nname: ${name}\nsteps:\n  s:\n    model: character-sheet\n    price_usd: ${price}\n    matrix: { seed: [1, 2] }\n    input: { tier: cats, seed: "{{ seed }}" }\n`,
      );
    const at = capture(env, 'n');
    expect(await main(['run', priced(50, 'at-limit'), '--out', join(dir, 'out-at-limit')], at)).toBe(0);
    expect(at.questions).toEqual([]);
    const over = capture(env, 'n');
    expect(await main(['run', priced(50.005, 'over-limit'), '--out', join(dir, 'out-over-limit')], over)).toBe(2);
    expect(over.questions).toEqual(['This run is estimated at US$100.01 (2 instances). Continue? [y/N]']);
  });

  it('--confirm-over lowers the limit; --yes runs without asking', async () => {
    const path = sheets(3, 'yes');
    const out = join(dir, 'out-yes');
    const refused = capture(env);
    expect(await main(['run', path, '--out', out, '--confirm-over', '0.1'], refused)).toBe(2);
    expect(refused.stderr[0]).toMatch(
      /^genpipe: This run is estimated at US\$0\.15 \(3 instances\), over the --confirm-over limit of US\$0\.10,/,
    );
    expect(existsSync(out)).toBe(false);
    expectNothingSent();

    const io = capture(env, 'n');
    expect(await main(['run', path, '--out', out, '--confirm-over', '0.1', '--yes'], io)).toBe(0);
    expect(io.questions).toEqual([]);
    expect(emulator.requests.inspect({}).length - requestsBefore).toBe(3);
  });

  it('with a budget (budget_usd or --budget) there is no question: the budget is the guard', async () => {
    const inManifest = capture(env, 'n');
    expect(
      await main(
        ['run', sheets(3, 'budgeted', 'defaults: { budget_usd: 1 }\n'), '--out', join(dir, 'out-budgeted'), '--confirm-over', '0.1'],
        inManifest,
      ),
    ).toBe(0);
    expect(inManifest.questions).toEqual([]);
    const flag = capture(env, 'n');
    expect(
      await main(['run', sheets(3, 'flagged'), '--out', join(dir, 'out-flagged'), '--confirm-over', '0.1', '--budget', '1'], flag),
    ).toBe(0);
    expect(flag.questions).toEqual([]);
  });

  it('on a terminal: asks once; y runs it', async () => {
    const io = capture(env, 'y');
    const out = join(dir, 'out-tty-y');
    expect(await main(['run', sheets(3, 'tty-y'), '--out', out, '--confirm-over', '0.1'], io)).toBe(0);
    expect(io.questions).toEqual(['This run is estimated at US$0.15 (3 instances). Continue? [y/N]']);
    expect(emulator.requests.inspect({}).length - requestsBefore).toBe(3);
    expect(readdirSync(join(out, 'tty-y')).filter((n) => !n.startsWith('.'))).toHaveLength(1);
  });

  it('on a terminal: anything but y or yes refuses, before the lock, the run directory and any request', async () => {
    for (const answer of ['n', '', 'no', 'yess', 'sure']) {
      emulator.stats.reset();
      const before = emulator.requests.inspect({}).length;
      const io = capture(env, answer);
      const out = join(dir, `out-tty-${answer || 'empty'}`);
      expect(await main(['run', sheets(3, 'tty-n'), '--out', out, '--confirm-over', '0.1'], io), answer).toBe(2);
      expect(io.questions).toHaveLength(1);
      expect(io.stderr).toEqual([
        'genpipe: Not confirmed, so nothing was sent; --yes skips the question, and a budget (budget_usd or --budget) replaces it.',
      ]);
      expect(existsSync(out)).toBe(false);
      expect(emulator.requests.inspect({}).length).toBe(before);
      expect(emulator.stats.total).toBe(0);
    }
    for (const [i, answer] of ['yes', ' Y '].entries()) {
      const io = capture(env, answer);
      expect(
        await main(['run', sheets(3, `tty-yes-${i}`), '--out', join(dir, `out-tty-yes-${i}`), '--confirm-over', '0.1'], io),
        answer,
      ).toBe(0);
      expect(io.questions).toHaveLength(1);
    }
  });

  it('a step priced per instance by a formula is confirmed at its priced estimate, before any lock, run directory or request', async () => {
    // Before its instances are checked a formula has no figure; the question comes once they are.
    const formula = (count: number, name: string): string =>
      manifest(
        `version: 1\nname: ${name}\nsteps:\n  s:\n    model: character-sheet\n    price_usd: "{{ 0.05 + input.seed * 0.001 }}"\n` +
          `    matrix: { seed: { range: { from: 1, to: ${count} } } }\n    input: { tier: cats, seed: "{{ seed }}" }\n`,
      );
    // 3,000 instances at US$0.051 to US$3.05: US$4,651.50 in all.
    const big = formula(3000, 'formula-big');
    const out = join(dir, 'out-formula-big');
    const refused = capture(env);
    expect(await main(['run', big, '--out', out], refused)).toBe(2);
    expect(refused.stderr.at(-1)).toBe(
      'genpipe: This run is estimated at US$4,651.50 (3,000 instances), over the --confirm-over limit of US$100.00, and there is no terminal to confirm it on: ' +
        'pass --yes to run it anyway, or set a budget (budget_usd in the manifest, or --budget USD) to cap what it spends.',
    );
    expect(existsSync(out)).toBe(false);
    expectNothingSent();

    const no = capture(env, 'n');
    expect(await main(['run', big, '--out', out], no)).toBe(2);
    expect(no.questions).toEqual(['This run is estimated at US$4,651.50 (3,000 instances). Continue? [y/N]']);
    expect(existsSync(out)).toBe(false);
    expectNothingSent();

    // Asked once, and y runs it: 3 instances at US$0.051, US$0.052 and US$0.053.
    const yes = capture(env, 'y');
    const small = join(dir, 'out-formula-small');
    expect(await main(['run', formula(3, 'formula-small'), '--out', small, '--confirm-over', '0.1'], yes)).toBe(0);
    expect(yes.questions).toEqual(['This run is estimated at US$0.16 (3 instances). Continue? [y/N]']);
    expect(emulator.requests.inspect({}).length - requestsBefore).toBe(3);

    // Under the limit once priced: no question.
    const under = capture(env, 'n');
    expect(await main(['run', formula(3, 'formula-under'), '--out', join(dir, 'out-formula-under'), '--confirm-over', '0.2'], under)).toBe(
      0,
    );
    expect(under.questions).toEqual([]);
  });

  it('a step priced by a table is asked about once, at its priced estimate, never at its dearest rows', async () => {
    // 4 instances: US$200 at the dearest row (the counts), US$0.04 once priced: under the default limit, no question.
    const cheap = capture(env, 'n');
    expect(await main(['run', table(4, 'table-cheap'), '--out', join(dir, 'out-table-cheap')], cheap)).toBe(0);
    expect(cheap.questions).toEqual([]);
    expect(emulator.requests.inspect({}).length - requestsBefore).toBe(4);

    // Over a limit of US$0.03 once priced: refused at US$0.04, before any lock, run directory or request.
    emulator.stats.reset();
    requestsBefore = emulator.requests.inspect({}).length;
    const out = join(dir, 'out-table-over');
    const refused = capture(env);
    expect(await main(['run', table(4, 'table-over'), '--out', out, '--confirm-over', '0.03'], refused)).toBe(2);
    expect(refused.stderr).toEqual([
      'genpipe: This run is estimated at US$0.04 (4 instances), over the --confirm-over limit of US$0.03, and there is no terminal to confirm it on: ' +
        'pass --yes to run it anyway, or set a budget (budget_usd in the manifest, or --budget USD) to cap what it spends.',
    ]);
    const no = capture(env, 'n');
    expect(await main(['run', table(4, 'table-over'), '--out', out, '--confirm-over', '0.03'], no)).toBe(2);
    expect(no.questions).toEqual(['This run is estimated at US$0.04 (4 instances). Continue? [y/N]']);
    expect(existsSync(out)).toBe(false);
    expectNothingSent();

    // Asked once, and y runs it.
    const yes = capture(env, 'y');
    expect(await main(['run', table(4, 'table-over'), '--out', out, '--confirm-over', '0.03'], yes)).toBe(0);
    expect(yes.questions).toEqual(['This run is estimated at US$0.04 (4 instances). Continue? [y/N]']);
    expect(emulator.requests.inspect({}).length - requestsBefore).toBe(4);
  });

  it('a resume never asks again', async () => {
    const path = sheets(3, 'resumed');
    const out = join(dir, 'out-resumed');
    expect(await main(['run', path, '--out', out, '--confirm-over', '0.1', '--yes'], capture(env))).toBe(0);
    const runDir = join(out, 'resumed', readdirSync(join(out, 'resumed')).find((n) => !n.startsWith('.')) as string);
    const io = capture(env, 'n');
    expect(await main(['resume', runDir, '--confirm-over', '0.1'], io)).toBe(0);
    expect(io.questions).toEqual([]);
    const flag = capture(env);
    expect(await main(['run', path, '--resume', runDir, '--confirm-over', '0.1'], flag)).toBe(0);
  });

  it('the embedded emulator bills nothing, so --emulator never asks', async () => {
    const io = capture({}, 'n');
    expect(await main(['run', sheets(3, 'embedded'), '--emulator', '--out', join(dir, 'out-embedded'), '--confirm-over', '0.1'], io)).toBe(
      0,
    );
    expect(io.questions).toEqual([]);
  });

  it('refuses a --confirm-over that is not a number of at least 0', async () => {
    const out = join(dir, 'out-bad-flag');
    const io = capture(env);
    expect(await main(['run', sheets(3, 'bad-flag'), '--out', out, '--confirm-over', 'lots'], io)).toBe(2);
    expect(io.stderr).toEqual(['genpipe: --confirm-over takes a number of at least 0, not "lots".']);
    expect(existsSync(out)).toBe(false);
    expectNothingSent();
  });
});

describe('genpipe schedule add checks the spend as genpipe run does', () => {
  const redis = useTestRedis();
  // Priced per instance by a price_usd formula: no figure until the instances are checked.
  const formula = (count: number, name: string): string =>
    manifest(
      `version: 1\nname: ${name}\nsteps:\n  s:\n    model: character-sheet\n    price_usd: "{{ 0.05 + input.seed * 0.001 }}"\n` +
        `    matrix: { seed: { range: { from: 1, to: ${count} } } }\n    input: { tier: cats, seed: "{{ seed }}" }\n`,
    );
  const add = async (path: string, queue: string, ...flags: string[]): Promise<{ code: number; io: Captured }> => {
    const io = capture(env);
    const code = await main(
      [
        'schedule',
        'add',
        path,
        '--cron',
        '30 2 * * *',
        '--out',
        join(dir, `out-${queue}`),
        '--redis',
        redis.url,
        '--queue',
        queue,
        ...flags,
      ],
      io,
    );
    return { code, io };
  };
  /** What the schedule stored, as a tick reads it. */
  const stored = async (queue: string, name: string): Promise<ScheduledRunData | undefined> => {
    const q = new Queue<ScheduledRunData>(runsQueueName(queue), { connection: commandOptions(parseRedisUrl(redis.url)) });
    try {
      return (await q.getJobScheduler(name))?.template?.data;
    } finally {
      await q.close();
    }
  };
  const refusedRun = (what: string, limit: string): string =>
    `genpipe: ${what}, over the --confirm-over limit of ${limit}, and there is no terminal to confirm it on: ` +
    'pass --yes to run it anyway, or set a budget (budget_usd in the manifest, or --budget USD) to cap what it spends.';
  const refusedAdd = (what: string, limit: string): string =>
    `genpipe: ${what} each time it runs, over the --confirm-over limit of ${limit}, with no budget: ` +
    'add --budget USD to cap each run, or --yes to approve this estimate (a tick whose estimate grows past it spends nothing).';

  it('a formula over the limit is refused at its priced estimate, as run refuses it; under the limit it is added; nothing sent', async () => {
    // 3,000 instances at US$0.051 to US$3.05: US$4,651.50 in all.
    const big = formula(3000, 'sched-formula-big');
    const run = capture(env);
    expect(await main(['run', big, '--out', join(dir, 'out-sched-formula-run')], run)).toBe(2);
    expect(run.stderr).toEqual([refusedRun('This run is estimated at US$4,651.50 (3,000 instances)', 'US$100.00')]);
    const refused = await add(big, 'sched-formula');
    expect(refused.code).toBe(2);
    expect(refused.io.stdout).toEqual(['each run is estimated at US$4,651.50 (3,000 instances), with no budget']);
    expect(refused.io.stderr).toEqual([refusedAdd('This run is estimated at US$4,651.50 (3,000 instances)', 'US$100.00')]);
    expect(await stored('sched-formula', 'sched-formula-big')).toBeUndefined();

    // 3 instances at US$0.051, US$0.052 and US$0.053: over a limit of US$0.10, under one of US$0.20.
    const small = formula(3, 'sched-formula-small');
    const smallRun = capture(env);
    expect(await main(['run', small, '--out', join(dir, 'out-sched-formula-run'), '--confirm-over', '0.1'], smallRun)).toBe(2);
    expect(smallRun.stderr).toEqual([refusedRun('This run is estimated at US$0.16 (3 instances)', 'US$0.10')]);
    const over = await add(small, 'sched-formula', '--confirm-over', '0.1');
    expect(over.code).toBe(2);
    expect(over.io.stderr).toEqual([refusedAdd('This run is estimated at US$0.16 (3 instances)', 'US$0.10')]);

    const under = await add(small, 'sched-formula', '--confirm-over', '0.2');
    expect(under.code, under.io.stderr.join('\n')).toBe(0);
    expect(under.io.stdout[0]).toBe('each run is estimated at US$0.16 (3 instances), with no budget');
    const added = await stored('sched-formula', 'sched-formula-small');
    expect(added?.confirmOverUsd).toBe(0.2);
    expect(added?.approvedUsd).toBeUndefined();

    // Approved: the tick may spend what the run's guard will find, US$0.156.
    const approved = await add(small, 'sched-formula', '--confirm-over', '0.1', '--yes');
    expect(approved.code, approved.io.stderr.join('\n')).toBe(0);
    expect((await stored('sched-formula', 'sched-formula-small'))?.approvedUsd).toBe(0.156);
    expectNothingSent();
  });

  it('a table is checked at its priced estimate, not its dearest rows: added under the limit, refused over it as run refuses it', async () => {
    // 4 instances: US$200 at the dearest row (the counts), US$0.04 once priced. Under the default limit.
    const cheap = await add(table(4, 'sched-table-cheap'), 'sched-table');
    expect(cheap.code, cheap.io.stderr.join('\n')).toBe(0);
    expect(cheap.io.stdout[0]).toBe('each run is estimated at US$0.04 (4 instances), with no budget');
    expect(cheap.io.stderr).toEqual([]);
    const added = await stored('sched-table', 'sched-table-cheap');
    expect(added?.manifest).toMatch(/\.yaml$/);
    expect(added?.approvedUsd).toBeUndefined();

    // Over a limit of US$0.03: refused at US$0.04, the estimate printed, as run refuses it.
    const path = table(4, 'sched-table');
    const run = capture(env);
    expect(await main(['run', path, '--out', join(dir, 'out-sched-table-run'), '--confirm-over', '0.03'], run)).toBe(2);
    expect(run.stderr).toEqual([refusedRun('This run is estimated at US$0.04 (4 instances)', 'US$0.03')]);
    const refused = await add(path, 'sched-table', '--confirm-over', '0.03');
    expect(refused.code).toBe(2);
    expect(refused.io.stdout).toEqual(['each run is estimated at US$0.04 (4 instances), with no budget']);
    expect(refused.io.stderr).toEqual([refusedAdd('This run is estimated at US$0.04 (4 instances)', 'US$0.03')]);
    expect(await stored('sched-table', 'sched-table')).toBeUndefined();
    // A tick's guard asks only at the priced plan: --yes approves the priced figure.
    expect((await add(path, 'sched-table', '--confirm-over', '0.03', '--yes')).code).toBe(0);
    expect((await stored('sched-table', 'sched-table'))?.approvedUsd).toBe(0.04);
    expectNothingSent();
  });

  it('a budget: the estimate printed is the priced one, and a step of unknown price is refused as run refuses it', async () => {
    const budgeted = await add(formula(3000, 'sched-budgeted'), 'sched-budget', '--budget', '5');
    expect(budgeted.code, budgeted.io.stderr.join('\n')).toBe(0);
    expect(budgeted.io.stdout[0]).toBe('each run is estimated at US$4,651.50 (3,000 instances), with a budget of US$5.00');

    const path = manifest(unpricedText);
    const run = capture(env);
    expect(await main(['run', path, '--out', join(dir, 'out-sched-unpriced')], run)).toBe(2);
    const refused = await add(path, 'sched-budget');
    expect(refused.code).toBe(2);
    expect(refused.io.stderr).toEqual(run.stderr);
    expect(await stored('sched-budget', 'unpriced')).toBeUndefined();
    expectNothingSent();
  });
});
