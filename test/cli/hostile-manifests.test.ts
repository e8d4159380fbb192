// Hostile manifests end with exit 2, a located sentence and a bounded output, with bounded work,
// and nothing is sent or created. Recursive aliases go through the built binary (bin/genpipe.js ->
// dist/; `npm test` builds first); the pathological shapes through main() in this process, where
// the work of judging them is counted (see `work` below) instead of timed: a count does not change
// with the machine's load, and it grows past its bound as soon as a guard against quadratic work
// is removed (these shapes took 11-23 s before the guards).
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { SUGGEST_BUDGET_CELLS } from '../../src/util/suggest.js';

/**
 * The work of judging one manifest, counted where it could turn quadratic:
 * - `nodeChecks`: calls of yaml's node predicates (isMap, isScalar, ...) made by genpipe's own walk
 *   of the document (yaml-source.ts: depth, key and duplicate checks, locating a problem). Linear
 *   walks make a few per node; a per-key scan of a mapping (locate() without its key index) makes
 *   one per key per key.
 * - `suggestCells`: the edit-distance cells every Suggester drew from its budget.
 * - `uniqueKeys`: the option each yaml Composer was built with; yaml's own duplicate-key check is
 *   quadratic, so it must stay off (yaml-source.ts checks keys with a Set).
 */
const work = vi.hoisted(() => ({ nodeChecks: 0, suggestCells: 0, uniqueKeys: [] as unknown[] }));

vi.mock('yaml', async (importOriginal) => {
  const yaml = await importOriginal<typeof import('yaml')>();
  const counted =
    <A extends unknown[], R>(predicate: (...args: A) => R) =>
    (...args: A): R => {
      work.nodeChecks++;
      return predicate(...args);
    };
  class Composer extends yaml.Composer {
    constructor(...args: ConstructorParameters<typeof yaml.Composer>) {
      super(...args);
      work.uniqueKeys.push(args[0]?.uniqueKeys);
    }
  }
  return {
    ...yaml,
    Composer,
    isAlias: counted(yaml.isAlias),
    isMap: counted(yaml.isMap),
    isPair: counted(yaml.isPair),
    isScalar: counted(yaml.isScalar),
    isSeq: counted(yaml.isSeq),
  };
});

vi.mock('../../src/util/suggest.js', async (importOriginal) => {
  const suggest = await importOriginal<typeof import('../../src/util/suggest.js')>();
  class Suggester extends suggest.Suggester {
    override nearest(word: unknown, candidates: readonly string[]): string | undefined {
      const before = (this as unknown as { budget: number }).budget;
      const answer = super.nearest(word, candidates);
      work.suggestCells += before - (this as unknown as { budget: number }).budget;
      return answer;
    }
  }
  return { ...suggest, Suggester };
});

beforeEach(() => {
  work.nodeChecks = 0;
  work.suggestCells = 0;
  work.uniqueKeys = [];
});

const bin = new URL('../../bin/genpipe.js', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'genpipe-hostile-'));

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

