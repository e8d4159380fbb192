/**
 * The lines of a UTF-8 text file, read synchronously 64 KB at a time: for merging many sorted runs
 * a line at a time, where an await per line (readline's iterator) cost more than the merge itself.
 * A line ends at `\n`; a last line without one is still a line. The file is closed when the
 * generator ends, however it ends.
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { StringDecoder } from 'node:string_decoder';

export function* linesOfFile(path: string): Generator<string> {
  const fd = openSync(path, 'r');
  try {
    const buffer = Buffer.allocUnsafe(1 << 16);
    const decoder = new StringDecoder('utf8');
    let rest = '';
    // Bounded: each turn reads at least one byte, or ends.
    for (let read = readSync(fd, buffer); read > 0; read = readSync(fd, buffer)) {
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
