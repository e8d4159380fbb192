import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ByteSink } from '../../src/util/byte-sink.js';

describe('ByteSink', () => {
  it('writes every piece in order: small ones through the buffer, one larger than the buffer at once, multi-byte text whole', () => {
    const path = join(mkdtempSync(join(tmpdir(), 'genpipe-sink-')), 'out.txt');
    const sink = new ByteSink(path);
    const pieces = [
      ...Array.from({ length: 5000 }, (_, i) => `line ${i} 猫é\n`),
      '🐈'.repeat(600_000),
      ...Array.from({ length: 3000 }, (_, i) => `${'x'.repeat(i % 700)}\n`),
    ];
    for (const piece of pieces) sink.add(piece);
    sink.close();
    sink.close(); // a second close does nothing
    expect(readFileSync(path, 'utf8')).toBe(pieces.join(''));
    expect(() => sink.add('late')).toThrow(/closed/);
    expect(readFileSync(path, 'utf8')).toBe(pieces.join(''));
  });

  it("appendFile appends a file's bytes after what was added, then goes on; copies into several sinks at once keep each its own bytes", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'genpipe-sink-'));
    // Over a megabyte each (several reads), different bytes in each.
    const middles = ['é猫', 'ab✓', 'z😀'].map((unit, i) => `${unit.repeat(300_000 + i * 1_000)}\n`);
    const parts = middles.map((middle, i) => {
      const part = new ByteSink(join(dir, `part${i}.txt`));
      part.add(middle);
      part.close();
      return part.path;
    });
    const wholes = parts.map((_, i) => new ByteSink(join(dir, `whole${i}.txt`)));
    for (const [i, whole] of wholes.entries()) whole.add(`head ${i}\n`);
    await Promise.all(wholes.map((whole, i) => whole.appendFile(parts[i] as string)));
    for (const [i, whole] of wholes.entries()) {
      whole.add(`tail ${i}\n`);
      whole.close();
      expect(readFileSync(whole.path, 'utf8')).toBe(`head ${i}\n${middles[i]}tail ${i}\n`);
    }
  });
});
