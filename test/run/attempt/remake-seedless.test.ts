// `--retry rejected` remakes a rejected result of a model without a seed (marketing images): a new
// attempt, whose intent is journaled before its POST, counted in the money. The report equals the
// emulator's ledger, and a repeat with no new decision sends nothing. The CLI runs in-process
// against a real emulator on 127.0.0.1.
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CliIO } from '../../../src/cli/io.js';
import { main } from '../../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../../src/emulator/index.js';
import { ReviewStore } from '../../../src/review/review-store.js';

let emu: Emulator;
let dir: string;

beforeEach(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  dir = mkdtempSync(join(tmpdir(), 'genpipe-remake-'));
});
afterEach(async () => {
  await emu.close();
});

async function genpipe(...argv: string[]): Promise<{ code: number; stderr: string; stdout: string }> {
  const stderr: string[] = [];
  const stdout: string[] = [];
  const io: CliIO = {
    out: (t) => stdout.push(t),
    write: async () => {},
    err: (t) => stderr.push(t),
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` },
    signal: new AbortController().signal,
  };
  return { code: await main(argv, io), stderr: stderr.join('\n'), stdout: stdout.join('\n') };
}

const ledgerUsd = (): number => Math.round(emu.ledger.netMicros((e) => e.key_id === DEFAULT_KEY_ID)) / 1e6;
const requests = (): number => emu.requests.inspect({}).length;
/**
 * The ledger's net without the service's later reconciliation of token-priced models to actual
 * usage (which genpipe cannot see): what was charged at submit, less refunds of failures.
 */
const chargedUsd = (): number =>
  Math.round(emu.ledger.netMicros((e) => e.key_id === DEFAULT_KEY_ID && !(e.kind === 'refund' && /reconciled/.test(e.reason)))) / 1e6;
/** Every POST that reached the emulator, agent messages included. */
const posts = (): number => [...emu.stats.byRoute].filter(([name]) => name.startsWith('POST')).reduce((n, [, c]) => n + c, 0);

interface ReportJson {
  total: { netUsd: number; unknownUsd: number; counts: Record<string, number> };
}
const reportOf = (runDir: string): ReportJson['total'] =>
  (JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as ReportJson).total;
const runDirOf = (out: string, name: string): string =>
  join(out, name, readdirSync(join(out, name)).find((n) => !n.startsWith('.')) as string);

describe('--retry rejected on a model without a seed', () => {
  it('remakes each rejected image as a new attempt, counted in the money; a repeat sends nothing', { timeout: 60_000 }, async () => {
    const path = join(dir, 'heroes.yaml');
    writeFileSync(
      path,
      'version: 1\nname: heroes\nprices: { marketing-image: 0.009156 }\nsteps:\n  hero:\n    model: marketing-image\n    matrix: { n: [1, 2, 3] }\n' +
        '    input: { prompt: "Hero banner {{ n }}", resolution: 1k, quality: low }\n',
    );
    const out = join(dir, 'runs');
    expect((await genpipe('run', path, '--out', out, '--quiet')).code).toBe(0);
    const runDir = join(out, 'heroes', readdirSync(join(out, 'heroes')).find((n) => !n.startsWith('.')) as string);
    expect(requests()).toBe(3);
    const review = new ReviewStore(runDir);
    await review.apply({ instance: 'hero[n=1]', decision: 'rejected' });
    await review.apply({ instance: 'hero[n=3]', decision: 'rejected' });

    const remade = await genpipe('resume', runDir, '--retry', 'rejected', '--quiet');
    expect(remade.code, remade.stderr).toBe(0);
    expect(requests()).toBe(5);
    // Each remake's intent was journaled, as a new attempt, before its request.
    const journal = readFileSync(join(runDir, 'journal.jsonl'), 'utf8');
    const records = journal
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map((line) => JSON.parse(line.slice(line.indexOf('{'))) as { type: string; instance?: string; previous?: string });
    const retries = records.filter((r) => r.type === 'retry' && r.previous === 'rejected').map((r) => r.instance);
    expect(retries.sort()).toEqual(['hero[n=1]', 'hero[n=3]']);
    for (const id of ['hero[n=1]', 'hero[n=3]']) {
      const at = records.findIndex((r) => r.type === 'retry' && r.instance === id);
      expect(records.slice(at).some((r) => r.type === 'intent' && r.instance === id)).toBe(true);
    }
    // The rejected files are kept apart; the report counts both attempts, and equals the ledger.
    expect(readdirSync(join(runDir, 'outputs', 'hero', 'rejected', '0')).length).toBe(2);
    const total = (JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { total: { netUsd: number; unknownUsd: number } })
      .total;
    expect(total.unknownUsd).toBe(0);
    expect(total.netUsd).toBe(ledgerUsd());

    const repeat = await genpipe('resume', runDir, '--retry', 'rejected', '--quiet');
    expect(repeat.code, repeat.stderr).toBe(0);
    expect(requests()).toBe(5);
  });
});

describe('--retry rejected where a remake cannot be made', () => {
  it(
    'a seedless marketing image is remade with one new POST; the summary, runs and the report agree, and report = ledger',
    { timeout: 60_000 },
    async () => {
      const path = join(dir, 'hero.yaml');
      writeFileSync(
        path,
        // The emulator's charge at submit for this prompt at 1k, low quality.
        'version: 1\nname: hero\nprices: { marketing-image: 0.01026 }\nsteps:\n  hero:\n    model: marketing-image\n    matrix: { n: [1, 2] }\n' +
          '    input: { prompt: "Hero banner {{ n }}", resolution: 1k, quality: low }\n',
      );
      const out = join(dir, 'runs');
      expect((await genpipe('run', path, '--out', out, '--quiet')).code).toBe(0);
      const runDir = runDirOf(out, 'hero');
      await new ReviewStore(runDir).apply({ instance: 'hero[n=2]', decision: 'rejected' });
      const before = posts();
      const remade = await genpipe('resume', runDir, '--retry', 'rejected', '--quiet');
      expect(remade.code, remade.stderr).toBe(0);
      expect(posts() - before).toBe(1);
      expect(remade.stderr).not.toMatch(/rejected in review/);
      expect(remade.stdout).toMatch(/hero \S+: completed; 2 completed, 0 failed/);
      const total = reportOf(runDir);
      expect(total.counts.completed).toBe(2);
      expect(total.unknownUsd).toBe(0);
      // Three attempts charged: the two first ones and the remake.
      expect(total.netUsd).toBe(0.03078);
      expect(total.netUsd).toBe(chargedUsd());
      const runs = await genpipe('runs', '--out', out);
      expect(runs.stdout).toMatch(/completed/);
      expect(runs.stdout).toMatch(/2\/2/);
    },
  );

  it(
    'a rejected agent turn and an id the plan lacks: one line each saying why, exit 1, no POST; the counts agree',
    { timeout: 60_000 },
    async () => {
      const path = join(dir, 'notes.yaml');
      writeFileSync(
        path,
        'version: 1\nname: notes\nsteps:\n  chat:\n    model: agent\n    matrix:\n      topic: [frogs]\n    input:\n      content: "Say a word about {{ topic }}"\n',
      );
      const out = join(dir, 'runs');
      const first = await genpipe('run', path, '--out', out, '--quiet');
      expect(first.code, first.stderr).toBe(0);
      const runDir = runDirOf(out, 'notes');
      const review = new ReviewStore(runDir);
      await review.apply({ instance: 'chat[topic=frogs]', decision: 'rejected' });
      await review.apply({ instance: 'chat[topic=toads]', decision: 'rejected' });
      const before = posts();
      const ledgerBefore = ledgerUsd();

      const refused = await genpipe('resume', runDir, '--retry', 'rejected', '--quiet');
      expect(refused.code, refused.stderr).toBe(1);
      expect(posts()).toBe(before);
      expect(ledgerUsd()).toBe(ledgerBefore);
      const lines = refused.stderr.split('\n').filter((l) => l.includes('rejected in review'));
      expect(lines).toEqual([
        'chat[topic=frogs]: rejected in review, but an agent turn cannot be made again without its whole conversation, so it is kept as it was and nothing was sent',
        'chat[topic=toads]: rejected in review, but this run has no such instance, so nothing was made for it',
      ]);
      // The summary, the report and `genpipe runs` count the kept turn as the completed instance it is.
      expect(refused.stdout).toMatch(/notes \S+: failed; 1 completed, 0 failed/);
      expect(refused.stdout).toMatch(/2 rejected instances could not be made again/);
      const total = reportOf(runDir);
      expect(total.counts.completed).toBe(1);
      expect(total.netUsd).toBe(ledgerUsd());
      const runs = await genpipe('runs', '--out', out);
      expect(runs.stdout).toMatch(/failed/);
      expect(runs.stdout).toMatch(/1\/1/);

      // Said by the start that asked: a plain resume, inheriting the round, finishes quietly.
      const plain = await genpipe('resume', runDir, '--quiet');
      expect(plain.code, plain.stderr).toBe(0);
      expect(plain.stderr).not.toMatch(/rejected in review/);
      expect(posts()).toBe(before);
    },
  );
});
