import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ByteSink } from '../../src/util/byte-sink.js';

describe('ByteSink', () => {
  it('writes every piece in order: small ones through the buffer, one larger than the buffer at once, multi-byte text whole', () => {
    const path = join(mkdtempSync(join(tmpdir(), 'genpipe-sink-')), 'out.txt');
    const sink = new ByteSink(path);
    const pieces = [...Array.from({ length: 5000 }, (_, i) => `line ${i} 猫é\n`), '🐈'.repeat(600_000), ...Array.from({ length: 3000 }, (_, i) => `${'x'.repeat(i % 700)}\n`)];
    for (const piece of pieces) sink.add(piece);
    sink.close();
    sink.close(); // a second close does nothing
    expect(readFileSync(path, 'utf8')).toBe(pieces.join(''));
    expect(() => sink.add('late')).toThrow(/closed/);
    expect(readFileSync(path, 'utf8')).toBe(pieces.join(''));
  });

  it('addFile appends a file\'s bytes after what was added, then goes on', () => {
    const dir = mkdtempSync(join(tmpdir(), 'genpipe-sink-'));
    const part = new ByteSink(join(dir, 'part.txt'));
    const middle = `${'é猫'.repeat(700_000)}\n`;
    part.add(middle);
    part.close();
    const whole = new ByteSink(join(dir, 'whole.txt'));
    whole.add('head\n');
    whole.addFile(part.path);
    whole.add('tail\n');
    whole.close();
    expect(readFileSync(whole.path, 'utf8')).toBe(`head\n${middle}tail\n`);
  });
});
