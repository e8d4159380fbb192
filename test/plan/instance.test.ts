/**
 * Canonical inputs and keys are part of what a run stores: a journal written by one version of
 * genpipe is resumed by the next, so the text and the keys must not drift when their code is made
 * faster. The expected keys are recomputed here from their definition with incremental hashes.
 */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { canonicalJson, idempotencyKey, PlanFingerprint, runIdempotencyKey } from '../../src/plan/instance.js';

const sha256 = (...parts: string[]): string => {
  const h = createHash('sha256');
  parts.forEach((p, i) => h.update(i > 0 ? `\u0000${p}` : p));
  return h.digest('hex');
};

describe('canonicalJson', () => {
  it('sorts keys at every level, drops undefined fields and writes undefined array items as null', () => {
    const value = { b: 1, a: { d: [3, undefined, { z: 'é', y: null }], c: undefined }, é: true, '': 'empty' };
    expect(canonicalJson(value)).toBe('{"":"empty","a":{"d":[3,null,{"y":null,"z":"é"}]},"b":1,"é":true}');
  });

  it('gives equal text for equal inputs whatever their key order, and JSON that parses back to the input', () => {
    const a = { tier: 'cats', seed: 3, selection: { hair: ['x', 'y'], eyes: 'z' } };
    const b = { selection: { eyes: 'z', hair: ['x', 'y'] }, seed: 3, tier: 'cats' };
    expect(canonicalJson(a)).toBe(canonicalJson(b));
    expect(JSON.parse(canonicalJson(a))).toEqual(a);
  });

  it('keeps every key when two key lists read alike joined (a key holding the NUL it remembers orders by)', () => {
    expect(canonicalJson({ a: 1, b: 2 })).toBe('{"a":1,"b":2}');
    expect(canonicalJson({ 'a\u0000b': 3 })).toBe('{"a\\u0000b":3}');
    expect(canonicalJson({ 'a\u0000b': 1, c: 2 })).toBe('{"a\\u0000b":1,"c":2}');
    expect(canonicalJson({ a: 1, 'b\u0000c': 2 })).toBe('{"a":1,"b\\u0000c":2}');
  });

  it('writes scalars as JSON does, and empty containers', () => {
    expect([null, 0, -1.5, 'a"b', true, [], {}].map(canonicalJson)).toEqual(['null', '0', '-1.5', '"a\\"b"', 'true', '[]', '{}']);
  });
});

describe('keys', () => {
  it('idempotencyKey is gp1- and the first 40 hex digits of sha256(pipeline NUL id NUL canonical input)', () => {
    const canonical = canonicalJson({ tier: 'cats', seed: 1, brief: 'Ünïcode' });
    expect(idempotencyKey('million', 'sheets[seed=1]', canonical)).toBe(
      `gp1-${sha256('million', 'sheets[seed=1]', canonical).slice(0, 40)}`,
    );
    expect(idempotencyKey('million', 'sheets[seed=2]', canonical)).not.toBe(idempotencyKey('million', 'sheets[seed=1]', canonical));
  });

  it('runIdempotencyKey is gp2- and the first 40 hex digits of sha256(plan key NUL run id NUL attempt)', () => {
    expect(runIdempotencyKey('gp1-abc', 'run-1', 2)).toBe(`gp2-${sha256('gp1-abc', 'run-1', '2').slice(0, 40)}`);
    expect(runIdempotencyKey('gp1-abc', 'run-1', 3)).not.toBe(runIdempotencyKey('gp1-abc', 'run-1', 2));
  });

  it('the plan fingerprint covers every id and input in order', () => {
    const fp = (pairs: [string, string][]): string => {
      const f = new PlanFingerprint({ name: 'p' });
      for (const [id, input] of pairs) f.add(id, input);
      return f.digest();
    };
    expect(
      fp([
        ['a', '{}'],
        ['b', '{}'],
      ]),
    ).toBe(
      fp([
        ['a', '{}'],
        ['b', '{}'],
      ]),
    );
    expect(
      fp([
        ['a', '{}'],
        ['b', '{}'],
      ]),
    ).not.toBe(
      fp([
        ['b', '{}'],
        ['a', '{}'],
      ]),
    );
    expect(fp([['a', '{}']])).not.toBe(fp([['a', '{"x":1}']]));
  });
});
