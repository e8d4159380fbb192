import { randomUUID } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { redact } from '../../../src/util/redact.js';
import { parseListen, WebhookReceiver, type WebhookReceiverOptions } from '../../../src/run/polling/webhook-receiver.js';

const REQUEST_ID = '3f2c1b9e-8d7a-4c6b-9e5f-1a2b3c4d5e6f';
const completed = { status: 'completed', request_id: REQUEST_ID, images: [{ url: 'https://cdn.test/a.png' }] };
let receiver: WebhookReceiver | undefined;

afterEach(async () => {
  await receiver?.close();
  receiver = undefined;
});

async function start(options: Partial<WebhookReceiverOptions> = {}): Promise<WebhookReceiver> {
  receiver = await WebhookReceiver.start({ host: '127.0.0.1', port: 0, publicUrl: 'http://127.0.0.1/hooks', ...options });
  return receiver;
}

const tokenOf = (r: WebhookReceiver): string => r.url.split('/').pop() ?? '';

/**
 * Waits until `condition` holds, checking every 10 ms for at most 10 s (a generous bound: the
 * tests assert what happens, not how fast). Fails the test when it never does.
 */
async function until(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 1_000 && !condition(); i++) await delay(10);
  expect(condition(), what).toBe(true);
}

/** A raw TCP client on loopback, to send what an HTTP client library would not (slow, endless, partial). */
interface RawClient {
  socket: Socket;
  /** Everything the server sent so far. */
  text: () => string;
  isClosed: () => boolean;
  closed: Promise<void>;
}

async function rawClient(r: WebhookReceiver): Promise<RawClient> {
  const socket = connect({ host: '127.0.0.1', port: r.port });
  let text = '';
  let isClosed = false;
  socket.setEncoding('latin1');
  socket.on('data', (data: string) => (text += data));
  // EPIPE / ECONNRESET once the server cut us off: expected here, the tests look at `closed`.
  socket.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve())).then(() => void (isClosed = true));
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  return { socket, text: () => text, isClosed: () => isClosed, closed };
}

const sockets: Socket[] = [];
afterEach(() => {
  for (const socket of sockets.splice(0)) socket.destroy();
});

async function tracked(r: WebhookReceiver): Promise<RawClient> {
  const client = await rawClient(r);
  sockets.push(client.socket);
  return client;
}

/**
 * How much a test body offers at most: 64 MiB, endless as far as the receiver knows. Loopback
 * socket buffers hold a few MiB at most, so a server that stops reading is found out long before.
 */
const POUR_LIMIT = 64 * 1024 * 1024;

/** Writes `frame` again and again until the server closes the connection or POUR_LIMIT bytes went out; returns the bytes written. */
async function pour(client: RawClient, frame: Buffer): Promise<number> {
  let sent = 0;
  // Bounded: at most POUR_LIMIT / frame.length writes.
  while (!client.isClosed() && sent < POUR_LIMIT) {
    const flushed = client.socket.write(frame);
    sent += frame.length;
    if (!flushed) await Promise.race([new Promise((resolve) => client.socket.once('drain', resolve)), client.closed]);
  }
  return sent;
}

const head = (path: string, headers: Record<string, string | number>): string =>
  `POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\n${Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('')}\r\n`;

