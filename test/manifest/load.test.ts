import { describe, expect, it } from 'vitest';
import { ManifestError } from '../../src/manifest/errors.js';
import { loadManifestText } from '../../src/manifest/load.js';

function problems(text: string): { line: number; col: number; path: string; message: string }[] {
  try {
    loadManifestText(text, 'm.yaml');
  } catch (error) {
    expect(error).toBeInstanceOf(ManifestError);
    expect((error as ManifestError).code).toBe('invalid_input');
    return (error as ManifestError).problems.map((p) => ({ line: p.location.line, col: p.location.col, path: p.path, message: p.message }));
  }
  throw new Error('expected the manifest to be refused');
}

const valid = `version: 1
name: demo
vars:
  brief: hello
steps:
  sheets:
    model: character-sheet
    matrix:
      tier: [cats, dogs]
      seed: { range: { from: 1, to: 3 } }
    input:
      tier: "{{ tier }}"
      seed: "{{ seed }}"
      brief: "{{ vars.brief }}"
  clips:
    model: dop
    for_each: sheets
    input:
      input_images:
        - type: image_url
          image_url: "{{ upstream.outputs.images[0].url }}"
`;

describe('loading a manifest', () => {
  it('accepts a valid manifest and orders steps after their dependencies', () => {
    const loaded = loadManifestText(valid, 'm.yaml');
    expect(loaded.manifest.name).toBe('demo');
    expect(loaded.order).toEqual(['sheets', 'clips']);
    expect(loaded.templates.get('sheets')?.refs.map((r) => r.expression)).toEqual(['tier', 'seed', 'vars.brief']);
  });

  it('names file:line:col and proposes the nearest valid key for an unknown key', () => {
    const found = problems(valid.replace('    model: character-sheet\n', '    model: character-sheet\n    concurrancy: 3\n'));
    expect(found).toEqual([{ line: 8, col: 5, path: 'steps.sheets.concurrancy', message: 'unknown key "concurrancy"; did you mean "concurrency"?' }]);
  });

  it('reports every problem, not only the first, in document order', () => {
    const text = valid.replace('brief: "{{ vars.brief }}"', 'brief: "{{ vars.breif }}"').replace('for_each: sheets', 'for_each: sheet');
    const found = problems(text);
    expect(found.map((p) => p.message)).toEqual(['{{ vars.breif }}: no var "breif"; did you mean "brief"?', 'no step "sheet"; did you mean "sheets"?']);
    expect(found[0]?.line).toBeLessThan(found[1]?.line ?? 0);
  });

  it('locates a bad value at the value', () => {
    const found = problems(valid.replace('seed: { range: { from: 1, to: 3 } }', 'seed: { range: { from: 5, to: "x" } }'));
    expect(found).toHaveLength(1);
    expect(found[0]).toMatchObject({ line: 10, path: 'steps.sheets.matrix.seed.range.to' });
  });

  it('refuses a range whose end is before its start', () => {
    expect(problems(valid.replace('to: 3', 'to: 0'))[0]?.message).toBe('range.to must be at least range.from');
  });

  it('refuses an unknown model name and accepts a raw endpoint path', () => {
    expect(problems(valid.replace('model: dop', 'model: dopp'))[0]).toMatchObject({ path: 'steps.clips.model' });
    expect(loadManifestText(valid.replace('model: dop', 'model: /vendor/new-model'), 'm.yaml').manifest.steps.clips?.model).toBe('/vendor/new-model');
  });

  it('refuses a template that reads an unknown axis, proposing the nearest', () => {
    expect(problems(valid.replace('"{{ tier }}"', '"{{ tiers }}"'))[0]?.message).toBe('{{ tiers }}: "tiers" is not an axis of this step, vars, env or upstream; did you mean "tier"?');
  });

  it('refuses code in a template', () => {
    expect(problems(valid.replace('"{{ tier }}"', '"{{ tier + 1 }}"'))[0]?.message).toMatch(/templates hold no code/);
    expect(problems(valid.replace('"{{ tier }}"', '"{{ process.exit() }}"'))[0]?.message).toMatch(/templates hold no code/);
  });

  it('refuses an environment variable that is not allow-listed, and accepts one that is', () => {
    const reading = valid.replace('"{{ vars.brief }}"', '"{{ env.BRIEF }}"');
    expect(problems(reading)[0]?.message).toMatch(/environment variable BRIEF is not allow-listed/);
    expect(() => loadManifestText(reading.replace('vars:', 'env: [BRIEF]\nvars:'), 'm.yaml')).not.toThrow();
  });

  it('refuses upstream outside a for_each step', () => {
    expect(problems(valid.replace('"{{ vars.brief }}"', '"{{ upstream.outputs }}"'))[0]?.message).toMatch(/upstream is only available in a for_each step/);
  });

  it('refuses a dependency cycle', () => {
    const text = valid.replace('    model: character-sheet\n', '    model: character-sheet\n    needs: [clips]\n');
    expect(problems(text).map((p) => p.message)).toContainEqual(expect.stringMatching(/^dependency cycle: /));
  });

  it('refuses duplicate keys, custom tags and alias bombs as YAML errors', () => {
    expect(problems(valid.replace('name: demo', 'name: demo\nname: again'))[0]).toMatchObject({ line: 3 });
    expect(problems(valid.replace('name: demo', 'name: !!js/function demo'))).not.toHaveLength(0);
    const bomb = ['version: 1', 'name: bomb', 'a: &a [x, x, x, x, x, x, x, x, x, x]'];
    for (let i = 0; i < 8; i++) bomb.push(`${String.fromCharCode(98 + i)}: &${String.fromCharCode(98 + i)} [${Array(10).fill(`*${String.fromCharCode(97 + i)}`).join(', ')}]`);
    bomb.push('steps: {}');
    const started = Date.now();
    expect(problems(bomb.join('\n'))[0]?.message).toMatch(/alias/i);
    expect(Date.now() - started).toBeLessThan(5_000); // a bound on a hang, not a speed claim
  });

  it('refuses a document that is not a mapping', () => {
    expect(problems('- a\n- b\n')[0]?.message).toMatch(/a manifest is a mapping/);
  });

  it('refuses replies on a step that is not an agent step', () => {
    expect(problems(valid.replace('    model: dop\n', '    model: dop\n    replies: ["yes"]\n'))[0]?.message).toBe('replies apply to agent steps only');
  });
});
