// checkManifestText, so that validate reports in one pass: every problem the loader sees, and the
// manifest without its broken steps, so that the rest can still be planned and checked.
import { describe, expect, it } from 'vitest';
import { checkManifestText, loadManifestText } from '../../src/manifest/load.js';
import { ManifestError } from '../../src/manifest/errors.js';

const long = `s${'x'.repeat(60)}`;
const text = `version: 1
name: p
steps:
  a:
    model: character-sheet
    retries: -1
  follows-a:
    model: character-sheet
    for_each: a
  needs-a:
    model: character-sheet
    needs: [a]
  ${long}:
    model: character-sheet
    input: { brief: "{{ vars.nope }}" }
  ok:
    model: character-sheet
`;

describe('checkManifestText', () => {
  it('lists schema and reference problems together, and keeps only the steps that can be planned', () => {
    const check = checkManifestText(text, 'm.yaml');
    expect(check.problems.map((p) => [p.location.line, p.code])).toEqual([
      [6, 'schema'],
      [15, 'reference'],
    ]);
    // a failed the schema, follows-a runs for_each over it, the long-named step reads an unknown var.
    expect(check.loaded?.order).toEqual(['needs-a', 'ok']);
    expect(Object.keys(check.loaded?.manifest.steps ?? {})).toEqual(['needs-a', 'ok']);
  });

  it('loadManifestText refuses the same manifest with every one of those problems', () => {
    const error = (() => {
      try {
        loadManifestText(text, 'm.yaml');
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(error).toBeInstanceOf(ManifestError);
    expect((error as ManifestError).total).toBe(2);
  });

  it('has nothing to plan after a problem outside the steps', () => {
    const check = checkManifestText('version: 2\nname: p\nsteps:\n  a:\n    model: character-sheet\n', 'm.yaml');
    expect(check.problems).toHaveLength(1);
    expect(check.loaded).toBeUndefined();
  });
});
