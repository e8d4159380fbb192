/**
 * The event streams (server-sent events) of `genpipe ui`: the runs list's, a run page's and the
 * fleet page's. One EventStreams per server holds every open stream, whatever its page, and
 * refuses one past its cap with 503. Each stream gets the same headers and keep-alive, and a
 * page that stopped reading is closed rather than buffered for.
 */
import type { ServerResponse } from 'node:http';
import { send } from '../review/review-server.js';

/** A stream that has this much unsent is a page that stopped reading: it is closed, not buffered for. */
export const MAX_UNSENT_BYTES = 1 << 20;
export const KEEPALIVE_MS = 15_000;
export const DEFAULT_MAX_STREAMS = 32;

const STREAM_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-store',
  'x-frame-options': 'DENY',
  'content-security-policy': "frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
} as const;

/** One open stream, as its route writes to it. */
export interface EventStream {
  /** Sends one event; a stream already closed drops it, one with too much unsent is closed instead. */
  send(event: string, data: unknown): void;
  /** Closes the stream (its cleanup runs as for a page that went). */
  close(): void;
}

export class EventStreams {
  readonly #open = new Set<ServerResponse>();

  constructor(readonly max: number = DEFAULT_MAX_STREAMS) {}

  get size(): number {
    return this.#open.size;
  }

  /**
   * Opens a stream on `res`, or answers 503 and returns undefined when `max` are open. `follow`
   * subscribes the stream to what it follows and returns how to unsubscribe; that runs once, when
   * the stream closes, with the keep-alive cleared and the stream's place freed.
   */
  open(res: ServerResponse, follow: (stream: EventStream) => () => void): EventStream | undefined {
    if (this.#open.size >= this.max) {
      send(res, 503, 'text/plain; charset=utf-8', `at most ${this.max} pages may follow live at once: close one and reload this one`);
      return undefined;
    }
    // A page gone while its route was still reading (its close already told) takes no place.
    if (res.destroyed || res.closed) return undefined;
    res.writeHead(200, STREAM_HEADERS);
    this.#open.add(res);
    const write = (text: string): void => {
      if (res.destroyed || res.writableEnded) return;
      if (res.writableLength > MAX_UNSENT_BYTES) res.destroy();
      else res.write(text);
    };
    const stream: EventStream = {
      send: (event, data) => write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`),
      close: () => res.destroy(),
    };
    const keepalive = setInterval(() => write(': keep-alive\n\n'), KEEPALIVE_MS);
    keepalive.unref();
    let unsubscribe = (): void => {};
    // Its place is freed on every way a stream ends: the page going, the server closing it, or a
    // route whose `follow` threw (the stream is closed, and the error goes on to the route).
    res.once('close', () => {
      clearInterval(keepalive);
      unsubscribe();
      this.#open.delete(res);
    });
    try {
      unsubscribe = follow(stream);
    } catch (error) {
      res.destroy();
      throw error;
    }
    return stream;
  }

  /** Closes every open stream (the server is closing). */
  closeAll(): void {
    for (const res of this.#open) res.destroy();
  }
}
