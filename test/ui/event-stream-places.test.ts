// A stream's place in `genpipe ui`'s cap is freed on every way it ends, on a real node:http server
// on loopback: a page gone while its route was still reading takes no place at all, a route whose
// subscription threw gives its place back, and a page that goes frees its place. Without this, a
// few tabs closed at the wrong moment would fill the cap and every page would stop following.
import { createServer, get, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { EventStreams } from '../../src/ui/event-stream.js';

let server: Server | undefined;

afterEach(async () => {
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = undefined;
});

/** A server whose every request is handed to `route`; resolves with its address. */
async function serve(route: (res: ServerResponse, gone: Promise<void>) => void): Promise<string> {
  server = createServer((req, res) => route(res, new Promise((resolve) => res.once('close', () => resolve()))));
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', () => resolve()));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const until = async (check: () => boolean): Promise<void> => {
  const end = Date.now() + 5_000;
  while (!check() && Date.now() < end) await new Promise((resolve) => setTimeout(resolve, 10));
};

describe("an event stream's place", () => {
  it('is not taken by a page gone before its route opened the stream', async () => {
    const streams = new EventStreams(2);
    let followed = 0;
    let opened: unknown = 'not yet';
    const url = await serve((res, gone) => {
      // The route reads the disk first (as a run page's does); the page goes meanwhile.
      void gone.then(() => {
        opened = streams.open(res, () => {
          followed++;
          return () => {};
        });
      });
    });
    const request = get(url);
    request.on('error', () => {});
    await new Promise((resolve) => setTimeout(resolve, 100));
    request.destroy();
    await until(() => opened !== 'not yet');
    expect(opened).toBeUndefined();
    expect(followed).toBe(0);
    expect(streams.size).toBe(0);
  });

  it('is given back when the route’s subscription throws', async () => {
    const streams = new EventStreams(2);
    const thrown: unknown[] = [];
    const url = await serve((res) => {
      try {
        streams.open(res, () => {
          throw new Error('the watch is closed');
        });
      } catch (error) {
        thrown.push(error);
      }
    });
    const request = get(url);
    request.on('error', () => {});
    await until(() => thrown.length === 1);
    expect((thrown[0] as Error).message).toBe('the watch is closed');
    await until(() => streams.size === 0);
    expect(streams.size).toBe(0);
  });

  it('is freed, and its subscription ended, when the page goes', async () => {
    const streams = new EventStreams(1);
    let unsubscribed = 0;
    const url = await serve((res) => {
      streams.open(res, (stream) => {
        stream.send('hello', { n: 1 });
        return () => unsubscribed++;
      });
    });
    const first = await new Promise<string>((resolve, reject) => {
      const request = get(url, (res) => {
        res.setEncoding('utf8');
        res.once('data', (chunk: string) => {
          resolve(chunk);
          request.destroy();
        });
      });
      request.on('error', reject);
    });
    expect(first).toBe('event: hello\ndata: {"n":1}\n\n');
    await until(() => streams.size === 0);
    expect(streams.size).toBe(0);
    expect(unsubscribed).toBe(1);
    // Its place taken again: the cap of one has room.
    const status = await new Promise<number>((resolve, reject) => {
      const request = get(url, (res) => {
        resolve(res.statusCode ?? 0);
        request.destroy();
      });
      request.on('error', reject);
    });
    expect(status).toBe(200);
  });
});
