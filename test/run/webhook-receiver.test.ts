import { afterEach, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { redact } from '../../src/util/redact.js';
import { parseListen, WebhookReceiver } from '../../src/run/webhook-receiver.js';

const REQUEST_ID = '3f2c1b9e-8d7a-4c6b-9e5f-1a2b3c4d5e6f';
const completed = { status: 'completed', request_id: REQUEST_ID, images: [{ url: 'https://cdn.test/a.png' }] };
let receiver: WebhookReceiver | undefined;

afterEach(async () => {
  await receiver?.close();
  receiver = undefined;
});

async function start(): Promise<WebhookReceiver> {
  receiver = await WebhookReceiver.start({ host: '127.0.0.1', port: 0, publicUrl: 'http://127.0.0.1/hooks' });
  return receiver;
}

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
    await new Promise((resolve) => setTimeout(resolve, 20));
    await r.wait(REQUEST_ID, new AbortController().signal); // resolves at once
    expect(r.arrived(REQUEST_ID)).toBe(true);
  });

  it('deduplicates by request_id: a duplicate or late delivery is acknowledged and ignored', async () => {
    const r = await start();
    const token = r.url.split('/').pop() ?? '';
    expect(await post(local(r, `/${token}`), completed)).toBe(204);
    expect(await post(local(r, `/${token}`), { status: 'failed', request_id: REQUEST_ID, error: 'late and contradictory' })).toBe(204);
    await new Promise((resolve) => setTimeout(resolve, 20));
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
    await new Promise((resolve) => setTimeout(resolve, 20));
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

describe('--listen', () => {
  it('parses HOST:PORT and [IPv6]:PORT, and refuses anything else with a sentence', () => {
    expect(parseListen('127.0.0.1:8787')).toEqual({ host: '127.0.0.1', port: 8787 });
    expect(parseListen('[::1]:0')).toEqual({ host: '::1', port: 0 });
    for (const bad of ['8787', 'localhost', 'host:99999', 'host:-1', ':80x']) {
      expect(() => parseListen(bad), bad).toThrow(/--listen takes HOST:PORT/);
    }
  });
});
