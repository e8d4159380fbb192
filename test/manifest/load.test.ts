import { describe, expect, it } from 'vitest';
import { formatProblem, ManifestError } from '../../src/manifest/errors.js';
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
    expect(found).toEqual([
      { line: 8, col: 5, path: 'steps.sheets.concurrancy', message: 'unknown key "concurrancy"; did you mean "concurrency"?' },
    ]);
  });

  it('reports every problem, not only the first, in document order', () => {
    const text = valid.replace('brief: "{{ vars.brief }}"', 'brief: "{{ vars.breif }}"').replace('for_each: sheets', 'for_each: sheet');
    const found = problems(text);
    expect(found.map((p) => p.message)).toEqual([
      '{{ vars.breif }}: no var "breif"; did you mean "brief"?',
      'no step "sheet"; did you mean "sheets"?',
    ]);
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
    expect(loadManifestText(valid.replace('model: dop', 'model: /vendor/new-model'), 'm.yaml').manifest.steps.clips?.model).toBe(
      '/vendor/new-model',
    );
  });

  it('refuses a template that reads an unknown axis, proposing the nearest', () => {
    expect(problems(valid.replace('"{{ tier }}"', '"{{ tiers }}"'))[0]?.message).toBe(
      '{{ tiers }}: "tiers" is not an axis of this step, vars, env, run or upstream; did you mean "tier"?',
    );
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
    expect(problems(valid.replace('"{{ vars.brief }}"', '"{{ upstream.outputs }}"'))[0]?.message).toMatch(
      /upstream is only available in a for_each step/,
    );
  });

  it('refuses a dependency cycle', () => {
    const text = valid.replace('    model: character-sheet\n', '    model: character-sheet\n    needs: [clips]\n');
    expect(problems(text).map((p) => p.message)).toContainEqual(expect.stringMatching(/^dependency cycle: /));
  });

  it('refuses duplicate keys, custom tags and alias bombs as YAML errors', () => {
    expect(problems(valid.replace('name: demo', 'name: demo\nname: again'))[0]).toMatchObject({ line: 3 });
    expect(problems(valid.replace('name: demo', 'name: !!js/function demo'))).not.toHaveLength(0);
    const bomb = ['version: 1', 'name: bomb', 'a: &a [x, x, x, x, x, x, x, x, x, x]'];
    for (let i = 0; i < 8; i++)
      bomb.push(
        `${String.fromCharCode(98 + i)}: &${String.fromCharCode(98 + i)} [${Array(10)
          .fill(`*${String.fromCharCode(97 + i)}`)
          .join(', ')}]`,
      );
    bomb.push('steps: {}');
    const started = Date.now();
    expect(problems(bomb.join('\n'))[0]?.message).toMatch(/alias/i);
    expect(Date.now() - started).toBeLessThan(5_000); // a bound on a hang, not a speed claim
  });

  it('refuses a document that is not a mapping', () => {
    expect(problems('- a\n- b\n')[0]?.message).toMatch(/a manifest is a mapping/);
  });

  it('refuses replies on a step that is not an agent step', () => {
    expect(problems(valid.replace('    model: dop\n', '    model: dop\n    replies: ["yes"]\n'))[0]?.message).toBe(
      'replies apply to agent steps only',
    );
  });

  it('refuses a conversation on a step that is not an agent step', () => {
    expect(problems(valid.replace('    model: dop\n', '    model: dop\n    conversation: talk\n'))[0]?.message).toBe(
      'conversation applies to agent steps only',
    );
  });

  it('refuses an agent step without the message it sends, and accepts one with it', () => {
    const agentStep = (input: string) => `version: 1\nname: chat\nsteps:\n  ask:\n    model: agent\n    input: ${input}\n`;
    expect(problems(agentStep('{ media_ids: [] }'))[0]?.message).toBe('agent steps need input.content, the message to send');
    expect(() => loadManifestText(agentStep('{ content: "hello" }'), 'm.yaml')).not.toThrow();
  });
});

