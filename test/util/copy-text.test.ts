// copyText streams a report or a plan to stdout, whose writer redacts each chunk on its own
// (src/cli/io.ts): a registered secret must never be cut in two by a chunk's end.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { copyText } from '../../src/util/copy-text.js';
import { redact, registerSecret, REDACTED } from '../../src/util/redact.js';
import { cleanTemps, tempDir } from '../run/runner-helpers.js';

afterAll(cleanTemps);

const dir = tempDir('genpipe-copy-text-');

async function copied(path: string, transform: (chunk: string) => string = (c) => c): Promise<{ text: string; chunks: number }> {
  let text = '';
  let chunks = 0;
  await copyText(path, async (chunk) => {
    chunks++;
    text += transform(chunk);
  });
  return { text, chunks };
}

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
    // The secret straddles the 256 KB read boundary, inside a line.
    const before = 256 * 1024 - 20;
    const path = join(dir, 'secret.txt');
    writeFileSync(path, `${'a'.repeat(before - 10)}\nline ${secret} end\nmore\n`);
    const { text } = await copied(path, redact);
    expect(text).not.toContain(secret);
    expect(text).toContain(`line ${REDACTED} end`);
  });

  it('hands over a line longer than a megabyte in pieces, whole', async () => {
    const path = join(dir, 'long.txt');
    const content = `${'y'.repeat(3 * 1024 * 1024)}\nshort\n`;
    writeFileSync(path, content);
    const { text, chunks } = await copied(path);
    expect(text).toBe(content);
    expect(chunks).toBeGreaterThan(1);
  });
});
