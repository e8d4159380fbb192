// A damaged or foreign plan.json, review.json or run directory: every command that reads a run
// (report, review, diff either way round, resume, runs) exits 2 with one sentence naming the file
// and what is wrong, sends nothing, and never calls it an internal error (exit 70). A fuzz test
// feeds plan.json shapes made from a real one to every command.
import { cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { cleanTemps, emuRequests, findRunDir, HF_KEY, sheetsManifest, tempDir } from '../run/runner-helpers.js';

function capture(
  env: NodeJS.ProcessEnv,
  signal: AbortSignal = new AbortController().signal,
): CliIO & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  return { stdout, stderr, out: (t) => stdout.push(t), write: async (t) => void stdout.push(t), err: (t) => stderr.push(t), env, signal };
}

let emu: Emulator;
let good: string;
let goodPlan: Record<string, unknown>;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  const out = tempDir();
  const io = capture({ GENPIPE_BASE_URL: emu.url, HF_KEY });
  expect(
    await main(['run', sheetsManifest(tempDir(), 2, { name: 'damaged' }), '--out', out, '--rate', '1000'], io),
    io.stderr.join('\n'),
  ).toBe(0);
  good = findRunDir(out, 'damaged');
  goodPlan = JSON.parse(readFileSync(join(good, 'plan.json'), 'utf8')) as Record<string, unknown>;
});
afterAll(async () => {
  await emu.close();
  cleanTemps();
});

/** A copy of the good run, inside a runs folder of its own (for `genpipe runs`), damaged by `damage`. */
function damagedCopy(damage: (dir: string) => void): { root: string; dir: string } {
  const root = tempDir('genpipe-damaged-');
  const dir = join(root, 'damaged', 'r1');
  mkdirSync(join(root, 'damaged'));
  cpSync(good, dir, { recursive: true });
  damage(dir);
  return { root, dir };
}

const COMMANDS: [string, (bad: { root: string; dir: string }) => string[]][] = [
  ['report', ({ dir }) => ['report', dir]],
  ['report --json', ({ dir }) => ['report', dir, '--json']],
  ['review', ({ dir }) => ['review', dir, '--port', '0']],
  ['diff bad good', ({ dir }) => ['diff', dir, good, '--out', join(dir, '..', 'd1.html')]],
  ['diff good bad', ({ dir }) => ['diff', good, dir, '--out', join(dir, '..', 'd2.html')]],
  ['resume', ({ dir }) => ['resume', dir]],
  ['runs', ({ root }) => ['runs', '--out', root]],
];

/** Runs one command; review gets a signal that has already fired, so it stops once it has started. */
async function run(argv: string[]): Promise<{ code: number; stderr: string[] }> {
  const stopped = new AbortController();
  if (argv[0] === 'review') stopped.abort();
  const io = capture({ GENPIPE_BASE_URL: emu.url, HF_KEY }, stopped.signal);
  const code = await main(argv, io);
  return { code, stderr: io.stderr };
}

describe('a damaged plan.json', () => {
  const shapes: [string, (plan: Record<string, unknown>) => string, RegExp][] = [
    ['{}', () => '{}', /plan\.json is damaged or not a plan genpipe wrote: pipeline: .*expected string/],
    ['[]', () => '[]', /plan\.json holds a list, not a plan genpipe wrote/],
    ['null', () => 'null', /plan\.json holds null, not a plan genpipe wrote/],
    [
      '"steps": null',
      (p) => JSON.stringify({ ...p, steps: null }),
      /plan\.json is damaged or not a plan genpipe wrote: steps: .*expected array, received null/,
    ],
    [
      'a string price_usd',
      (p) => JSON.stringify({ ...p, steps: (p.steps as object[]).map((s) => ({ ...s, price_usd: '0.05' })) }),
      /plan\.json is damaged or not a plan genpipe wrote: steps\[0\]\.price_usd: .*expected number, received string/,
    ],
    [
      'a negative count',
      (p) => JSON.stringify({ ...p, steps: (p.steps as object[]).map((s) => ({ ...s, count: -1 })) }),
      /steps\[0\]\.count: /,
    ],
    ['a createdAt that is no date', (p) => JSON.stringify({ ...p, createdAt: 'yesterday' }), /createdAt: /],
    ['a run id with a slash', (p) => JSON.stringify({ ...p, runId: '../../x' }), /runId: expected a run id/],
    ['not JSON', () => '{"pipeline": ', /plan\.json is not valid JSON/],
  ];
  for (const [name, make, message] of shapes) {
    for (const [label, argv] of COMMANDS) {
      it(`${name}: genpipe ${label} exits 2 naming the file and the field, sending nothing`, async () => {
        const bad = damagedCopy((dir) => writeFileSync(join(dir, 'plan.json'), make(goodPlan)));
        const sent = emuRequests(emu).length;
        const result = await run(argv(bad));
        expect(result.code, result.stderr.join('\n')).toBe(2);
        expect(result.stderr).toHaveLength(1);
        expect(result.stderr[0]).toContain(join(bad.dir, 'plan.json'));
        expect(result.stderr[0]).toMatch(message);
        expect(emuRequests(emu).length).toBe(sent);
      });
    }
  }
});

