/**
 * A credit-spending POST is retried only when it cannot double-spend: it carries an
 * Idempotency-Key, or the failure proves the request never left. Anything else raises an
 * IndeterminateSubmissionError carrying the key and body hash, and is sent exactly once.
 */
import { describe, expect, it } from 'vitest';
import { errors, type MockPool } from 'undici';
import { IndeterminateSubmissionError } from '../../src/api/errors.js';
import { BASE, harness, header, JOB_ID, JOB_SET_ID, networkError, PLATFORM, rejection, sha256, submitted } from './helpers.js';

type Interceptor = ReturnType<MockPool['intercept']>;
type Scope = ReturnType<Interceptor['reply']>;
type Failure = { name: string; apply: (interceptor: Interceptor) => Scope; status?: number };

const AMBIGUOUS: Failure[] = [
  { name: 'ECONNRESET', apply: (i) => i.replyWithError(networkError('ECONNRESET')) },
  { name: 'UND_ERR_SOCKET', apply: (i) => i.replyWithError(new errors.SocketError('other side closed')) },
  { name: 'a headers timeout', apply: (i) => i.replyWithError(new errors.HeadersTimeoutError()) },
  { name: '500', apply: (i) => i.reply(500, { detail: 'internal' }), status: 500 },
  { name: '502', apply: (i) => i.reply(502, { detail: 'bad gateway' }), status: 502 },
  { name: '503', apply: (i) => i.reply(503, { detail: 'unavailable' }), status: 503 },
];

const jobSet = {
  id: JOB_SET_ID,
  type: 'image2video',
  created_at: '2025-03-01T12:00:00.000Z',
  jobs: [{ id: JOB_ID, job_set_type: 'image2video', status: 'queued', results: null }],
  input_params: {},
};