function genpipe(args: string[]): Promise<Outcome> {
  return new Promise((resolve) => {
    // A closed port: a request, if one were sent, would end in exit 5, not 2.
    const env = { ...process.env, GENPIPE_BASE_URL: 'http://127.0.0.1:9', HF_KEY: 'id:secret-value' };
    const child = spawn(process.execPath, [bin, ...args], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

const manifest = (name: string, text: string): string => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};

describe('recursive aliases, through validate, plan and run --emulator', () => {
  const forms: [string, string, string][] = [
    ['vars', 'version: 1\nname: rec\nvars: &v {self: *v}\nsteps:\n  a:\n    model: character-sheet\n    input: {}\n', '3:17'],
    ['mood', 'version: 1\nname: rec\nvars:\n  mood: &m [x, *m]\nsteps:\n  a:\n    model: character-sheet\n    input: {}\n', '4:16'],
    ['input', 'version: 1\nname: rec\nsteps:\n  a:\n    model: character-sheet\n    input: &i {selection: *i}\n', '6:27'],
  ];
  for (const [name, text, where] of forms) {
    it(`the ${name} form: exit 2 at file:${where}, no run directory`, async () => {
      const path = manifest(`${name}.yaml`, text);
      const expected = new RegExp(`^genpipe: ${path.replace(/[.]/g, '\\.')}:${where}: the alias \\*[vmi] is recursive`);
      for (const command of ['validate', 'plan']) {
        const outcome = await genpipe([command, path, '--emulator']);
        expect({ command, code: outcome.code, stdout: outcome.stdout }).toEqual({ command, code: 2, stdout: '' });
        expect(outcome.stderr).toMatch(expected);
      }
      const out = join(dir, `runs-${name}`);
      const run = await genpipe(['run', path, '--emulator', '--out', out]);
      expect(run.code).toBe(2);
      expect(run.stderr).toMatch(expected);
      expect(existsSync(out)).toBe(false);
      expect(existsSync(join(dir, 'runs'))).toBe(false);
    });
  }
});

/**
 * Node predicate calls allowed: a few per byte of manifest, plus a constant for the manifest's
 * fixed part. The shapes below make 0-1.3 per byte (2.9 for the smallest); 10,000 unknown keys
 * located without the key index make over 100 million.
 */
const nodeChecksAllowed = (bytes: number): number => 4 * bytes + 2_000;

describe('pathological manifests are judged with bounded work and a bounded output', () => {
  const head = 'version: 1\nname: p\nsteps:\n  a:\n    model: character-sheet\n    input: {}\n';
  const nestedList = (depth: number): string => `${'['.repeat(depth)}${']'.repeat(depth)}`;
  const shapes: [string, string, RegExp][] = [
    [
      'a 700-level nested list as a key',
      `version: 1\nname: p\nsteps: {a: {model: character-sheet, input: {}}, ${nestedList(700)}: 1}\n`,
      /:3:119: nested more than 64 levels deep$/m,
    ],
    [
      'a 60-level nested list as a key',
      `version: 1\nname: p\nsteps: {a: {model: character-sheet, input: {}}, ${nestedList(60)}: 1}\n`,
      /:3:49: a mapping key must be a plain value, not a mapping or a list$/m,
    ],
    [
      'a nested list key deep inside an input',
      `${head.replace('input: {}', `input: {x: {y: [{${nestedList(40)}: 1}]}}`)}`,
      /:6:22: a mapping key must be a plain value/m,
    ],
    [
      '10,000 unknown keys',
      head + Array.from({ length: 10_000 }, (_, i) => `    k${i}: 1\n`).join(''),
      /:7:5: steps\.a\.k0: unknown key "k0"; valid keys are .* \(10000 problems; the first 50 listed below\)$/m,
    ],
    [
      'a 500 KB key',
      `${head}    ? ${'x'.repeat(500_000)}\n    : 1\n`,
      /:7:7: steps\.a\.x{48}…\(500000 chars\): unknown key "x{48}…\(500000 chars\)"; valid keys/,
    ],
    [
      'a 500 KB name read by a template',
      head.replace('input: {}', `input: {prompt: "{{ vars.${'v'.repeat(500_000)} }}"}`),
      /:6:21: steps\.a\.input\.prompt: \{\{ vars\.v{43}…\(500005 chars\) \}\}: no var "v{48}…\(500000 chars\)"$/m,
    ],
    [
      'mappings nested 100,000 deep',
      head.replace('input: {}', `input: ${'{a: '.repeat(100_000)}1${'}'.repeat(100_000)}`),
      /:6:2\d\d: nested more than 64 levels deep$/m,
    ],
    [
      'block mappings nested 1,000 deep',
      `${head.replace('input: {}\n', 'input:\n')}${Array.from({ length: 1_000 }, (_, i) => `${' '.repeat(6 + 2 * i)}k:\n`).join('')}`,
      /: nested more than 64 levels deep$/m,
    ],
    [
      '50,000 vars in one flow mapping, then one unknown key',
      `version: 1\nname: p\nvars: {${Array.from({ length: 50_000 }, (_, i) => `v${i}: ${i}`).join(', ')}}\nsteps: {a: {model: dop}}\nbogus: 1\n`,
      /:5:1: bogus: unknown key "bogus"; valid keys are \$schema, version/,
    ],
    [
      '5,000 recursive aliases',
      `version: 1\nname: p\nvars:\n${Array.from({ length: 5_000 }, (_, i) => `  v${i}: &a${i} [*a${i}]\n`).join('')}steps: {}\n`,
      /:4:12: the alias \*a0 is recursive.*\(5000 problems; the first \d+ listed below\)$/m,
    ],
  ];
  for (const [name, text, expected] of shapes) {
    it(`${name}: exit 2, under 10 KB of output, work linear in its size`, async () => {
      const path = manifest(`${name.replace(/\W+/g, '-')}.yaml`, text);
      expect(text.length).toBeLessThan(1024 * 1024);
      const stdout: string[] = [];
      const stderr: string[] = [];
      const io: CliIO = {
        out: (t) => stdout.push(t),
        write: async (t) => void stdout.push(t),
        err: (t) => stderr.push(t),
        env: { GENPIPE_BASE_URL: 'http://127.0.0.1:9' },
        signal: new AbortController().signal,
      };
      const code = await main(['validate', path], io);
      const errors = stderr.join('\n');
      expect(code).toBe(2);
      expect(stdout).toEqual([]);
      expect(errors).toMatch(expected);
      expect(errors.startsWith(`genpipe: ${path}:`)).toBe(true);
      expect(Buffer.byteLength(errors)).toBeLessThan(10 * 1024);
      // Bounded work (see `work`): linear in the manifest's size, whatever the machine's load.
      expect(work.uniqueKeys.length).toBeGreaterThan(0);
      expect(work.uniqueKeys.every((option) => option === false)).toBe(true);
      expect(work.nodeChecks).toBeLessThan(nodeChecksAllowed(text.length));
      expect(work.suggestCells).toBeLessThanOrEqual(SUGGEST_BUDGET_CELLS);
    });
  }
});