describe('a damaged run directory or review.json', () => {
  const damages: [string, (dir: string) => void, string, RegExp][] = [
    [
      'a folder named journal.jsonl',
      (dir) => (rmSync(join(dir, 'journal.jsonl')), mkdirSync(join(dir, 'journal.jsonl'))),
      'journal.jsonl',
      /journal\.jsonl is not a file, so not a journal genpipe wrote/,
    ],
    [
      'a folder named plan.json',
      (dir) => (rmSync(join(dir, 'plan.json')), mkdirSync(join(dir, 'plan.json'))),
      '',
      /is not a run directory \(no readable plan\.json\)/,
    ],
  ];
  for (const [name, damage, file, message] of damages) {
    for (const [label, argv] of COMMANDS) {
      it(`${name}: genpipe ${label} exits 2 naming it`, async () => {
        const bad = damagedCopy(damage);
        const sent = emuRequests(emu).length;
        const result = await run(argv(bad));
        expect(result.code, result.stderr.join('\n')).toBe(2);
        expect(result.stderr.at(-1)).toContain(join(bad.dir, file));
        expect(result.stderr.at(-1)).toMatch(message);
        expect(emuRequests(emu).length).toBe(sent);
      });
    }
  }

  it('a folder where report writes report.json: exit 2 naming it, not an internal error', async () => {
    const bad = damagedCopy((dir) => (rmSync(join(dir, 'report.json')), mkdirSync(join(dir, 'report.json'))));
    const result = await run(['report', bad.dir]);
    expect(result.code).toBe(2);
    expect(result.stderr).toEqual([
      `genpipe: ${join(bad.dir, 'report.json')} is a folder where genpipe reads or writes a file (EISDIR on rename); fix or remove it.`,
    ]);
  });

  for (const [name, text] of [
    ['a list', '[1]'],
    ['a starred flag that is a number', '{"a": {"starred": 1, "at": "2026-01-01T00:00:00Z"}}'],
    ['not JSON', '{'],
  ] as const) {
    it(`review.json holding ${name}: review and resume --retry rejected exit 2 naming it, sending nothing`, async () => {
      const bad = damagedCopy((dir) => writeFileSync(join(dir, 'review.json'), text));
      const sent = emuRequests(emu).length;
      for (const argv of [
        ['review', bad.dir],
        ['resume', bad.dir, '--retry', 'rejected'],
      ]) {
        const result = await run(argv);
        expect(result.code, result.stderr.join('\n')).toBe(2);
        expect(result.stderr.at(-1)).toContain(join(bad.dir, 'review.json'));
      }
      expect(emuRequests(emu).length).toBe(sent);
    });
  }
});

/** A JSON path into the plan: the field a fuzz case replaces. */
const planPaths = (): (string | number)[][] => {
  const out: (string | number)[][] = [[]];
  const walk = (value: unknown, path: (string | number)[]): void => {
    if (value === null || typeof value !== 'object') return;
    for (const [key, child] of Object.entries(value)) {
      const next = [...path, Array.isArray(value) ? Number(key) : key];
      out.push(next);
      walk(child, next);
    }
  };
  walk(goodPlan, []);
  return out;
};

function replaced(plan: unknown, path: readonly (string | number)[], value: unknown): unknown {
  if (path.length === 0) return value;
  const [head, ...rest] = path;
  const copy = (Array.isArray(plan) ? [...plan] : { ...(plan as object) }) as Record<string | number, unknown>;
  copy[head as string | number] = replaced(copy[head as string | number], rest, value);
  return copy;
}

describe('plan.json shapes (fuzz)', () => {
  it('report, review, diff, resume and runs never exit 70 nor print a stack, whatever plan.json holds', { timeout: 180_000 }, async () => {
    const paths = planPaths();
    const damage = fc.oneof(
      fc
        .record({ path: fc.constantFrom(...paths), value: fc.jsonValue({ maxDepth: 2 }) })
        .map(({ path, value }) => JSON.stringify(replaced(goodPlan, path, value))),
      fc
        .record({ path: fc.constantFrom(...paths.filter((p) => p.length > 0)) })
        .map(({ path }) => JSON.stringify(replaced(goodPlan, path, undefined))),
      fc.jsonValue({ maxDepth: 3 }).map((value) => JSON.stringify(value)),
      fc.string({ maxLength: 40 }),
    );
    await fc.assert(
      fc.asyncProperty(damage, fc.constantFrom(...COMMANDS), async (text, [, argv]) => {
        const bad = damagedCopy((dir) => writeFileSync(join(dir, 'plan.json'), text ?? ''));
        const result = await run(argv(bad));
        const all = result.stderr.join('\n');
        expect(result.code, all).not.toBe(70);
        expect(all).not.toMatch(/internal error|\n\s+at /);
        if (result.code === 2)
          expect(all, text).toMatch(/plan\.json|manifest|review|changed since run|embedded emulator|--retry|run directory/);
        rmSync(bad.root, { recursive: true, force: true });
      }),
      { numRuns: 120 },
    );
  });
});
