// The external sort behind outputs.csv: lines `key<TAB>payload`, sorted in memory up to a chunk,
// in sorted runs on disk merged beyond it; equal keys keep their input order either way.
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { describe, expect, it } from 'vitest';
import { mergeRuns, seekRun, sortLines } from '../../src/util/external-sort.js';
import fc from 'fast-check';
import { naturalCompare } from '../../src/util/natural-compare.js';

async function sorted(lines: string[], chunk: number): Promise<string[]> {
  const out: string[] = [];
  for await (const line of sortLines(lines, naturalCompare, { chunk })) out.push(line);
  return out;
}

const input = ['b10\tfirst b10', 'a\t1', 'b2\tx', 'b10\tsecond b10', 'c\t', 'a\t2', 'b10\tthird b10', 'B3\ty'];
const expected = ['a\t1', 'a\t2', 'b2\tx', 'B3\ty', 'b10\tfirst b10', 'b10\tsecond b10', 'b10\tthird b10', 'c\t'];

describe('sortLines', () => {
  it('sorts in memory when the input fits one chunk, equal keys in input order', async () => {
    expect(await sorted(input, 100)).toEqual(expected);
  });

  it('gives the same order through runs on disk (chunks of 2 and 3), equal keys in input order across runs, and removes the runs', async () => {
    const before = (await readdir(tmpdir())).filter((n) => n.startsWith('genpipe-sort-')).length;
    expect(await sorted(input, 2)).toEqual(expected);
    expect(await sorted(input, 3)).toEqual(expected);
    expect((await readdir(tmpdir())).filter((n) => n.startsWith('genpipe-sort-')).length).toBe(before);
  });

  it('sorts by the decoded key when told how to decode it', async () => {
    // JSON keys: "\u0064" is d, and sorts after "c" once decoded (before it as raw text).
    const lines = ['"\\u0064"\td', '"c"\tc'];
    for (const chunk of [1, 10]) {
      const out: string[] = [];
      for await (const line of sortLines(lines, naturalCompare, { chunk, decode: (raw) => JSON.parse(raw) as string })) out.push(line);
      expect(out).toEqual(['"c"\tc', '"\\u0064"\td']);
    }
  });

  it('merges more runs than its fan-in in passes, equal keys still in run order', () => {
    const dir = mkdtempSync(join(tmpdir(), 'genpipe-merge-'));
    try {
      // Seven runs, each sorted; key k appears in every run, tagged with its run.
      const runs = Array.from({ length: 7 }, (_, r) => {
        const path = join(dir, `run-${r}.txt`);
        writeFileSync(
          path,
          [`a${r}\tonly ${r}`, `k\trun ${r}`, `z\trun ${r}`]
            .sort()
            .map((l) => `${l}\n`)
            .join(''),
        );
        return path;
      });
      const merged = (fanIn: number): string[] =>
        [
          ...mergeRuns(
            runs,
            (a, b) => (a < b ? -1 : a > b ? 1 : 0),
            (raw) => raw,
            { fanIn },
          ),
        ].map((l) => l.line);
      const once = merged(100);
      expect(once.filter((l) => l.startsWith('k\t'))).toEqual(Array.from({ length: 7 }, (_, r) => `k\trun ${r}`));
      expect(merged(2)).toEqual(once);
      // Fan-in 2 over seven runs: four runs after a first pass, two after a second, then the merge.
      expect(
        readdirSync(dir)
          .filter((n) => n.includes('.pass-'))
          .sort(),
      ).toEqual(['run-0.txt.pass-0', 'run-0.txt.pass-0.pass-1', 'run-2.txt.pass-0', 'run-4.txt.pass-0', 'run-4.txt.pass-0.pass-1']);
      expect(merged(3)).toEqual(once);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('seekRun finds where the first line with a key at or after a given one starts, as a scan does (property)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'genpipe-seek-'));
    const byUnits = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);
    try {
      let n = 0;
      fc.assert(
        fc.property(
          fc.array(
            fc.tuple(fc.string({ minLength: 1, maxLength: 6, unit: fc.constantFrom('a', 'b', 'c', 'é', '\u{1F600}') }), fc.nat(9000)),
            { maxLength: 400 },
          ),
          fc.string({ maxLength: 6, unit: fc.constantFrom('a', 'b', 'c', 'é') }),
          (entries, target) => {
            // Payloads up to 9,000 bytes: lines longer than the 4 KB the search reads at a time.
            const lines = entries
              .map(([key, pad]) => `${JSON.stringify(key)}\t${'x'.repeat(pad)}`)
              .sort((a, b) => byUnits(JSON.parse(a.split('\t')[0] as string) as string, JSON.parse(b.split('\t')[0] as string) as string));
            const path = join(dir, `run-${n++}.txt`);
            writeFileSync(path, lines.map((l) => `${l}\n`).join(''));
            let expected = 0;
            for (const line of lines) {
              if ((JSON.parse(line.split('\t')[0] as string) as string) >= target) break;
              expected += Buffer.byteLength(line) + 1;
            }
            expect(seekRun(path, target, byUnits, (raw) => JSON.parse(raw) as string)).toBe(expected);
            const all = [...mergeRuns([path], byUnits, (raw) => JSON.parse(raw) as string)].filter((l) => l.key >= target);
            expect([...mergeRuns([path], byUnits, (raw) => JSON.parse(raw) as string, { from: target })]).toEqual(all);
          },
        ),
        { numRuns: 150 },
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