const local = (r: WebhookReceiver, path: string): string => `http://127.0.0.1:${r.port}${path}`;
const post = async (url: string, body: unknown): Promise<number> => {
  const res = await request(url, { method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
  await res.body.dump();
  return res.statusCode;
};

describe('the webhook receiver', () => {
  it('puts a random per-run token in its URL, and registers it as a secret', async () => {
    const a = await start();
    const b = await WebhookReceiver.start({ host: '127.0.0.1', port: 0, publicUrl: 'http://127.0.0.1/hooks/' });
    try {
      expect(a.url).toMatch(/^http:\/\/127\.0\.0\.1\/hooks\/[0-9a-f]{48}$/);
      expect(b.url).not.toBe(a.url);
      const token = a.url.split('/').pop() ?? '';
      expect(redact(`delivered to ${a.url}`)).not.toContain(token);
    } finally {
      await b.close();
    }
  });

  it('acknowledges a delivery with 2xx and wakes the instance waiting for that request', async () => {
    const r = await start();
    const controller = new AbortController();
    let woken = false;
    const waiting = r.wait(REQUEST_ID, controller.signal).then(() => (woken = true));
    const token = r.url.split('/').pop() ?? '';
    expect(await post(local(r, `/hooks/${token}`), completed)).toBe(204);
    await waiting;
    expect(woken).toBe(true);
    expect(r.arrived(REQUEST_ID)).toBe(true);
    expect(r.stats).toMatchObject({ received: 1, duplicates: 0 });
  });

  it('a delivery that comes before anyone waits is remembered', async () => {
    const r = await start();
    const token = r.url.split('/').pop() ?? '';
    await post(local(r, `/x/${token}`), { status: 'nsfw', request_id: REQUEST_ID });
    // The 204 comes before the body is processed: wait for the processing, not for a time.
    await until(() => r.stats.received === 1, 'the delivery processed');
    await r.wait(REQUEST_ID, new AbortController().signal); // resolves at once
    expect(r.arrived(REQUEST_ID)).toBe(true);
  });

  it('deduplicates by request_id: a duplicate or late delivery is acknowledged and ignored', async () => {
    const r = await start();
    const token = r.url.split('/').pop() ?? '';
    expect(await post(local(r, `/${token}`), completed)).toBe(204);
    expect(await post(local(r, `/${token}`), { status: 'failed', request_id: REQUEST_ID, error: 'late and contradictory' })).toBe(204);
    await until(() => r.stats.received === 2, 'both deliveries processed');
    expect(r.stats).toMatchObject({ received: 2, duplicates: 1 });
  });

  it('refuses a URL without the run token (404) and a GET on it (405)', async () => {
    const r = await start();
    const token = r.url.split('/').pop() ?? '';
    expect(await post(local(r, '/hooks/not-the-token'), completed)).toBe(404);
    expect(await post(local(r, '/'), completed)).toBe(404);
    const res = await request(local(r, `/${token}`), { method: 'GET' });
    await res.body.dump();
    expect(res.statusCode).toBe(405);
    expect(r.stats.refused).toBe(3);
    expect(r.arrived(REQUEST_ID)).toBe(false);
  });

  it('acknowledges a malformed body but wakes nobody', async () => {
    const r = await start();
    const token = r.url.split('/').pop() ?? '';
    expect(await post(local(r, `/${token}`), { status: 'completed' })).toBe(204);
    expect(await post(local(r, `/${token}`), 'not json')).toBe(204);
    await until(() => r.stats.received === 2, 'both deliveries processed');
    expect(r.stats.malformed).toBe(2);
  });

  it('a waiter gives up on abort', async () => {
    const r = await start();
    const controller = new AbortController();
    const waiting = r.wait(REQUEST_ID, controller.signal);
    controller.abort();
    await expect(waiting).resolves.toBeUndefined();
    expect(r.arrived(REQUEST_ID)).toBe(false);
  });
});

describe('the webhook receiver: acknowledging first', () => {
  it('answers 204 before the body has even finished arriving, then processes the body', async () => {
    const r = await start();
    const body = JSON.stringify(completed);
    const client = await tracked(r);
    const woken = r.wait(REQUEST_ID, new AbortController().signal);
    client.socket.write(head(`/${tokenOf(r)}`, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }));
    client.socket.write(body.slice(0, 10));
    // Only part of the body was sent: the acknowledgement cannot have waited for the processing.
    await until(() => client.text().startsWith('HTTP/1.1 204'), 'a 204 before the body is complete');
    expect(r.stats.received).toBe(0);
    client.socket.write(body.slice(10));
    await woken;
    expect(r.arrived(REQUEST_ID)).toBe(true);
    expect(r.stats).toMatchObject({ received: 1, malformed: 0 });
  });
});

describe('the webhook receiver: bounded bodies', () => {
  it('refuses a body announced larger than the cap with 413 and closes, without reading it', async () => {
    const r = await start({ maxBytes: 1_024 });
    const client = await tracked(r);
    // 100 MB announced, not one byte of it sent: the answer can only come unread.
    client.socket.write(head(`/${tokenOf(r)}`, { 'content-type': 'application/json', 'content-length': 100_000_000 }));
    await client.closed;
    expect(client.text()).toMatch(/^HTTP\/1\.1 413 /);
    expect(r.stats).toMatchObject({ oversized: 1, received: 0 });
  });

  it('cuts the connection as soon as a chunked body passes the cap, instead of reading it to the end', async () => {
    const r = await start({ maxBytes: 64 * 1024 });
    const client = await tracked(r);
    client.socket.write(head(`/${tokenOf(r)}`, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' }));
    const sent = await pour(client, Buffer.concat([Buffer.from('10000\r\n'), Buffer.alloc(0x10000, 0x61), Buffer.from('\r\n')]));
    expect(client.isClosed()).toBe(true);
    expect(sent).toBeLessThan(POUR_LIMIT);
    expect(r.stats).toMatchObject({ oversized: 1, received: 0 });
  });

  it('closes a refused request (wrong token) instead of draining its body', async () => {
    const r = await start();
    const client = await tracked(r);
    client.socket.write(head('/hooks/not-the-token', { 'content-length': POUR_LIMIT }));
    const sent = await pour(client, Buffer.alloc(0x10000, 0x61));
    expect(client.isClosed()).toBe(true);
    expect(sent).toBeLessThan(POUR_LIMIT);
    expect(client.text()).toMatch(/^HTTP\/1\.1 404 /);
    expect(r.stats).toMatchObject({ refused: 1, received: 0 });
  });
});

describe('the webhook receiver: bounded connections and time', () => {
  it('closes connections beyond maxConnections, and accepts again once one is gone', async () => {
    const r = await start({ maxConnections: 2 });
    const body = '{}';
    const delivery = head(`/${tokenOf(r)}`, { 'content-length': body.length }) + body;
    // Two keep-alive connections, each answered: the server holds both.
    const [a, b] = [await tracked(r), await tracked(r)];
    for (const client of [a, b]) {
      client.socket.write(delivery);
      await until(() => client.text().startsWith('HTTP/1.1 204'), 'an answer on a connection within the cap');
    }
    const c = await tracked(r);
    c.socket.write(delivery);
    await c.closed;
    expect(c.text()).toBe('');
    a.socket.destroy();
    await a.closed;
    // The server counts A gone once its close reaches it: try again, a bounded number of times.
    let answered = false;
    for (let attempt = 0; attempt < 50 && !answered; attempt++) {
      const d = await tracked(r);
      d.socket.write(delivery);
      await Promise.race([d.closed, until(() => d.text() !== '' || d.isClosed(), 'an answer or a close')]);
      answered = d.text().startsWith('HTTP/1.1 204');
      if (!answered) await delay(20);
    }
    expect(answered).toBe(true);
    expect(b.isClosed()).toBe(false);
  });

  it('cuts off a client that sends its headers too slowly', async () => {
    const r = await start({ headersTimeoutMs: 200, requestTimeoutMs: 1_000 });
    const client = await tracked(r);
    client.socket.write(`POST /${tokenOf(r)} HTTP/1.1\r\nhost: 127.0.0.1\r\n`);
    // One header line every 20 ms, for up to 10 s: the headers never end on their own.
    for (let i = 0; i < 500 && !client.isClosed(); i++) {
      client.socket.write(`x-slow-${i}: 1\r\n`);
      await delay(20);
    }
    expect(client.isClosed()).toBe(true);
    // Node answers 408 when it can; it never acknowledged a delivery.
    expect(client.text()).not.toContain('204');
    expect(r.stats.received).toBe(0);
  });

  it('cuts off a client that connects and sends nothing', async () => {
    const r = await start({ headersTimeoutMs: 200, requestTimeoutMs: 1_000 });
    const client = await tracked(r);
    await until(() => client.isClosed(), 'the silent connection closed');
    expect(r.stats.received).toBe(0);
  });

  it('cuts off a client that sends its body too slowly, and accepts nothing from it', async () => {
    const r = await start({ headersTimeoutMs: 200, requestTimeoutMs: 400 });
    const client = await tracked(r);
    const body = JSON.stringify(completed);
    client.socket.write(head(`/${tokenOf(r)}`, { 'content-type': 'application/json', 'content-length': body.length }));
    // One byte every 20 ms: the whole body would take far longer than the request timeout.
    for (let i = 0; i < body.length - 1 && !client.isClosed(); i++) {
      client.socket.write(body[i] ?? '');
      await delay(20);
    }
    expect(client.isClosed()).toBe(true);
    expect(r.stats.received).toBe(0);
    expect(r.arrived(REQUEST_ID)).toBe(false);
  });

  it('closes an idle keep-alive connection after keepAliveTimeoutMs', async () => {
    const r = await start({ keepAliveTimeoutMs: 100 });
    const client = await tracked(r);
    client.socket.write(head(`/${tokenOf(r)}`, { 'content-length': 2 }) + '{}');
    await until(() => client.text().startsWith('HTTP/1.1 204'), 'the 204');
    // Node 20 adds about 1 s of its own to the keep-alive timeout (closed after ~1.1 s here), and
    // its default would hold the connection ~6 s: wait at most 4.5 s, a generous bound between the two.
    for (let i = 0; i < 450 && !client.isClosed(); i++) await delay(10);
    expect(client.isClosed()).toBe(true);
  });

  it('refuses option values that are not positive whole numbers', async () => {
    for (const bad of [0, -1, 1.5, Number.NaN]) {
      await expect(
        WebhookReceiver.start({ host: '127.0.0.1', port: 0, publicUrl: 'http://127.0.0.1/', maxConnections: bad }),
      ).rejects.toMatchObject({ code: 'config' });
    }
  });
});

describe('the webhook receiver: de-duplication memory', () => {
  const deliver = async (r: WebhookReceiver, requestId: string): Promise<void> => {
    const before = r.stats.received;
    expect(await post(local(r, `/${tokenOf(r)}`), { status: 'nsfw', request_id: requestId })).toBe(204);
    await until(() => r.stats.received === before + 1, 'the delivery processed');
  };

  it('dedupes a repeat for the whole 2-hour window, and forgets it after', async () => {
    let now = 1_000_000;
    const r = await start({ now: () => now });
    await deliver(r, REQUEST_ID);
    now += 2 * 60 * 60 * 1000 - 1;
    await deliver(r, REQUEST_ID);
    expect(r.stats.duplicates).toBe(1);
    expect(r.arrived(REQUEST_ID)).toBe(true);
    // The service retries for 2 hours from its first attempt (§6 rule 2): later, the id is let go.
    now += 1;
    expect(r.arrived(REQUEST_ID)).toBe(false);
    expect(r.remembered).toBe(0);
    await deliver(r, REQUEST_ID);
    expect(r.stats.duplicates).toBe(1);
  });

  it('never remembers more than maxRemembered ids, forgetting the oldest first', async () => {
    const r = await start({ maxRemembered: 5 });
    const ids = Array.from({ length: 12 }, () => randomUUID());
    for (const id of ids) {
      await deliver(r, id);
      expect(r.remembered).toBeLessThanOrEqual(5);
    }
    expect(r.remembered).toBe(5);
    expect(ids.map((id) => r.arrived(id))).toEqual([...Array<boolean>(7).fill(false), ...Array<boolean>(5).fill(true)]);
    // The newest are still deduped; the evicted oldest is not.
    await deliver(r, ids[11] ?? '');
    expect(r.stats.duplicates).toBe(1);
    await deliver(r, ids[0] ?? '');
    expect(r.stats.duplicates).toBe(1);
    expect(r.remembered).toBe(5);
  });
});

describe('--listen', () => {
  it('parses HOST:PORT and [IPv6]:PORT, and refuses anything else with a sentence', () => {
    expect(parseListen('127.0.0.1:8787')).toEqual({ host: '127.0.0.1', port: 8787 });
    expect(parseListen('[::1]:0')).toEqual({ host: '::1', port: 0 });
    for (const bad of ['8787', 'localhost', 'host:99999', 'host:-1', ':80x']) {
      expect(() => parseListen(bad), bad).toThrow(/--listen takes HOST:PORT/);
    }
  });
});
