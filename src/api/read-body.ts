/**
 * Reads an HTTP response body through its 'data' events. Every instance reads three bodies (the
 * submit answer, the status, the output file), and a body's async iterator costs several times
 * what its events do: at zero service latency that was a measurable share of a run's CPU.
 */
import type { Readable } from 'node:stream';

export interface ReadBodyOptions {
  /** Largest body accepted, in bytes; past it the body is destroyed and `tooLarge()` rejects. */
  maxBytes: number;
  tooLarge: () => Error;
  /**
   * Receives each chunk in order. When it returns a promise, no further chunk arrives until it
   * settles (backpressure, for writes to a file); a rejection ends the read with that error.
   */
  onChunk: (chunk: Buffer) => void | Promise<void>;
}

/** Resolves with the body's size once every chunk was handed over (and every `onChunk` settled). */
export function readBody(body: Readable, options: ReadBodyOptions): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    let size = 0;
    let settled = false;
    /** The last `onChunk` promise: the end waits for it. */
    let pending: Promise<void> | undefined;
    const cleanup = (): void => {
      body.off('data', onData);
      body.off('end', onEnd);
      body.off('error', fail);
      body.off('close', onClose);
    };
    function fail(error: unknown): void {
      if (settled) return;
      settled = true;
      cleanup();
      // Swallow what the destroyed body may still emit; the caller has its error.
      body.on('error', () => undefined);
      body.destroy();
      reject(error);
    }
    function onData(chunk: Buffer): void {
      if (settled) return;
      size += chunk.length;
      if (size > options.maxBytes) return fail(options.tooLarge());
      let result: void | Promise<void>;
      try {
        result = options.onChunk(chunk);
      } catch (error) {
        return fail(error);
      }
      if (result === undefined) return;
      body.pause();
      pending = result.then(
        () => {
          if (!settled) body.resume();
        },
        (error: unknown) => fail(error),
      );
    }
    function onEnd(): void {
      if (settled) return;
      const finish = (): void => {
        if (settled) return;
        settled = true;
        cleanup();
        resolve(size);
      };
      if (pending === undefined) finish();
      else void pending.then(finish);
    }
    function onClose(): void {
      // A close before the end is a body cut short (aborted, or the connection went away).
      if (!body.readableEnded) fail(Object.assign(new Error('the response body ended early'), { code: 'UND_ERR_SOCKET' }));
    }
    body.on('data', onData);
    body.once('end', onEnd);
    body.once('error', fail);
    body.once('close', onClose);
  });
}

/** Reads a whole body into one buffer, refusing one over `maxBytes`. */
export async function readBodyBuffer(body: Readable, maxBytes: number, tooLarge: () => Error): Promise<Buffer> {
  const chunks: Buffer[] = [];
  const size = await readBody(body, { maxBytes, tooLarge, onChunk: (chunk) => void chunks.push(chunk) });
  return chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size);
}
