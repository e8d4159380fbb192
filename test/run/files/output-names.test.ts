import fc from 'fast-check';
import { join, resolve, sep } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isInside, MAX_STEM_BYTES, MAX_STEM_LENGTH, resolveInside, safeFileName } from '../../../src/run/files/output-names.js';

const RUN_DIR = resolve('/tmp/genpipe-run');
/** Letters, marks and digits of any script, and `._=,+-`: no separator, space, control or format character. */
const SAFE_NAME = /^[\p{L}\p{M}\p{N}._=,+-]+$/u;
const WINDOWS_DEVICE = /^(con|prn|aux|nul|com[0-9]|lpt[0-9])$/i;

/** Strings a hostile or careless manifest could produce, mixed with arbitrary ones. */
const hostileId = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 300 }),
  fc.string({ unit: 'grapheme', maxLength: 50 }),
  fc.constantFrom(
    '../../etc/passwd',
    '/abs',
    '/',
    '..',
    '.',
    '',
    'a/../../b',
    'C:\\Windows\\x',
    '\\\\server\\share',
    'nul\0byte',
    'CON',
    'con.txt',
    'LPT1',
    '-rf',
    '.bashrc',
    'x-0123456789ab',
  ),
  fc.integer({ min: 200, max: 12_000 }).map((n) => 'x'.repeat(n)),
  fc.array(fc.constantFrom('..', '/', '\0', '\\', '.', 'a', '猫', '\u202e', ' '), { maxLength: 40 }).map((parts) => parts.join('')),
);

describe('safeFileName', () => {
  it('keeps typical ids readable', () => {
    expect(safeFileName('sheets[tier=cats,seed=3]', 'png')).toMatch(/^sheets_tier=cats,seed=3-[0-9a-f]{12}\.png$/);
    expect(safeFileName('portrait', 'png')).toBe('portrait.png');
    expect(safeFileName('portrait', 'png', { index: 2 })).toBe('portrait+2.png');
    expect(safeFileName('', 'png')).toMatch(/^instance-[0-9a-f]{12}\.png$/);
  });

  it('maps any id to a safe, bounded name that stays inside the run directory (property)', () => {
    fc.assert(
      fc.property(hostileId, fc.option(fc.nat({ max: 1_000 }), { nil: undefined }), (id, index) => {
        const name = safeFileName(id, 'png', index === undefined ? {} : { index });
        expect(name).toMatch(SAFE_NAME);
        expect(name.length).toBeLessThanOrEqual(MAX_STEM_LENGTH + 5 + 5);
        expect(Buffer.byteLength(name)).toBeLessThanOrEqual(MAX_STEM_BYTES + 5 + 5);
        expect(name).toBe(name.normalize('NFC'));
        expect(name.startsWith('.')).toBe(false);
        expect(name.startsWith('-')).toBe(false);
        expect(WINDOWS_DEVICE.test(name.split('.')[0]!)).toBe(false);
        const full = resolveInside(RUN_DIR, `outputs/${name}`);
        expect(full).toBe(join(RUN_DIR, 'outputs', name));
        expect(full.startsWith(RUN_DIR + sep)).toBe(true);
      }),
      { numRuns: 2_000 },
    );
  });

  it('gives distinct ids distinct names (property)', () => {
    fc.assert(
      fc.property(fc.uniqueArray(hostileId, { minLength: 2, maxLength: 30 }), (ids) => {
        const names = ids.map((id) => safeFileName(id, 'png'));
        expect(new Set(names).size).toBe(ids.length);
      }),
      { numRuns: 500 },
    );
  });

  it('separates ids that read alike: case of sanitised characters, unicode, lone surrogates, long shared prefixes', () => {
    const groups = [
      ['a/b', 'a_b', 'a\\b', 'a?b', 'a[b]'],
      ['sheets[tier=猫]', 'sheets[tier=犬]'],
      ['\uD800', '\uD801', '\uFFFD'],
      ['y'.repeat(500) + '1', 'y'.repeat(500) + '2'],
      ['x-0123456789ab', 'x'],
    ];
    for (const ids of groups) expect(new Set(ids.map((id) => safeFileName(id, 'png'))).size).toBe(ids.length);
  });

  it('keeps non-ASCII letters, NFC-normalised, replacing only what a file name cannot safely hold', () => {
    expect(safeFileName('Zürich', 'png')).toBe('Zürich.png');
    expect(safeFileName('北京', 'png')).toBe('北京.png');
    expect(safeFileName('北京 Tea Set', 'png')).toMatch(/^北京_Tea_Set-[0-9a-f]{12}\.png$/);
    expect(safeFileName('Ελλάδα/Αθήνα', 'png')).toMatch(/^Ελλάδα_Αθήνα-[0-9a-f]{12}\.png$/);
    // A decomposed ü is written composed, and so differs from the id: the name gets the id's hash.
    expect(safeFileName('Zu\u0308rich', 'png')).toMatch(/^Zürich-[0-9a-f]{12}\.png$/);
    // Right-to-left override, emoji, path characters: replaced.
    expect(safeFileName('a\u202egnp.exe', 'png')).toMatch(/^a_gnp\.exe-[0-9a-f]{12}\.png$/);
    expect(safeFileName('cat🐱:1', 'png')).toMatch(/^cat_1-[0-9a-f]{12}\.png$/);
    // Bounded in bytes: 100 CJK characters are 300 bytes of UTF-8.
    const long = safeFileName('猫'.repeat(100), 'png');
    expect(Buffer.byteLength(long)).toBeLessThanOrEqual(MAX_STEM_BYTES + 4);
    expect(long).toMatch(/^猫+-[0-9a-f]{12}\.png$/);
  });

  it('is deterministic, so a resumed run picks the same names', () => {
    fc.assert(
      fc.property(hostileId, (id) => {
        expect(safeFileName(id, 'mp4')).toBe(safeFileName(id, 'mp4'));
      }),
    );
  });

  it('refuses extensions it would not write', () => {
    for (const ext of ['', 'PNG', '../png', 'p/ng', 'png\0', 'averyveryverylongext'])
      expect(() => safeFileName('a', ext)).toThrow(/file extension/);
    expect(() => safeFileName('a', 'png', { index: -1 })).toThrow(/index/);
  });
});

describe('resolveInside', () => {
  it('refuses paths that escape, are absolute, contain NUL or name the directory itself', () => {
    for (const path of ['../x', 'a/../../x', '/etc/passwd', 'C:\\x', '\\x', 'a\0b', '', '.', 'a/..']) {
      expect(() => resolveInside(RUN_DIR, path)).toThrow();
    }
  });

  it('never returns a path outside the directory, whatever the input (property)', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 100 }), (path) => {
        let full: string | undefined;
        try {
          full = resolveInside(RUN_DIR, path);
        } catch {
          return;
        }
        expect(full.startsWith(RUN_DIR + sep)).toBe(true);
        expect(isInside(RUN_DIR, full)).toBe(true);
      }),
      { numRuns: 2_000 },
    );
  });

  it('accepts nested relative paths', () => {
    expect(resolveInside(RUN_DIR, 'outputs/a.png')).toBe(join(RUN_DIR, 'outputs', 'a.png'));
    expect(resolveInside(RUN_DIR, 'outputs/./b/../a.png')).toBe(join(RUN_DIR, 'outputs', 'a.png'));
    expect(isInside(RUN_DIR, `${RUN_DIR}-sibling/x`)).toBe(false);
  });
});
