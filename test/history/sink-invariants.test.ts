// The sink's history invariants (sink-invariants.ts) on hand-made journals: what they accept (a
// run replacing its own object after journaling it, another run finding the same bytes) and what
// they refuse (a write over another run's object, a lost object, bytes no write put there).
import { describe, expect, it } from 'vitest';
import type { JournalRecord } from '../../src/run/journal/journal-records.js';
import { checkSinkInvariants } from './sink-invariants.js';

const A = 'a'.repeat(64);
const B = 'b'.repeat(64);
const uploaded = (key: string, sha256: string, at: number, skipped = false): JournalRecord => ({
  type: 'sink_uploaded',
  instance: 'i',
  output: 0,
  bucket: 'h',
  key,
  size: 1,
  sha256,
  etag: 'e',
  at,
  ...(skipped ? { skipped: true } : {}),
});
const overwrite = (key: string, sha256: string, at: number, reason: 'remade' | 'on_conflict' = 'remade'): JournalRecord => ({
  type: 'sink_overwrite',
  instance: 'i',
  output: 0,
  bucket: 'h',
  key,
  sha256,
  previousSize: 1,
  previousEtag: 'e',
  reason,
  at,
});

describe('the sink invariants of a history', () => {
  it('accept a run replacing its own object after journaling it, and another run finding the same bytes', () => {
    const runs = [
      { runDir: '/r/one', records: [uploaded('k', A, 1), overwrite('k', B, 2), uploaded('k', B, 3)] },
      { runDir: '/r/two', records: [uploaded('k', B, 4, true)] },
    ];
    expect(checkSinkInvariants(runs, new Map([['k', B]]))).toEqual([]);
    // Killed after its journaled replace and before its record: the new bytes are there.
    expect(checkSinkInvariants([{ runDir: '/r/one', records: [uploaded('k', A, 1), overwrite('k', B, 2)] }], new Map([['k', B]]))).toEqual(
      [],
    );
  });

  it("refuse a write over another run's object, a lost object, bytes no write put there, and on_conflict replaces", () => {
    const over = [
      { runDir: '/r/one', records: [uploaded('k', A, 1)] },
      { runDir: '/r/two', records: [uploaded('k', B, 2)] },
    ];
    expect(checkSinkInvariants(over, new Map([['k', B]]))).toEqual([
      'k: run two wrote over what one had put there, with no sink_overwrite journaled first',
    ]);
    const replaced = [
      { runDir: '/r/one', records: [uploaded('k', A, 1)] },
      { runDir: '/r/two', records: [overwrite('k', B, 2), uploaded('k', B, 3)] },
    ];
    expect(checkSinkInvariants(replaced, new Map([['k', B]]))).toEqual([
      "k: run two replaced run one's object (only its own may be replaced)",
    ]);
    expect(checkSinkInvariants([{ runDir: '/r/one', records: [uploaded('k', A, 1)] }], new Map())).toEqual([
      'k: journaled as uploaded by one, and not in the store (lost)',
    ]);
    expect(checkSinkInvariants([{ runDir: '/r/one', records: [uploaded('k', A, 1)] }], new Map([['k', B]]))).toEqual([
      'k: the store holds bytes bbbbbbbbbbbb, not what the last journaled write (one) put there (aaaaaaaaaaaa)',
    ]);
    expect(
      checkSinkInvariants(
        [{ runDir: '/r/one', records: [uploaded('k', A, 1), overwrite('k', B, 2, 'on_conflict'), uploaded('k', B, 3)] }],
        new Map([['k', B]]),
      ),
    ).toEqual(['run one replaced k as on_conflict: overwrite allows, which the manifest never sets']);
  });
});
