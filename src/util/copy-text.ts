import { createReadStream } from 'node:fs';

/** A line longer than this is handed over in pieces even without its newline. */
const MAX_CARRY = 1 << 20;

/**
 * Streams a UTF-8 text file into `write`, in chunks of whole lines (a character is never split).
 * Whole lines, because the writer redacts each chunk on its own (io.ts): a registered secret, which
 * holds no newline, is never cut in two by a chunk's end. Only a line over a megabyte is cut.
 */
export async function copyText(path: string, write: (chunk: string) => Promise<unknown>): Promise<void> {
  const stream = createReadStream(path, { encoding: 'utf8', highWaterMark: 256 * 1024 });
  let carry = '';
  for await (const chunk of stream) {
    const text = carry + (chunk as string);
    const cut = text.lastIndexOf('\n') + 1;
    if (cut === 0 && text.length <= MAX_CARRY) {
      carry = text;
      continue;
    }
    const end = cut === 0 ? text.length : cut;
    carry = text.slice(end);
    await write(text.slice(0, end));
  }
  if (carry.length > 0) await write(carry);
}
