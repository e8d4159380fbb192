// copyText streams a report or a plan to stdout as bytes, whose writer redacts each chunk on its
// own (src/cli/io.ts): a registered secret must never be cut in two by a chunk's end, and a chunk
// is always whole characters (a writer without bytes decodes each one).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { copyText } from '../../src/util/copy-text.js';
import { redact, redactBytes, registerSecret, REDACTED } from '../../src/util/redact.js';
import { cleanTemps, tempDir } from '../run/runner-helpers.js';

afterAll(cleanTemps);

const dir = tempDir('genpipe-copy-text-');

/** Each chunk decoded on its own, as a writer of strings does. */
async function copied(path: string, transform: (chunk: Buffer) => Buffer = (c) => c): Promise<{ text: string; chunks: number }> {
  let text = '';
  let chunks = 0;
  await copyText(path, async (chunk) => {
    chunks++;
    text += transform(chunk).toString('utf8');
  });
  return { text, chunks };
}

const MB = 1024 * 1024;

describe('copyText', () => {
  it('hands over the whole file, in more than one chunk, byte for byte', async () => {
    const lines = Array.from({ length: 20_000 }, (_, n) => `{"line":${n},"text":"é ✓ ${'x'.repeat(n % 50)}"}`);
    const path = join(dir, 'lines.jsonl');
    const content = `${lines.join('\n')}\n{"last":"no newline"}`;
    writeFileSync(path, content);
    const { text, chunks } = await copied(path);
    expect(text).toBe(content);
    expect(chunks).toBeGreaterThan(1);
  });

  it('never cuts a registered secret at a chunk’s end: a writer redacting each chunk hides it', async () => {
    const secret = 'sk-live-0123456789abcdefghijklmnopqrstuvwxyz';
    registerSecret(secret);
    // The secret straddles the 1 MB read boundary, inside a line; then a second one, the bytes of
    // a non-ASCII secret, further on.
    const other = 'clé-secrète-ünïcode';
    registerSecret(other);
    const before = MB - 20;
    const path = join(dir, 'secret.txt');
    writeFileSync(path, `${'a'.repeat(before - 10)}\nline ${secret} end\nmore ${other}\n`);
    for (const writer of [(c: Buffer) => Buffer.from(redact(c.toString('utf8'))), redactBytes]) {
      const { text } = await copied(path, writer);
      expect(text).not.toContain(secret);
      expect(text).not.toContain(other);
      expect(text).toContain(`line ${REDACTED} end\nmore ${REDACTED}\n`);
    }
  });

  it('redactBytes hands back the very bytes when no secret is in them', () => {
    registerSecret('sk-live-bytes-0123456789');
    const clean = Buffer.from('{"a":"é ✓ nothing here"}\n');
    expect(redactBytes(clean)).toBe(clean);
    expect(redactBytes(Buffer.from('x sk-live-bytes-0123456789 y')).toString()).toBe(`x ${REDACTED} y`);
  });

  it('hands over a line longer than a megabyte in pieces, whole, each piece whole characters', async () => {
    const path = join(dir, 'long.txt');
    // Characters of 1, 2, 3 and 4 bytes: read boundaries fall inside some of them.
    const content = `${'yé✓😀'.repeat(MB / 2)}\nshort\n`;
    writeFileSync(path, content);
    const { text, chunks } = await copied(path);
    expect(text).toBe(content);
    expect(chunks).toBeGreaterThan(1);
  });
});
