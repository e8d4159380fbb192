/** readBody: a response body read through its events, with a size cap and backpressure. */
import { PassThrough, Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { readBody, readBodyBuffer } from '../../src/api/read-body.js';

const tooLarge = (): Error => new Error('too large');

function chunksOf(...parts: string[]): Readable {
  return Readable.from(
    parts.map((p) => Buffer.from(p)),
    { objectMode: false },
  );
}

describe('readBody', () => {
  it('hands over every chunk in order and resolves with the size', async () => {
    const seen: string[] = [];
    const size = await readBody(chunksOf('ab', 'cde', 'f'), { maxBytes: 10, tooLarge, onChunk: (c) => void seen.push(c.toString()) });
    expect(seen).toEqual(['ab', 'cde', 'f']);
    expect(size).toBe(6);
  });

  it('reads an empty body as size 0', async () => {
    expect(await readBodyBuffer(chunksOf(), 10, tooLarge)).toEqual(Buffer.alloc(0));
  });

  it('accepts a body of exactly maxBytes and refuses one byte more, destroying the body', async () => {
    expect((await readBodyBuffer(chunksOf('12345', '67890'), 10, tooLarge)).toString()).toBe('1234567890');
    const body = chunksOf('12345', '678901');
    await expect(readBodyBuffer(body, 10, tooLarge)).rejects.toThrow('too large');
    expect(body.destroyed).toBe(true);
  });

  it('delivers no chunk while the previous chunk’s promise is pending, and ends after the last one settles', async () => {
    const body = new PassThrough();
    const events: string[] = [];
    let release!: () => void;
    const done = readBody(body, {
      maxBytes: 100,
      tooLarge,
      onChunk: (c) => {
        events.push(`chunk ${c.toString()}`);
        if (c.toString() === 'a') return new Promise<void>((r) => (release = r));
        return undefined;
      },
    });
    body.write('a');
    await new Promise((r) => setTimeout(r, 10));
    body.end('b');
    await new Promise((r) => setTimeout(r, 20));
    expect(events).toEqual(['chunk a']);
    events.push('released');
    release();
    expect(await done).toBe(2);
    expect(events).toEqual(['chunk a', 'released', 'chunk b']);
  });

  it('ends with the error of a rejected chunk handler, or of a throwing one', async () => {
    await expect(
      readBody(chunksOf('a', 'b'), { maxBytes: 10, tooLarge, onChunk: () => Promise.reject(new Error('disk full')) }),
    ).rejects.toThrow('disk full');
    await expect(
      readBody(chunksOf('a'), {
        maxBytes: 10,
        tooLarge,
        onChunk: () => {
          throw new Error('bad chunk');
        },
      }),
    ).rejects.toThrow('bad chunk');
  });

  it('rejects with the stream’s error, and with a network-coded error when the body closes before its end', async () => {
    const failing = new PassThrough();
    const a = readBodyBuffer(failing, 10, tooLarge);
    failing.destroy(new Error('socket hang up'));
    await expect(a).rejects.toThrow('socket hang up');

    const cut = new PassThrough();
    const b = readBodyBuffer(cut, 10, tooLarge);
    cut.write('half');
    cut.destroy();
    await expect(b).rejects.toMatchObject({ code: 'UND_ERR_SOCKET', message: /ended early/ });
  });
});
