import { describe, expect, it } from 'vitest';
import { compileTemplate, parsePath, TemplateError } from '../../src/manifest/template.js';

describe('templates', () => {
  it('a template that is a single expression keeps its type', () => {
    const t = compileTemplate({ seed: '{{ seed }}', flag: '{{flag}}', list: '{{ vars.list }}', none: '{{ vars.none }}' });
    expect(t.render({ seed: 3, flag: true, vars: { list: [1, 2], none: null } })).toEqual({
      seed: 3,
      flag: true,
      list: [1, 2],
      none: null,
    });
  });

  it('an expression inside text is interpolated as text', () => {
    expect(compileTemplate('seed {{ seed }} of {{ row.name }}').render({ seed: 3, row: { name: 'Ann' } })).toBe('seed 3 of Ann');
    expect(compileTemplate('x={{ v }}').render({ v: { a: 1 } })).toBe('x={"a":1}');
  });

  it('reads nested paths, indexes and quoted keys', () => {
    const scope = { upstream: { outputs: { images: [{ url: 'https://cdn/a.png' }] } }, vars: { 'my key': 'v' } };
    expect(compileTemplate('{{ upstream.outputs.images[0].url }}').render(scope)).toBe('https://cdn/a.png');
    expect(compileTemplate('{{ vars["my key"] }}').render(scope)).toBe('v');
    expect(parsePath('a.b[2]["c d"]')).toEqual(['a', 'b', 2, 'c d']);
  });

  it('values are data, never re-read as templates', () => {
    const row = { prompt: '{{ env.SECRET }}' };
    expect(compileTemplate('{{ row.prompt }}').render({ row, env: { SECRET: 's3cr3t' } })).toBe('{{ env.SECRET }}');
    expect(compileTemplate('say {{ row.prompt }}').render({ row, env: { SECRET: 's3cr3t' } })).toBe('say {{ env.SECRET }}');
  });

  it('holds no code: operators, calls and computed access are refused', () => {
    for (const bad of ['{{ a + 1 }}', '{{ f() }}', '{{ a[b] }}', '{{ constructor.constructor("x")() }}', '{{ }}', '{{ 1a }}']) {
      expect(() => compileTemplate(bad), bad).toThrow(TemplateError);
    }
  });

  it('does not walk into inherited properties', () => {
    expect(() => compileTemplate('{{ row.constructor }}').render({ row: {} })).toThrow(/has no value here/);
    expect(() => compileTemplate('{{ row.__proto__ }}').render({ row: {} })).toThrow(/has no value here/);
  });

  it('a missing value is an error that names the expression and where it stands', () => {
    try {
      compileTemplate({ a: ['{{ row.missing }}'] }).render({ row: {} });
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(TemplateError);
      expect((error as TemplateError).message).toBe('{{ row.missing }} has no value here');
      expect((error as TemplateError).at).toEqual(['a', 0]);
    }
  });

  it('refuses an unclosed expression', () => {
    expect(() => compileTemplate('{{ seed')).toThrow(/without its/);
  });

  it('renders fresh objects, so one instance cannot change another', () => {
    const t = compileTemplate({ fixed: { list: [1] } });
    const a = t.render({}) as { fixed: { list: number[] } };
    a.fixed.list.push(2);
    expect(t.render({})).toEqual({ fixed: { list: [1] } });
  });
});
