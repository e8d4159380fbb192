/**
 * A file written from many small strings, each encoded into a 1 MB buffer as it comes and the
 * buffer written (synchronously) when full. Joining the strings instead kept a megabyte of small
 * pieces alive until each write: they outlived young garbage collections, and on files of millions
 * of lines (a plan --json spool, a report) garbage collection took a third of the time.
 */
import { closeSync, openSync, write, writeSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { redactEveryForm } from './redact.js';

/** fs.write at the file's position, through the thread pool: the bytes written. */
const writeAsync = (fd: number, buffer: Buffer, offset: number, length: number): Promise<number> =>
  new Promise((resolve, reject) => write(fd, buffer, offset, length, null, (error, written) => (error ? reject(error) : resolve(written))));

const SIZE = 1 << 20;

export class ByteSink {
  readonly #buffer = Buffer.allocUnsafe(SIZE);
  #used = 0;
  #fd: number | undefined;

  readonly #redact: boolean;

  /**
   * Creates (or truncates) the file at `path`. With `redact`, each added string goes through
   * redactEveryForm (a file a person reads: a report); a secret is never split across two adds,
   * each of which is a whole field or line.
   */
  constructor(
    readonly path: string,
    options: { redact?: boolean } = {},
  ) {
    this.#fd = openSync(path, 'w');
    this.#redact = options.redact === true;
  }

  add(piece: string): void {
    if (this.#fd === undefined) throw new Error(`${this.path} is closed`);
    const text = this.#redact ? redactEveryForm(piece) : piece;
    // A UTF-16 code unit takes at most 3 bytes of UTF-8.
    if (text.length * 3 > SIZE - this.#used) this.flush();
    if (text.length * 3 > SIZE) this.#write(Buffer.from(text), Buffer.byteLength(text));
    else this.#used += this.#buffer.write(text, this.#used);
  }

  /**
   * Appends the bytes of the file at `path` as they are (no decoding), after what was added, a
   * megabyte at a time through the thread pool: copies into several sinks at once run on several
   * threads (the kernel's copying of hundreds of megabytes is most of their cost). Add nothing to
   * this sink until it resolves.
   */
  async appendFile(path: string): Promise<void> {
    this.flush();
    const fd = this.#fd;
    if (fd === undefined) throw new Error(`${this.path} is closed`);
    const source = await open(path, 'r');
    try {
      const buffer = Buffer.allocUnsafe(SIZE);
      // Bounded: each turn reads at least one byte, or ends.
      for (
        let { bytesRead } = await source.read(buffer, 0, SIZE, null);
        bytesRead > 0;
        { bytesRead } = await source.read(buffer, 0, SIZE, null)
      ) {
        for (let at = 0; at < bytesRead;) at += await writeAsync(fd, buffer, at, bytesRead - at);
      }
    } finally {
      await source.close();
    }
  }

  /** Writes what is buffered. */
  flush(): void {
    this.#write(this.#buffer, this.#used);
    this.#used = 0;
  }

  /** Flushes and closes; a second close does nothing. */
  close(): void {
    const fd = this.#fd;
    if (fd === undefined) return;
    try {
      this.flush();
    } finally {
      this.#fd = undefined;
      closeSync(fd);
    }
  }

  #write(bytes: Buffer, length: number): void {
    if (this.#fd === undefined) throw new Error(`${this.path} is closed`);
    for (let at = 0; at < length;) at += writeSync(this.#fd, bytes, at, length - at);
  }
}
