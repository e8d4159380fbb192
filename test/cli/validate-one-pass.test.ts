import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
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
      `  ${path}:7:14: steps.a.retries: must be at least 0`,
      `  ${path}:10:21: steps.b.input.brief: {{ sed }}: "sed" is not an axis of this step, vars, env, run or upstream; did you mean "seed"?`,
      `  ${path}:14:27: steps.c.matrix.row.csv: the CSV file ${csv.startsWith('..') ? join(dir, 'missing.csv') : csv} does not exist${csv.startsWith('..') ? '' : ` (looked for ${join(dir, 'missing.csv')})`}`,
      `  ${path}:18:22: steps.d.matrix.seed[0]: 0 must be at least 1; read by steps.d.input.seed at ${path}:19:20`,
    ]);
  });

  it('--json prints every problem as {file, line, col, code, message}, exit 2', async () => {
    const path = write('rounds-json.yaml', threeRounds);
    const io = capture();
    expect(await main(['validate', path, '--json'], io)).toBe(2);
    expect(io.stderr).toEqual([]);
    const problems = JSON.parse(io.stdout.join('')) as {
      file: string;
      line: number;
      col: number;
      code: string;
      message: string;
      also?: unknown;
    }[];
    expect(problems.map((p) => [p.file, p.line, p.col, p.code])).toEqual([
      [path, 3, 6, 'env'],
      [path, 7, 14, 'schema'],
      [path, 10, 21, 'reference'],
      [path, 14, 27, 'missing_file'],
      [path, 18, 22, 'instance'],
    ]);
    // The value's template is the second location.
    expect(problems[4]?.also).toEqual({ file: path, line: 19, col: 20, path: 'steps.d.input.seed' });
    expect(problems[1]?.message).toBe('steps.a.retries: must be at least 0');
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

// The typos of one manifest, in the project's words: each at its own line, all in one pass.
const typos = `version: 1
name: typos
defaults:
  budget_usd: "15$"
steps:
  sheets:
    model: character-sheet
    matrx:
      tier:
        - cats
        - dogz
        - capybaras
    input:
      variaton_index: 3
      tier: "{{ tier }}"
`;

describe('validation speaks at the value, in the project’s words', () => {
  it('a bad sweep value is located at the value in the matrix list, with the template second and a did-you-mean', async () => {
    const path = write(
      'dogz.yaml',
      'version: 1\nname: dogz\nsteps:\n  sheets:\n    model: character-sheet\n    matrix:\n      tier: [cats, dogz]\n      seed: [1, 2]\n    input:\n      tier: "{{ tier }}"\n      seed: "{{ seed }}"\n',
    );
    const io = capture();
    expect(await main(['validate', path], io)).toBe(2);
    expect(io.stderr).toEqual([
      `genpipe: ${path}:7:20: steps.sheets.matrix.tier[1]: "dogz" must be one of normal, freak, total, insects, frogs, cats, dogs, capybaras, birds (did you mean dogs?); read by steps.sheets.input.tier at ${path}:10:13 in 2 instances`,
    ]);
  });

  it('a value from a CSV row names the row and column, at the template that reads it', async () => {
    write('tiers.csv', 'sku,tier\nA1,cats\nA2,dogz\n');
    const path = write(
      'tiers.yaml',
      'version: 1\nname: tiers\nsteps:\n  sheets:\n    model: character-sheet\n    matrix: { row: { csv: tiers.csv, key: sku } }\n    input:\n      tier: "{{ row.tier }}"\n',
    );
    const io = capture();
    expect(await main(['validate', path], io)).toBe(2);
    expect(io.stderr[0]).toBe(
      `genpipe: ${path}:8:13: steps.sheets.input.tier: sheets[row=A2]: must be one of normal, freak, total, insects, frogs, cats, dogs, capybaras, birds (did you mean dogs?) (${join(dir, 'tiers.csv')} row 3, column 2 ("tier"))`,
    );
  });

  it('matrx, variaton_index, dogz and a budget of "15$" are all reported in one pass, with did-you-mean for keys too', async () => {
    const path = write('typos.yaml', typos);
    const io = capture();
    expect(await main(['validate', path], io)).toBe(2);
    expect(io.stderr).toEqual([
      `genpipe: ${path}:4:15: defaults.budget_usd: must be a number of US dollars, like 15 (4 problems; all listed below)`,
      `  ${path}:4:15: defaults.budget_usd: must be a number of US dollars, like 15`,
      `  ${path}:8:5: steps.sheets.matrx: unknown key "matrx"; did you mean "matrix"?`,
      `  ${path}:11:11: steps.sheets.matrix.tier[1]: "dogz" must be one of normal, freak, total, insects, frogs, cats, dogs, capybaras, birds (did you mean dogs?); read by steps.sheets.input.tier at ${path}:15:13`,
      `  ${path}:14:7: steps.sheets.input.variaton_index: sheets[tier=cats]: unknown key "variaton_index"; did you mean "variation_index"? (and 2 more instances)`,
    ]);
  });

  it('run refuses the same manifest with exit 2 and sends nothing (the service address is a closed port)', async () => {
    const path = write('typos-run.yaml', typos);
    const out = join(dir, 'typos-out');
    const io = capture({ GENPIPE_BASE_URL: 'http://127.0.0.1:9', HF_KEY: 'id:secret' });
    expect(await main(['run', path, '--out', out], io)).toBe(2);
    // A request to the closed port would have ended as exit 5 (unreachable), and a run directory.
    expect(io.stderr[0]).toContain('defaults.budget_usd: must be a number of US dollars, like 15');
    expect(existsSync(out)).toBe(false);
  });

  it('a misspelt key whose suggestion is already there is dropped, not renamed, and the rest is still checked', async () => {
    const path = write(
      'both.yaml',
      'version: 1\nname: both\nsteps:\n  sheets:\n    model: character-sheet\n    matrix: { seed: [0] }\n    matrx: { seed: [5] }\n    input: { seed: "{{ seed }}" }\n',
    );
    const io = capture();
    expect(await main(['validate', path], io)).toBe(2);
    expect(io.stderr.slice(1)).toEqual([
      `  ${path}:6:22: steps.sheets.matrix.seed[0]: 0 must be at least 1; read by steps.sheets.input.seed at ${path}:8:20`,
      `  ${path}:7:5: steps.sheets.matrx: unknown key "matrx"; did you mean "matrix"?`,
    ]);
  });

  it('a manifest with hundreds of misspelt keys is reported up to the bound, and says how many more', async () => {
    const steps = Array.from({ length: 80 }, (_, i) => `  s${i}:\n    model: character-sheet\n    retrys: 1\n`).join('');
    const path = write('many.yaml', `version: 1\nname: many\nsteps:\n${steps}`);
    const io = capture();
    expect(await main(['validate', path], io)).toBe(2);
    const listed = Number(/\(80 problems; the first (\d+) listed below\)$/.exec(io.stderr[0] ?? '')?.[1]);
    expect(listed).toBeGreaterThan(10);
    expect(listed).toBeLessThanOrEqual(50);
    expect(io.stderr.at(-1)).toMatch(new RegExp(`: and ${80 - listed} more problems from here on, not listed$`));
    expect(io.stderr.filter((line) => line.startsWith('  ') && line.includes('did you mean "retries"?'))).toHaveLength(listed);
  });
});

describe('a CSV campaign’s bad cells are named at their cells', () => {
  const ads = (csv: string, extra = ''): string =>
    `version: 1\nname: ads\nsteps:\n  ads:\n    model: marketing-image\n    matrix:\n      row: { csv: ${csv}, key: sku }\n${extra}    input:\n      prompt: "{{ row.name }}"\n      image_urls: ["{{ row.image }}"]\n`;

  it('an image cell holding neither a URL nor an existing file is a bad URL at its row and column, with its value (code csv)', async () => {
    write('urls.csv', 'sku,name,image\nA1,Cafe,https://example.com/a.png\nA2,Bar,htp:/broken-url\nA3,Baz,not a url at all\n');
    const path = write('urls.yaml', ads('urls.csv'));
    const io = capture();
    expect(await main(['validate', path, '--json'], io)).toBe(2);
    const problems = JSON.parse(io.stdout.join('')) as { code: string; message: string }[];
    const csv = join(dir, 'urls.csv');
    expect(problems.map((p) => [p.code, p.message])).toEqual([
      [
        'csv',
        `steps.ads.input: ads[row=A2]: a bad URL: the CSV cell ${csv} row 3, column 3 ("image") holds "htp:/broken-url", which is neither a URL (https://...) nor an existing file`,
      ],
      [
        'csv',
        `steps.ads.input: ads[row=A3]: a bad URL: the CSV cell ${csv} row 4, column 3 ("image") holds "not a url at all", which is neither a URL (https://...) nor an existing file`,
      ],
    ]);
  });

  it('a missing image the manifest itself names is still a missing file, named by where it was looked for', async () => {
    const path = write(
      'literal.yaml',
      'version: 1\nname: lit\nsteps:\n  ads:\n    model: marketing-image\n    input:\n      prompt: hi\n      image_urls: [no-such-image.png]\n',
    );
    const io = capture();
    expect(await main(['validate', path, '--json'], io)).toBe(2);
    const problems = JSON.parse(io.stdout.join('')) as { code: string; message: string }[];
    expect(problems.map((p) => p.code)).toEqual(['missing_file']);
    expect(problems[0]?.message).toBe(`steps.ads.input: ads: the image file ${join(dir, 'no-such-image.png')} does not exist`);
  });

  it('a CSV that is not UTF-8 is the one problem: its exclude naming the axis adds no follow-on error', async () => {
    writeFileSync(join(dir, 'cp1252.csv'), Buffer.from('sku,name,image\nA1,Caf\xe9,https://example.com/a.png\n', 'latin1'));
    const path = write('cp1252.yaml', ads('cp1252.csv', '    exclude:\n      - row: { sku: A9 }\n'));
    const io = capture();
    expect(await main(['validate', path], io)).toBe(2);
    expect(io.stderr).toEqual([
      `genpipe: ${join(dir, 'cp1252.csv')}:2:2: steps.ads.matrix.row: row 2, column "name" holds bytes that are not UTF-8 text: save the file as UTF-8`,
    ]);
  });
});
