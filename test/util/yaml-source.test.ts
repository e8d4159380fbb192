// The shared YAML loader (manifests, config files, emulator fault and account files): every refusal
// is a YamlSyntaxError at file:line:col, never a stack overflow or a cyclic value.
import { describe, expect, it } from 'vitest';
import { loadYaml, YamlSyntaxError, type YamlProblem } from '../../src/util/yaml-source.js';

function refused(text: string, options: Parameters<typeof loadYaml>[2] = {}): YamlProblem[] {
  try {
    loadYaml(text, 'f.yaml', options);
  } catch (error) {
    expect(error).toBeInstanceOf(YamlSyntaxError);
    return [...(error as YamlSyntaxError).problems];
  }
  throw new Error('expected the document to be refused');
}

const at = (p: YamlProblem | undefined): string => `${p?.location.line}:${p?.location.col}`;

describe('recursive aliases', () => {
  // Each form, with the column of its alias: the refusal points at the alias, not the anchor.
  const forms: [string, string, string][] = [
    ['a mapping that contains itself', 'version: 1\nvars: &v {self: *v}\n', '2:17'],
    ['a list that contains itself', 'vars:\n  mood: &m [x, *m]\n', '2:16'],
    ['an input whose selection is the input', 'steps:\n  a:\n    input: &i {selection: *i}\n', '3:27'],
    ['a block mapping, two levels down', 'a: &a\n  b:\n    c: *a\n', '3:8'],
    ['a list item that is its own grandparent', 'a: &a\n  - - *a\n', '2:7'],
  ];
  for (const [name, text, where] of forms) {
    it(`refuses ${name} at the alias`, () => {
      const found = refused(text);
      expect(found).toHaveLength(1);
      expect(at(found[0])).toBe(where);
      expect(found[0]?.message).toMatch(/^the alias \*[a-z] is recursive/);
    });
  }

  it('accepts aliases to earlier, separate nodes, following an anchor redefined later', () => {
    const source = loadYaml('base: &b {x: 1}\ncopy: [*b, *b]\nlist: &b [2]\nagain: *b\n', 'f.yaml');
    expect(source.value).toEqual({ base: { x: 1 }, copy: [{ x: 1 }, { x: 1 }], list: [2], again: [2] });
  });

  it('takes an anchor on an enclosing node as the alias target, as YAML does, even when an earlier node has the name', () => {
    expect(refused('base: &b {x: 1}\nouter: &b [*b]\n').map(at)).toEqual(['2:12']);
  });

  it('refuses an alias with no anchor before it, at the alias', () => {
    const found = refused('a: *later\nb: &later 1\n');
    expect(at(found[0])).toBe('1:4');
    expect(found[0]?.message).toMatch(/no anchor &later before it/);
  });

  it('still refuses an alias bomb, quickly', () => {
    const lines = ['a: &a [x, x, x, x, x, x, x, x, x, x]'];
    for (let i = 0; i < 8; i++)
      lines.push(
        `${String.fromCharCode(98 + i)}: &${String.fromCharCode(98 + i)} [${Array(10)
          .fill(`*${String.fromCharCode(97 + i)}`)
          .join(', ')}]`,
      );
    expect(refused(lines.join('\n'))[0]?.message).toMatch(/alias/i);
  });
});

describe('keys', () => {
  it('refuses a key that is a list or a mapping, at the key', () => {
    expect(refused('a: 1\n[x, y]: 2\n').map(at)).toEqual(['2:1']);
    expect(refused('a: {{k: v}: 1}\n')[0]?.message).toBe('a mapping key must be a plain value, not a mapping or a list');
    expect(refused('l: &l [1]\nm: {*l : 1}\n').map(at)).toEqual(['2:5']);
  });

  it('refuses a nested list used as a key at the key, without flattening it into a string', () => {
    const key = (depth: number): string => `${'['.repeat(depth)}${']'.repeat(depth)}`;
    const found = refused(`steps: {a: {model: character-sheet, input: {}}, ${key(60)}: 1}\n`);
    expect(found).toEqual([
      { location: { file: 'f.yaml', line: 1, col: 49 }, message: 'a mapping key must be a plain value, not a mapping or a list' },
    ]);
    // 700 levels stop at the nesting cap, while parsing.
    expect(refused(`steps: {a: {model: character-sheet, input: {}}, ${key(700)}: 1}\n`)).toEqual([
      { location: { file: 'f.yaml', line: 1, col: 119 }, message: 'nested more than 64 levels deep' },
    ]);
  });

  it('refuses a duplicate key at its second occurrence, also when YAML would call them different', () => {
    expect(refused('a: 1\nb: 2\na: 3\n')).toEqual([
      { location: { file: 'f.yaml', line: 3, col: 1 }, message: 'the key "a" appears twice in this mapping' },
    ]);
    // 1 and "1" are different YAML keys but the same JavaScript property.
    expect(refused('{1: a, "1": b}').map(at)).toEqual(['1:8']);
  });

  it('finds a duplicate among 5,000 keys', () => {
    const keys = Array.from({ length: 5_000 }, (_, i) => `k${i}: ${i}`);
    expect(Object.keys(loadYaml(keys.join('\n'), 'f.yaml').value as object)).toHaveLength(5_000);
    expect(refused([...keys, 'k17: again'].join('\n')).map(at)).toEqual(['5001:1']);
  });
});

describe('nesting depth', () => {
  it('accepts 64 levels and refuses 65, at the collection that goes too deep', () => {
    const nested = (n: number): string => `${'['.repeat(n)}1${']'.repeat(n)}`;
    expect(loadYaml(nested(64), 'f.yaml').value).toBeDefined();
    const found = refused(nested(65));
    expect(found[0]?.message).toBe('nested more than 64 levels deep');
    expect(at(found[0])).toBe('1:65');
  });

  it('refuses block nesting past the cap too', () => {
    const lines = Array.from({ length: 70 }, (_, i) => `${' '.repeat(i * 2)}k${i}:`);
    expect(refused(`${lines.join('\n')} 1\n`)[0]?.message).toBe('nested more than 64 levels deep');
  });

  it('stops a document nested 300,000 levels deep while parsing it', () => {
    const started = performance.now();
    const found = refused(`a: ${'['.repeat(300_000)}${']'.repeat(300_000)}\n`);
    expect(found[0]?.message).toBe('nested more than 64 levels deep');
    expect(found[0]?.location.line).toBe(1);
    expect(performance.now() - started).toBeLessThan(5_000); // a bound on a hang, not a speed claim
  });
});

describe('locations', () => {
  it('locates keys and values, and a path that does not exist at its nearest ancestor', () => {
    const source = loadYaml('a:\n  b: [x, y]\n  c: 1\n', 'f.yaml');
    expect(source.locate(['a', 'b', 1])).toEqual({ file: 'f.yaml', line: 2, col: 10 });
    expect(source.locate(['a', 'c'], true)).toEqual({ file: 'f.yaml', line: 3, col: 3 });
    expect(source.locate(['a', 'nope'])).toEqual({ file: 'f.yaml', line: 2, col: 3 });
  });

  it('refuses a second document', () => {
    expect(refused('a: 1\n---\nb: 2\n')[0]?.message).toMatch(/more than one YAML document/);
  });
});
