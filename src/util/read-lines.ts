/**
 * The lines of a UTF-8 text file, two ways. A line ends at `\n`; a last line without one is still
 * a line.
 * - linesOfFile reads synchronously, 16 KB at a time: for merging many sorted runs a line at a
 *   time, where an await per line (readline's iterator) cost more than the merge itself.
 * - streamLinesOfFile reads a megabyte at a time through the thread pool, so a long file (a run's
 *   spilled output rows) never holds the event loop, and skips empty lines.
 */
import { closeSync, createReadStream, openSync, readSync } from 'node:fs';
import { StringDecoder } from 'node:string_decoder';

/** The file is closed when the generator ends, however it ends. `start`: a line's first byte. */
export function* linesOfFile(path: string, start = 0): Generator<string> {
  const fd = openSync(path, 'r');
  try {
    const buffer = Buffer.allocUnsafe(1 << 14);
    const decoder = new StringDecoder('utf8');
    let rest = '';
    let position = start;
    // Bounded: each turn reads at least one byte, or ends.
    for (let read = readSync(fd, buffer, 0, buffer.length, position); read > 0; read = readSync(fd, buffer, 0, buffer.length, position)) {
      position += read;
      const text = rest + decoder.write(buffer.subarray(0, read));
      let start = 0;
      for (let end = text.indexOf('\n'); end !== -1; end = text.indexOf('\n', start)) {
        yield text.slice(start, end);
        start = end + 1;
      }
      rest = text.slice(start);
    }
    rest += decoder.end();
    if (rest.length > 0) yield rest;
  } finally {
    closeSync(fd);
  }
}

export async function* streamLinesOfFile(path: string): AsyncGenerator<string> {
  let rest = '';
  for await (const chunk of createReadStream(path, { encoding: 'utf8', highWaterMark: 1024 * 1024 })) {
    const lines = (rest + (chunk as string)).split('\n');
    rest = lines.pop() ?? '';
    for (const line of lines) if (line.length > 0) yield line;
  }
  if (rest.length > 0) yield rest;
}
