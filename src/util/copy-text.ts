import { closeSync, openSync, readSync } from 'node:fs';

/** Bytes read at a time. */
const READ_BYTES = 1 << 20;
/** A line longer than this is handed over in pieces even without its newline. */
const MAX_CARRY = 1 << 20;
const NEWLINE = 0x0a;

/**
 * Streams a UTF-8 text file into `write` as bytes, in chunks of whole lines. Whole lines, because
 * the writer redacts each chunk on its own (io.ts): a registered secret, which holds no newline, is
 * never cut in two by a chunk's end. Only a line over a megabyte is cut, and then between two
 * characters, so that each chunk is text on its own. Bytes, not strings: printing a 300 MB report
 * spent half its time decoding it into strings and encoding them back.
 *
 * The file is read synchronously, a megabyte at a time (from the page cache: it was just written),
 * and each chunk is a buffer of its own, since `write` may keep it until the pipe drains.
 */
export async function copyText(path: string, write: (chunk: Buffer) => Promise<unknown>): Promise<void> {
  const fd = openSync(path, 'r');
  try {
    let carry: Buffer | undefined;
    // Bounded: each turn reads at least one byte, or ends.
    for (;;) {
      const buffer = Buffer.allocUnsafe(READ_BYTES);
      const read = readSync(fd, buffer, 0, READ_BYTES, null);
      if (read === 0) break;
      const bytes = carry === undefined ? buffer.subarray(0, read) : Buffer.concat([carry, buffer.subarray(0, read)]);
      const cut = bytes.lastIndexOf(NEWLINE) + 1;
      if (cut === 0 && bytes.length <= MAX_CARRY) {
        carry = bytes;
        continue;
      }
      const end = cut === 0 ? wholeCharacters(bytes) : cut;
      carry = end < bytes.length ? bytes.subarray(end) : undefined;
      await write(bytes.subarray(0, end));
    }
    if (carry !== undefined && carry.length > 0) await write(carry);
  } finally {
    closeSync(fd);
  }
}

/** The length of `bytes` without a UTF-8 character cut off at its end (whole characters only). */
function wholeCharacters(bytes: Buffer): number {
  let start = bytes.length - 1;
  // Bounded: a UTF-8 character has at most 3 continuation bytes.
  while (start > 0 && bytes.length - start < 4 && ((bytes[start] as number) & 0xc0) === 0x80) start--;
  const lead = bytes[start] as number;
  const length = lead < 0x80 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
  return start + length <= bytes.length ? bytes.length : start;
}