describe('no double spend: a credit-spending POST without an Idempotency-Key', () => {
  it.each(AMBIGUOUS)(
    'marketing image submit failing with $name is sent exactly once and raises IndeterminateSubmissionError with the body hash',
    async (failure) => {
      const { agent, client, calls } = harness();
      failure.apply(agent.get(BASE).intercept({ path: '/marketing-studio/image/sunburst', method: 'POST' })).persist();
      const error = await rejection(client.marketingImage.submit({ prompt: 'a red bicycle', resolution: '2k' }));
      expect(error).toBeInstanceOf(IndeterminateSubmissionError);
      const indeterminate = error as IndeterminateSubmissionError;
      expect(indeterminate.code).toBe('indeterminate_submission');
      expect(indeterminate.idempotencyKey).toBeUndefined();
      expect(calls()).toHaveLength(1);
      const sentBody = calls()[0]?.body;
      expect(typeof sentBody).toBe('string');
      expect(indeterminate.bodyHash).toBe(sha256(sentBody as string));
      expect(indeterminate.method).toBe('POST');
      expect(indeterminate.path).toBe('/marketing-studio/image/sunburst');
      expect(indeterminate.status).toBe(failure.status);
      expect(indeterminate.cause).toBeDefined();
    },
  );

  it.each(AMBIGUOUS)('legacy DoP failing with $name is sent exactly once', async (failure) => {
    const { agent, client, calls } = harness();
    failure.apply(agent.get(PLATFORM).intercept({ path: '/v1/image2video/dop', method: 'POST' })).persist();
    const error = await rejection(client.legacy.dop({ prompt: 'pan left', seed: 7 }));
    expect(error).toBeInstanceOf(IndeterminateSubmissionError);
    expect(calls()).toHaveLength(1);
    expect((error as IndeterminateSubmissionError).bodyHash).toBe(sha256(calls()[0]?.body as string));
  });

  it('Soul standard (webhook path) failing with ECONNRESET is sent exactly once', async () => {
    const { agent, client, calls } = harness();
    agent
      .get(PLATFORM)
      .intercept({ path: (p) => p.startsWith('/vendor-ai/soul/standard'), method: 'POST' })
      .replyWithError(networkError('ECONNRESET'))
      .persist();
    const error = await rejection(client.soulStandard.submit({ prompt: 'p', aspect_ratio: '1:1', resolution: '1080p' }));
    expect(error).toBeInstanceOf(IndeterminateSubmissionError);
    expect(calls()).toHaveLength(1);
  });

  it('ECONNREFUSED proves the request never left, so it is retried even without a key', async () => {
    const { agent, client, calls } = harness();
    const pool = agent.get(BASE);
    pool
      .intercept({ path: '/marketing-studio/image/sunburst', method: 'POST' })
      .replyWithError(networkError('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:443'));
    pool.intercept({ path: '/marketing-studio/image/sunburst', method: 'POST' }).reply(200, submitted());
    expect((await client.marketingImage.submit({ prompt: 'x' })).request_id).toBe(submitted().request_id);
    expect(calls()).toHaveLength(2);
    expect(calls()[0]?.body).toBe(calls()[1]?.body);
  });

  it('a DNS failure (ENOTFOUND) is retried even without a key, legacy DoP', async () => {
    const { agent, client, calls } = harness();
    const pool = agent.get(PLATFORM);
    pool.intercept({ path: '/v1/image2video/dop', method: 'POST' }).replyWithError(networkError('ENOTFOUND', 'getaddrinfo ENOTFOUND'));
    pool.intercept({ path: '/v1/image2video/dop', method: 'POST' }).reply(200, jobSet);
    expect((await client.legacy.dop({ prompt: 'x' })).id).toBe(JOB_SET_ID);
    expect(calls()).toHaveLength(2);
  });

  it('ECONNREFUSED on every attempt ends with code network (not indeterminate) after maxAttempts', async () => {
    const { agent, client, calls, config } = harness();
    agent
      .get(BASE)
      .intercept({ path: '/marketing-studio/image/sunburst', method: 'POST' })
      .replyWithError(networkError('ECONNREFUSED'))
      .persist();
    const error = await rejection(client.marketingImage.submit({ prompt: 'x' }));
    expect(error.code).toBe('network');
    expect(error).not.toBeInstanceOf(IndeterminateSubmissionError);
    expect(calls()).toHaveLength(config.retry.maxAttempts);
  });

  it('a 2xx whose body breaks the spec (no request id) is indeterminate, not a plain failure, and is not resent', async () => {
    const { agent, client, calls } = harness();
    agent.get(BASE).intercept({ path: '/marketing-studio/image/sunburst', method: 'POST' }).reply(200, { ok: true }).persist();
    const error = await rejection(client.marketingImage.submit({ prompt: 'x' }));
    expect(error).toBeInstanceOf(IndeterminateSubmissionError);
    expect(error.status).toBe(200);
    expect((error as IndeterminateSubmissionError).bodyHash).toBe(sha256(calls()[0]?.body as string));
    expect(calls()).toHaveLength(1);
    // A protocol error: the answer was not the service's; it may have spent, so it is not resent.
    expect((error as IndeterminateSubmissionError).protocol).toBe(true);
    expect(error.message).toMatch(/not the Generation Service's \(check the base URL\).*may still have been charged/);
  });

  it('a 2xx that is not JSON at all is the same protocol error: indeterminate, one request', async () => {
    const { agent, client, calls } = harness();
    agent.get(BASE).intercept({ path: '/marketing-studio/image/sunburst', method: 'POST' }).reply(200, 'ok').persist();
    const error = await rejection(client.marketingImage.submit({ prompt: 'x' }));
    expect(error).toBeInstanceOf(IndeterminateSubmissionError);
    expect((error as IndeterminateSubmissionError).protocol).toBe(true);
    expect(calls()).toHaveLength(1);
  });

  it('a refusal the service words is not a protocol error (indeterminate only for the usual reasons)', async () => {
    const { agent, client } = harness();
    agent.get(BASE).intercept({ path: '/marketing-studio/image/sunburst', method: 'POST' }).reply(422, { detail: 'prompt: empty' });
    const error = await rejection(client.marketingImage.submit({ prompt: 'x' }));
    expect(error.code).toBe('unprocessable');
    expect(error).not.toBeInstanceOf(IndeterminateSubmissionError);
  });

  it('429 without a key is not resent (and is a plain rate_limited refusal)', async () => {
    const { agent, client, calls } = harness();
    agent.get(BASE).intercept({ path: '/marketing-studio/image/sunburst', method: 'POST' }).reply(429, { detail: 'slow down' }).persist();
    const error = await rejection(client.marketingImage.submit({ prompt: 'x' }));
    expect(error.code).toBe('rate_limited');
    expect(calls()).toHaveLength(1);
  });
});

describe('a credit-spending POST with an Idempotency-Key (character sheet)', () => {
  it("a 2xx that is not the API's shape is a protocol error that says it can be resent safely, not indeterminate", async () => {
    const { agent, client, calls } = harness();
    agent.get(BASE).intercept({ path: '/vendor/ai-influencer', method: 'POST' }).reply(200, {}).persist();
    const error = await rejection(
      client.characterSheet.submit({ tier: 'cats', seed: 42, variation_index: 3 }, { idempotencyKey: 'step-abc-v3' }),
    );
    expect(error.code).toBe('protocol');
    expect(error).not.toBeInstanceOf(IndeterminateSubmissionError);
    expect(error.message).toMatch(/not the Generation Service's \(check the base URL\).*can be resent safely/);
    expect(calls()).toHaveLength(1);
  });

  it.each(AMBIGUOUS)('is retried after $name with the same key and an identical body', async (failure) => {
    const { agent, client, calls } = harness();
    const pool = agent.get(BASE);
    failure.apply(pool.intercept({ path: '/vendor/ai-influencer', method: 'POST' }));
    pool.intercept({ path: '/vendor/ai-influencer', method: 'POST' }).reply(200, submitted());
    const result = await client.characterSheet.submit({ tier: 'cats', seed: 42, variation_index: 3 }, { idempotencyKey: 'step-abc-v3' });
    expect(result.request_id).toBe(submitted().request_id);
    const sent = calls();
    expect(sent).toHaveLength(2);
    expect(sent.map((c) => header(c, 'idempotency-key'))).toEqual(['step-abc-v3', 'step-abc-v3']);
    expect(sent[1]?.body).toBe(sent[0]?.body);
  });

  it('when every attempt fails ambiguously, the error carries the key and the body hash', async () => {
    const { agent, client, calls, config } = harness();
    agent.get(BASE).intercept({ path: '/vendor/ai-influencer', method: 'POST' }).replyWithError(networkError('ECONNRESET')).persist();
    const error = await rejection(client.characterSheet.submit({ tier: 'cats', seed: 42 }, { idempotencyKey: 'step-abc' }));
    expect(calls()).toHaveLength(config.retry.maxAttempts);
    expect(error.code).toBe('network');
    expect(new Set(calls().map((c) => c.body)).size).toBe(1);
  });

  it('without a key, the character sheet is not resent after an ambiguous failure either', async () => {
    const { agent, client, calls } = harness();
    agent.get(BASE).intercept({ path: '/vendor/ai-influencer', method: 'POST' }).reply(500, { detail: 'boom' }).persist();
    const error = await rejection(client.characterSheet.submit({ tier: 'normal' }));
    expect(error).toBeInstanceOf(IndeterminateSubmissionError);
    expect((error as IndeterminateSubmissionError).idempotencyKey).toBeUndefined();
    expect(calls()).toHaveLength(1);
    expect(header(calls()[0], 'idempotency-key')).toBeUndefined();
  });
});
