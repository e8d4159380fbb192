// A progress line fits the terminal (report/progress.ts barLine, spendLine, wrapWords): at any
// width from 60 columns up, a line is at most columns - 1 long and always has its counts; the bar
// takes what room is left, up to 40, and shrinks, then goes, before the step's name is cut or the
// ETA is left out; long text wraps at spaces.
import { describe, expect, it } from 'vitest';
import { barLine, spendLine, wrapWords, type BarParts } from '../../src/report/progress.js';

const parts: BarParts = { step: 'character-sheets-for-campaign', done: 120, total: 240, failed: 3, inFlight: 20, eta: '2m10s' };
const COUNTS = /120\/240 \| +3 failed \| +20 in flight/;
const barOf = (line: string): string => /\[([#.]*)\]/.exec(line)?.[1] ?? '';

describe('a bar line', () => {
  it('is at most columns - 1 long and has its counts at every width from 60 to 200', () => {
    for (let columns = 60; columns <= 200; columns++) {
      const line = barLine(columns, parts, { stepWidth: parts.step.length, digits: 3 });
      expect(line.length, `${columns}: ${line}`).toBeLessThan(columns);
      expect(line, `${columns}`).toMatch(COUNTS);
    }
  });

  it('gives the room to the bar, up to 40 wide, half filled at half done', () => {
    const wide = barLine(200, parts);
    expect(wide).toBe(
      `character-sheets-for-campaign [${'#'.repeat(20)}${'.'.repeat(20)}] 120/240 |   3 failed |  20 in flight | ETA 2m10s`,
    );
    // Narrower: the same line with a narrower bar, as wide as the room left.
    const at100 = barLine(100, parts);
    expect(barOf(at100).length).toBe(40 - (wide.length - 99));
    expect(at100.length).toBe(99);
    expect(at100.replace(/\[[#.]+\]/, '')).toBe(wide.replace(/\[[#.]+\]/, ''));
  });

  it('without room for a bar of 5: no bar, then the name cut to 12, then no ETA, then the name cut further', () => {
    expect(barLine(82, parts)).toBe('character-sheets-for-campaign 120/240 |   3 failed |  20 in flight | ETA 2m10s');
    expect(barLine(70, parts)).toBe('character-s… 120/240 |   3 failed |  20 in flight | ETA 2m10s');
    expect(barLine(60, parts)).toBe('character-s… 120/240 |   3 failed |  20 in flight');
    const long = { ...parts, done: 120_000, total: 240_000, failed: 3_000, inFlight: 200 };
    expect(barLine(60, long)).toBe('character… 120000/240000 |   3000 failed |    200 in flight');
  });

  it('lines up with the other steps: padded to the widest name and the largest count', () => {
    const layout = { stepWidth: 15, digits: 3 };
    const a = barLine(100, { step: 'campaign-sheets', done: 120, total: 240, failed: 3, inFlight: 20, eta: '2m10s' }, layout);
    const b = barLine(100, { step: 'cats', done: 1, total: 6, failed: 0, inFlight: 2, eta: '--' }, layout);
    expect(barOf(a).length).toBe(barOf(b).length);
    expect(a.indexOf('[')).toBe(b.indexOf('['));
    expect(a.indexOf('failed')).toBe(b.indexOf('failed'));
  });

  it('the spend line fits too', () => {
    expect(spendLine(80, 'spent US$4.15 of US$15.00')).toBe('spent US$4.15 of US$15.00');
    expect(spendLine(20, 'spent US$4.15 of US$15.00').length).toBe(19);
  });
});

describe('wrapped text', () => {
  const summary =
    'campaign 20261202T024116Z-f350: failed; 13 completed, 1 failed, 0 nsfw, 0 canceled; spent US$0.65; 3.4 s; /home/team/runs/campaign/20261202T024116Z-f350';

  it('breaks at spaces into lines of at most columns - 1, every word whole', () => {
    for (const columns of [60, 80, 120]) {
      const lines = wrapWords(summary, columns).split('\n');
      for (const line of lines) expect(line.length).toBeLessThan(columns);
      expect(lines.join(' ')).toBe(summary);
    }
    expect(wrapWords(summary, 80).split('\n')).toEqual([
      'campaign 20261202T024116Z-f350: failed; 13 completed, 1 failed, 0 nsfw, 0',
      'canceled; spent US$0.65; 3.4 s; /home/team/runs/campaign/20261202T024116Z-f350',
    ]);
  });

  it('splits a word longer than a line after a slash, and keeps the lines of text that has several', () => {
    const path = `/runs/${'a'.repeat(40)}/${'b'.repeat(30)}`;
    expect(wrapWords(`at ${path}`, 60).split('\n')).toEqual(['at', `/runs/${'a'.repeat(40)}/`, 'b'.repeat(30)]);
    expect(wrapWords('one\ntwo three', 60)).toBe('one\ntwo three');
  });
});
