// Where a new user tripped: typos of models and input fields get a "did you
// mean", and a template error is located at the template's own line. Each refused case exits 2
// with one located sentence; the service address is a closed port, so any request would show as exit 5.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';

function capture(): CliIO & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  const env = { GENPIPE_BASE_URL: 'http://127.0.0.1:9', HF_KEY: 'id:secret-value' };
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

const dir = mkdtempSync(join(tmpdir(), 'genpipe-new-user-'));

function manifest(name: string, model: string, input: string, matrix = '      seed: [1, 2]\n'): string {
  const file = join(dir, `${name}.yaml`);
  writeFileSync(file, `version: 1\nname: t\nsteps:\n  s:\n    model: ${model}\n    matrix:\n${matrix}    input:\n${input}`);
  return file;
}

async function validate(file: string): Promise<{ code: number; stderr: string[] }> {
  const io = capture();
  const code = await main(['validate', file], io);
  return { code, stderr: io.stderr };
}

const goodInput = '      tier: cats\n      seed: "{{ seed }}"\n      variation_index: 0\n';

describe('did you mean, for the typos new users make', () => {
  it('accepts the right spelling of model and fields', async () => {
    expect((await validate(manifest('good', 'character-sheet', goodInput))).code).toBe(0);
  });

  it('a model name with an underscore is answered with the built-in one', async () => {
    const file = manifest('model', 'character_sheet', goodInput);
    const { code, stderr } = await validate(file);
    expect(code).toBe(2);
    expect(stderr).toEqual([
      `genpipe: ${file}:5:12: steps.s.model: unknown model "character_sheet"; did you mean "character-sheet"? (a raw endpoint path starts with /)`,
    ]);
  });

  it('a name far from every model lists them, and a raw path is still accepted', async () => {
    const { stderr } = await validate(manifest('far', 'zzzzzzzz', goodInput));
    expect(stderr[0]).toMatch(
      /unknown model "zzzzzzzz"; the built-in models are character-sheet, .*\(a raw endpoint path starts with \/\)$/,
    );
    expect((await validate(manifest('raw', '/vendor/new-model', '      prompt: hi\n'))).code).toBe(0);
  });

  it('variaton_index is answered with variation_index', async () => {
    const file = manifest('field', 'character-sheet', '      tier: cats\n      seed: "{{ seed }}"\n      variaton_index: 1\n');
    const { code, stderr } = await validate(file);
    expect(code).toBe(2);
    // At the key itself, in the words every other unknown key gets.
    expect(stderr[0]).toContain(
      `${file}:11:7: steps.s.input.variaton_index: s[seed=1]: unknown key "variaton_index"; did you mean "variation_index"?`,
    );
  });

  it('selections is answered with selection', async () => {
    const file = manifest('selections', 'character-sheet', `${goodInput}      selections: {}\n`);
    const { code, stderr } = await validate(file);
    expect(code).toBe(2);
    expect(stderr[0]).toContain('steps.s.input.selections: s[seed=1]: unknown key "selections"; did you mean "selection"?');
  });

  it('a field far from every valid one gets no guess', async () => {
    const { stderr } = await validate(manifest('nothing', 'character-sheet', `${goodInput}      zzzzzzzzzzzz: 1\n`));
    expect(stderr[0]).toMatch(
      /steps\.s\.input\.zzzzzzzzzzzz: s\[seed=1\]: unknown key "zzzzzzzzzzzz"; valid keys are tier, selection, .*, trait_variants \(and 1 more instances\)$/,
    );
  });

  it('a template error is located at the template, not at the first key of the input', async () => {
    const file = manifest('template', 'character-sheet', '      tier: cats\n      seed: "{{ sed }}"\n      variation_index: 0\n');
    const { code, stderr } = await validate(file);
    expect(code).toBe(2);
    expect(stderr).toEqual([
      `genpipe: ${file}:10:13: steps.s.input.seed: {{ sed }}: "sed" is not an axis of this step, vars, env, run or upstream; did you mean "seed"?`,
    ]);
  });
});