describe('recursive YAML aliases', () => {
  // The three forms of alias a review found accepted, each refused at the alias (not a crash, and not "valid").
  const forms: [string, string, string][] = [
    [
      'vars that contain themselves',
      'version: 1\nname: rec\nvars: &v {self: *v}\nsteps:\n  a:\n    model: character-sheet\n    input: {}\n',
      '3:17',
    ],
    [
      'a var list that contains itself',
      'version: 1\nname: rec\nvars:\n  mood: &m [x, *m]\nsteps:\n  a:\n    model: character-sheet\n    input: {}\n',
      '4:16',
    ],
    [
      'an input whose selection is the input',
      'version: 1\nname: rec\nsteps:\n  a:\n    model: character-sheet\n    input: &i {selection: *i}\n',
      '6:27',
    ],
  ];
  for (const [name, text, where] of forms) {
    it(`refuses ${name} at m.yaml:${where}`, () => {
      const found = problems(text);
      expect(found).toHaveLength(1);
      expect(`${found[0]?.line}:${found[0]?.col}`).toBe(where);
      expect(found[0]?.message).toMatch(/^the alias \*[vmi] is recursive/);
    });
  }

  it('still accepts an alias to an earlier node', () => {
    const loaded = loadManifestText(valid.replace('  brief: hello\n', '  brief: &b hello\n  again: *b\n'), 'm.yaml');
    expect(loaded.manifest.vars).toEqual({ brief: 'hello', again: 'hello' });
  });
});

describe('bounded error reporting', () => {
  const refusal = (text: string): ManifestError => {
    try {
      loadManifestText(text, 'm.yaml');
    } catch (error) {
      expect(error).toBeInstanceOf(ManifestError);
      return error as ManifestError;
    }
    throw new Error('expected the manifest to be refused');
  };
  const withStepKeys = (lines: readonly string[]): string =>
    `version: 1\nname: p\nsteps:\n  a:\n    model: character-sheet\n    input: {}\n${lines.map((l) => `    ${l}\n`).join('')}`;

  it('lists the first 50 of 10,000 unknown keys, the valid keys once, then how many more', () => {
    const error = refusal(withStepKeys(Array.from({ length: 10_000 }, (_, i) => `k${i}: 1`)));
    expect(error.total).toBe(10_000);
    expect(error.problems).toHaveLength(51);
    expect(error.problems[0]?.message).toMatch(/^unknown key "k0"; valid keys are model, input, /);
    expect(error.problems[1]?.message).toBe('unknown key "k1"');
    expect(error.problems[50]).toEqual({
      location: { file: 'm.yaml', line: 57, col: 5 },
      path: '',
      message: 'and 9950 more problems from here on, not listed',
    });
    expect(error.message).toMatch(/\(10000 problems; the first 50 listed below\)$/);
  });

  it('clips a 500 KB key wherever it is echoed', () => {
    const key = `concurrency${'x'.repeat(500_000)}`;
    const error = refusal(withStepKeys([`? ${key}`, '  : 1']));
    const text = [error.message, ...error.problems.map(formatProblem)].join('\n');
    expect(text.length).toBeLessThan(2_000);
    expect(error.problems[0]?.path).toBe(`steps.a.concurrencyxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…(500011 chars)`);
    expect(error.problems[0]?.message).toMatch(/^unknown key "concurrencyx+…\(500011 chars\)"; valid keys are /);
  });

  it('clips a long name read by a template', () => {
    const found = problems(valid.replace('"{{ vars.brief }}"', `"{{ vars.${'z'.repeat(10_000)} }}"`));
    expect(found.map((p) => p.message)).toEqual([`{{ vars.${'z'.repeat(43)}…(10005 chars) }}: no var "${'z'.repeat(48)}…(10000 chars)"`]);
  });

  it('orders a chain of 12,000 steps without overflowing the stack', () => {
    const lines = ['version: 1', 'name: chain', 'steps:', '  s0: {model: dop}'];
    for (let i = 1; i < 12_000; i++) lines.push(`  s${i}: {model: dop, needs: [s${i - 1}]}`);
    // Listed last first, so that ordering has to follow the whole chain down from s11999.
    const loaded = loadManifestText([...lines.slice(0, 3), ...lines.slice(3).reverse()].join('\n'), 'm.yaml');
    expect(loaded.order).toHaveLength(12_000);
    expect(loaded.order.slice(0, 3)).toEqual(['s0', 's1', 's2']);
    expect(loaded.order.at(-1)).toBe('s11999');
  });

  it('names a long dependency cycle by its first steps and how many more', () => {
    const lines = ['version: 1', 'name: ring', 'steps:'];
    for (let i = 0; i < 100; i++) lines.push(`  s${i}: {model: dop, input: {prompt: x}, needs: [s${(i + 1) % 100}]}`);
    expect(problems(lines.join('\n')).map((p) => p.message)).toEqual([
      'dependency cycle: s0 -> s1 -> s2 -> s3 -> s4 -> s5 -> ... 94 more -> s0',
    ]);
  });
});
