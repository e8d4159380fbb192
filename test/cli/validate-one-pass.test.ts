import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';

function capture(env: NodeJS.ProcessEnv = {}): CliIO & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  return {
    stdout,
    stderr,
    out: (t) => stdout.push(t),
    write: async (t) => void stdout.push(t),
    err: (t) => stderr.push(t),
    env,
    signal: new AbortController().signal,
  };
}

const dir = mkdtempSync(join(tmpdir(), 'genpipe-validate-'));
const write = (name: string, text: string): string => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};

// Three kinds of problems that used to come in three rounds: the schema (step a), a reference and
// a missing CSV (steps b and c, found only once the schema passed), and an invalid instance (step
// d, found only once every step resolved). A fourth step, e, follows the broken a and is left out.
const threeRounds = `version: 1
name: rounds
env: [UNSET_FOR_THE_TEST]
steps:
  a:
    model: character-sheet
    retries: -1
  b:
    model: character-sheet
    input: { brief: "{{ sed }}" }
    matrix: { seed: [1] }
  c:
    model: marketing-image
    matrix: { row: { csv: missing.csv } }
    input: { prompt: "{{ row.prompt }}" }
  d:
    model: character-sheet
    matrix: { seed: [0, 5] }
    input: { seed: "{{ seed }}" }
  e:
    model: character-sheet
    for_each: a
  f:
    model: character-sheet
    input: { brief: "{{ env.UNSET_FOR_THE_TEST }}" }
`;

describe('genpipe validate lists every problem in one pass', () => {
  it('reports schema, reference, missing-file, env and instance problems together, exit 2', async () => {
    const path = write('rounds.yaml', threeRounds);
    const io = capture();
    expect(await main(['validate', path], io)).toBe(2);
    const csv = relative(process.cwd(), join(dir, 'missing.csv'));
    expect(io.stderr).toEqual([
      `genpipe: ${path}:3:6: env: environment variable UNSET_FOR_THE_TEST is allow-listed but not set (5 problems; all listed below)`,
      `  ${path}:3:6: env: environment variable UNSET_FOR_THE_TEST is allow-listed but not set`,
      `  ${path}:7:14: steps.a.retries: Too small: expected number to be >=0`,
      `  ${path}:10:21: steps.b.input.brief: {{ sed }}: "sed" is not an axis of this step, vars, env, run or upstream; did you mean "seed"?`,
      `  ${path}:14:27: steps.c.matrix.row.csv: the CSV file ${csv.startsWith('..') ? join(dir, 'missing.csv') : csv} does not exist${csv.startsWith('..') ? '' : ` (looked for ${join(dir, 'missing.csv')})`}`,
      `  ${path}:19:20: steps.d.input.seed: d[seed=0]: Too small: expected number to be >=1`,
    ]);
  });

  it('--json prints every problem as {file, line, col, code, message}, exit 2', async () => {
    const path = write('rounds-json.yaml', threeRounds);
    const io = capture();
    expect(await main(['validate', path, '--json'], io)).toBe(2);
    expect(io.stderr).toEqual([]);
    const problems = JSON.parse(io.stdout.join('')) as { file: string; line: number; col: number; code: string; message: string }[];
    expect(problems.map((p) => [p.file, p.line, p.col, p.code])).toEqual([
      [path, 3, 6, 'env'],
      [path, 7, 14, 'schema'],
      [path, 10, 21, 'reference'],
      [path, 14, 27, 'missing_file'],
      [path, 19, 20, 'instance'],
    ]);
    expect(problems[1]?.message).toBe('steps.a.retries: Too small: expected number to be >=0');
    expect(Object.keys(problems[0] ?? {})).toEqual(['file', 'line', 'col', 'code', 'message']);
  });

  it('--json prints [] for a valid manifest, exit 0', async () => {
    const io = capture();
    const quickstart = new URL('../../pipelines/quickstart.yaml', import.meta.url).pathname;
    expect(await main(['validate', quickstart, '--json'], io)).toBe(0);
    expect(JSON.parse(io.stdout.join(''))).toEqual([]);
  });

  it('--json names a missing manifest at line 0 with code missing_file', async () => {
    const io = capture();
    const missing = join(dir, 'nowhere.yaml');
    expect(await main(['validate', missing, '--json'], io)).toBe(2);
    expect(JSON.parse(io.stdout.join(''))).toEqual([
      { file: missing, line: 0, col: 0, code: 'missing_file', message: 'the manifest file does not exist' },
    ]);
  });

  it('a missing manifest given by a relative path says where it was looked for', async () => {
    const io = capture();
    expect(await main(['validate', 'no-such-manifest-here.yaml'], io)).toBe(2);
    expect(io.stderr).toEqual([
      `genpipe: no-such-manifest-here.yaml: the manifest file does not exist (looked for ${join(process.cwd(), 'no-such-manifest-here.yaml')})`,
    ]);
  });

  it('an empty CSV cell is one of the problems, code empty_cell, with its row and column', async () => {
    write('cells.csv', 'sku,headline\nA1,Hello\nA2,\n');
    const path = write(
      'cells.yaml',
      'version: 1\nname: cells\nsteps:\n  ads:\n    model: marketing-image\n    matrix: { row: { csv: cells.csv } }\n    input: { prompt: "{{ row.headline }}" }\n',
    );
    const io = capture();
    expect(await main(['validate', path, '--json'], io)).toBe(2);
    const problems = JSON.parse(io.stdout.join('')) as { line: number; col: number; code: string; message: string }[];
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatchObject({ line: 7, col: 22, code: 'empty_cell' });
    expect(problems[0]?.message).toMatch(/cells\.csv row 3, column 2 \("headline"\) is empty/);
  });
});

describe('validate --help', () => {
  it('lists every code --json can give', async () => {
    const { PROBLEM_CODES } = await import('../../src/manifest/errors.js');
    const io = capture();
    expect(await main(['help', 'validate'], io)).toBe(0);
    const help = io.stdout.join('\n').replace(/\s+/g, ' ');
    for (const code of PROBLEM_CODES) expect(help).toContain(` ${code}${code === 'invalid' ? '.' : ','}`);
  });
});

describe('validate --json with a refusal outside the manifest', () => {
  it('a config file that cannot be read is one entry (code invalid, line 0), after the manifest problems', async () => {
    const path = write(
      'selection.yaml',
      'version: 1\nname: sel\nsteps:\n  a:\n    model: character-sheet\n    retries: -1\n  b:\n    model: character-sheet\n    input: { selection: { hair: [short] } }\n',
    );
    const io = capture();
    const config = join(dir, 'no-such-config.yaml');
    expect(await main(['validate', path, '--json', '--config', config], io)).toBe(2);
    const problems = JSON.parse(io.stdout.join('')) as { file: string; line: number; code: string; message: string }[];
    expect(problems.map((p) => [p.line, p.code])).toEqual([
      [0, 'invalid'],
      [6, 'schema'],
    ]);
    expect(problems[0]?.message).toContain(`Cannot read the config file ${config}`);
  });
});
