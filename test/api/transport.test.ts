import { describe, expect, it } from 'vitest';
import { MockAgent } from 'undici';
import * as z from 'zod';
import type { ClientConfig } from '../../src/api/config.js';
import { Transport, type ExchangeEvent } from '../../src/api/transport.js';
import { AUTHORIZATION, BASE, header, KEY_SECRET, rejection, testConfig } from './helpers.js';

const Ok = z.object({ ok: z.boolean() });

function transportHarness(overrides: Partial<ClientConfig> = {}, extra: { now?: () => number; random?: () => number } = {}) {
  const agent = new MockAgent({ enableCallHistory: true });
  agent.disableNetConnect();
  const events: ExchangeEvent[] = [];
  const transport = new Transport({ config: testConfig(overrides), dispatcher: agent, onExchange: (e) => events.push(e), ...extra });
  return { agent, transport, events, pool: agent.get(BASE), calls: () => agent.getCallHistory()?.calls() ?? [] };
}

/** Backoff that would wait about ten minutes: a test relying on it would time out. */
const SLOW_BACKOFF = { maxAttempts: 3, baseMs: 600_000, capMs: 600_000, maxRetryAfterMs: 60_000 };
const nearlyOne = (): number => 0.999_999;

describe('Transport', () => {
  it('sends JSON with content-type, accept and the Authorization header, and parses the body with the schema', async () => {
    const { pool, transport, calls } = transportHarness();
    pool
      .intercept({
        path: '/thing',
        method: 'POST',
        body: '{"a":1}',
        headers: { authorization: AUTHORIZATION, 'content-type': 'application/json' },
      })
      .reply(200, { ok: true });
    const result = await transport.call({
      method: 'POST',
      url: `${BASE}/thing`,
      auth: 'key',
      json: { a: 1 },
      schema: Ok,
      safety: { kind: 'safe' },
    });
    expect(result.data).toEqual({ ok: true });
    expect(result.status).toBe(200);
    expect(header(calls()[0], 'accept')).toBe('application/json');
  });

  it('a success body that breaks the schema is a protocol error, naming the field', async () => {
    const { pool, transport } = transportHarness();
    pool.intercept({ path: '/thing' }).reply(200, { ok: 'yes' });
    const error = await rejection(
      transport.call({ method: 'GET', url: `${BASE}/thing`, auth: 'key', schema: Ok, safety: { kind: 'safe' } }),
    );
    expect(error.code).toBe('protocol');
    expect(error.message).toContain('ok');
  });

  it('a success body that is not JSON is a protocol error', async () => {
    const { pool, transport } = transportHarness();
    pool.intercept({ path: '/thing' }).reply(200, '<html>');
    expect(
      (await rejection(transport.call({ method: 'GET', url: `${BASE}/thing`, auth: 'key', schema: Ok, safety: { kind: 'safe' } }))).code,
    ).toBe('protocol');
  });

  it('an authenticated call without credentials fails with code credentials and sends nothing', async () => {
    const { transport, calls } = transportHarness({ credentials: undefined });
    const error = await rejection(transport.call({ method: 'GET', url: `${BASE}/thing`, auth: 'key', safety: { kind: 'safe' } }));
    expect(error.code).toBe('credentials');
    expect(calls()).toHaveLength(0);
  });

  it('a GET is retried on network errors (ECONNRESET), then succeeds', async () => {
    const { pool, transport, calls } = transportHarness();
    pool.intercept({ path: '/thing' }).replyWithError(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }));
    pool.intercept({ path: '/thing' }).reply(200, { ok: true });
    expect((await transport.call({ method: 'GET', url: `${BASE}/thing`, auth: 'key', schema: Ok, safety: { kind: 'safe' } })).data).toEqual(
      { ok: true },
    );
    expect(calls()).toHaveLength(2);
  });

  it('a GET that keeps failing on the network ends with code network after maxAttempts', async () => {
    const { pool, transport, calls } = transportHarness();
    pool
      .intercept({ path: '/thing' })
      .replyWithError(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }))
      .persist();
    const error = await rejection(transport.call({ method: 'GET', url: `${BASE}/thing`, auth: 'key', safety: { kind: 'safe' } }));
    expect(error.code).toBe('network');
    expect(error.message).toContain('ECONNRESET');
    expect(calls()).toHaveLength(3);
  });

  it('a GET is retried on 408', async () => {
    const { pool, transport, calls } = transportHarness();
    pool.intercept({ path: '/thing' }).reply(408, { detail: 'timeout' });
    pool.intercept({ path: '/thing' }).reply(200, { ok: true });
    expect((await transport.call({ method: 'GET', url: `${BASE}/thing`, auth: 'key', schema: Ok, safety: { kind: 'safe' } })).data).toEqual(
      { ok: true },
    );
    expect(calls()).toHaveLength(2);
  });

  it('Retry-After in seconds is honoured instead of the backoff, clamped to maxRetryAfterMs', async () => {
    // Backoff would wait ~10 minutes; Retry-After 120 s is clamped to 20 ms, so the retry comes quickly.
    const { pool, transport, calls } = transportHarness({ retry: { ...SLOW_BACKOFF, maxRetryAfterMs: 20 } }, { random: nearlyOne });
    pool.intercept({ path: '/thing' }).reply(429, { detail: 'slow down' }, { headers: { 'retry-after': '120' } });
    pool.intercept({ path: '/thing' }).reply(200, { ok: true });
    expect((await transport.call({ method: 'GET', url: `${BASE}/thing`, auth: 'key', schema: Ok, safety: { kind: 'safe' } })).data).toEqual(
      { ok: true },
    );
    expect(calls()).toHaveLength(2);
  });

  it('with a pacer: every attempt is admitted by it, told its answer, and a 429 hands its Retry-After to the pacer instead of sleeping', async () => {
    const { pool, transport, calls } = transportHarness({ retry: SLOW_BACKOFF }, { random: nearlyOne });
    pool.intercept({ path: '/thing/7f3a' }).reply(429, { detail: 'slow down' }, { headers: { 'retry-after': '30' } });
    pool.intercept({ path: '/thing/7f3a' }).reply(200, { ok: true });
    const admitted: (number | undefined)[] = [];
    const answers: number[] = [];
    const unpace = transport.pace({
      admit: (method, path, _signal, waitMs) => {
        expect([method, path]).toEqual(['GET', '/thing/7f3a']);
        admitted.push(waitMs);
        return undefined;
      },
      answered: (_method, _path, status) => void answers.push(status),
    });
    const started = Date.now();
    expect(
      (await transport.call({ method: 'GET', url: `${BASE}/thing/7f3a`, auth: 'key', schema: Ok, safety: { kind: 'safe' } })).data,
    ).toEqual({ ok: true });
    // The transport did not wait the 30 s itself: the pacer was told to (and here let it go at once).
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(admitted).toEqual([undefined, 30_000]);
    expect(answers).toEqual([429, 200]);
    expect(calls()).toHaveLength(2);
    // Removed: calls are no longer paced.
    unpace();
    pool.intercept({ path: '/thing/7f3a' }).reply(200, { ok: true });
    await transport.call({ method: 'GET', url: `${BASE}/thing/7f3a`, auth: 'key', schema: Ok, safety: { kind: 'safe' } });
    expect(admitted).toHaveLength(2);
  });

  it('Retry-After as an HTTP date is honoured relative to now', async () => {
    const date = 'Sat, 01 Mar 2025 12:00:30 GMT';
    const now = (): number => Date.parse(date) - 15; // the date is 15 ms ahead
    const { pool, transport, calls } = transportHarness({ retry: SLOW_BACKOFF }, { now, random: nearlyOne });
    pool.intercept({ path: '/thing' }).reply(503, { detail: 'busy' }, { headers: { 'retry-after': date } });
    pool.intercept({ path: '/thing' }).reply(200, { ok: true });
    expect((await transport.call({ method: 'GET', url: `${BASE}/thing`, auth: 'key', schema: Ok, safety: { kind: 'safe' } })).data).toEqual(
      { ok: true },
    );
    expect(calls()).toHaveLength(2);
  });

  it('the final error carries the parsed Retry-After (in ms)', async () => {
    const { pool, transport } = transportHarness({ retry: { maxAttempts: 1, baseMs: 1, capMs: 1, maxRetryAfterMs: 600_000 } });
    pool.intercept({ path: '/thing' }).reply(429, { detail: 'slow down' }, { headers: { 'retry-after': '120' } });
    const error = await rejection(transport.call({ method: 'GET', url: `${BASE}/thing`, auth: 'key', safety: { kind: 'safe' } }));
    expect(error).toMatchObject({ code: 'rate_limited', retryAfterMs: 120_000 });
  });

  it('a malformed Retry-After ("abc", "-1") falls back to the backoff', async () => {
    const { pool, transport } = transportHarness({ retry: { maxAttempts: 2, baseMs: 1, capMs: 2, maxRetryAfterMs: 600_000 } });
    pool.intercept({ path: '/thing' }).reply(429, { detail: 'x' }, { headers: { 'retry-after': 'abc' } });
    pool.intercept({ path: '/thing' }).reply(429, { detail: 'x' }, { headers: { 'retry-after': '-1' } });
    const error = await rejection(transport.call({ method: 'GET', url: `${BASE}/thing`, auth: 'key', safety: { kind: 'safe' } }));
    expect(error.code).toBe('rate_limited');
    expect(error.retryAfterMs).toBeUndefined();
  });

  it('an abort during a backoff sleep rejects promptly with code aborted, and nothing more is sent', async () => {
    const controller = new AbortController();
    const agent = new MockAgent({ enableCallHistory: true });
    agent.disableNetConnect();
    const transport = new Transport({
      config: testConfig({ retry: SLOW_BACKOFF }),
      dispatcher: agent,
      random: nearlyOne,
      // The first attempt has ended; the transport is about to sleep for ~10 minutes.
      onExchange: () => setTimeout(() => controller.abort(), 5),
    });
    agent.get(BASE).intercept({ path: '/thing' }).reply(503, { detail: 'busy' }).persist();
    const error = await rejection(
      transport.call({ method: 'GET', url: `${BASE}/thing`, auth: 'key', safety: { kind: 'safe' }, signal: controller.signal }),
    );
    expect(error.code).toBe('aborted');
    expect(agent.getCallHistory()?.calls()).toHaveLength(1);
  });

  it('an abort while the response is awaited rejects with code aborted and is not retried', async () => {
    const { pool, transport, calls } = transportHarness();
    pool.intercept({ path: '/thing' }).reply(200, { ok: true }).delay(60_000);
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 10);
    const error = await rejection(
      transport.call({ method: 'GET', url: `${BASE}/thing`, auth: 'key', safety: { kind: 'safe' }, signal: controller.signal }),
    );
    expect(error.code).toBe('aborted');
    expect(calls()).toHaveLength(1);
  });

  it('an already-aborted signal sends nothing', async () => {
    const { transport, calls } = transportHarness();
    const error = await rejection(
      transport.call({ method: 'GET', url: `${BASE}/thing`, auth: 'key', safety: { kind: 'safe' }, signal: AbortSignal.abort() }),
    );
    expect(error.code).toBe('aborted');
    expect(calls()).toHaveLength(0);
  });

  it('a headers timeout on a GET is code timeout after retries', async () => {
    const { pool, transport, calls } = transportHarness();
    const { errors } = await import('undici');
    pool.intercept({ path: '/thing' }).replyWithError(new errors.HeadersTimeoutError()).persist();
    expect((await rejection(transport.call({ method: 'GET', url: `${BASE}/thing`, auth: 'key', safety: { kind: 'safe' } }))).code).toBe(
      'timeout',
    );
    expect(calls()).toHaveLength(3);
  });

  it('exchange events report method, url, attempt and status, and never carry headers or the secret', async () => {
    const { pool, transport, events } = transportHarness();
    pool.intercept({ path: '/thing' }).reply(500, { detail: 'x' });
    pool.intercept({ path: '/thing' }).reply(200, { ok: true });
    await transport.call({ method: 'GET', url: `${BASE}/thing`, auth: 'key', schema: Ok, safety: { kind: 'safe' } });
    expect(events.map((e) => [e.method, e.url, e.attempt, e.status])).toEqual([
      ['GET', `${BASE}/thing`, 0, 500],
      ['GET', `${BASE}/thing`, 1, 200],
    ]);
    expect(JSON.stringify(events)).not.toContain(KEY_SECRET);
  });
});
