import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../src/api/errors.js';
import type { MediaRecord } from '../../src/api/wire.js';
import { AUTHORIZATION, BASE, CDN, harness, header, issuePaths, jsonBody, rejection, UPLOADS } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'genpipe-media-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const record = (extension: string, contentType: string): MediaRecord => ({
  id: `med_123.${extension}`,
  type: 'image',
  content_type: contentType,
  upload_url: `${UPLOADS}/put/med_123.${extension}?sig=abc`,
  url: `${CDN}/media/med_123.${extension}`,
});

const JPEG = Uint8Array.from([0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 0x4a, 0x46, 0x49, 0x46, 0x00, 0x01, 0xff, 0xd9]);

describe('§4.6 rule 5 media upload flow', () => {
  it('create: POST /v1/agent/media with {extension, type}, Authorization, 201 -> the record', async () => {
    const { agent, client, calls } = harness();
    agent
      .get(BASE)
      .intercept({ path: '/v1/agent/media', method: 'POST', headers: { authorization: AUTHORIZATION } })
      .reply(201, record('png', 'image/png'));
    expect(await client.media.create('png', 'image')).toEqual(record('png', 'image/png'));
    expect(jsonBody(calls()[0])).toEqual({ extension: 'png', type: 'image' });
  });

  it('supported media types: image, video, audio, file — accepted; another type refused with zero requests', async () => {
    const { agent, client, calls } = harness();
    agent.get(BASE).intercept({ path: '/v1/agent/media', method: 'POST' }).reply(201, record('bin', 'application/octet-stream')).times(4);
    for (const type of ['image', 'video', 'audio', 'file'] as const) await client.media.create('bin', type);
    expect(calls().map((c) => (jsonBody(c) as { type: string }).type)).toEqual(['image', 'video', 'audio', 'file']);
    const { client: other, calls: otherCalls } = harness();
    const error = await rejection(other.media.create('png', 'document' as never));
    expect(error).toBeInstanceOf(InvalidInputError);
    expect(issuePaths(error as InvalidInputError)).toContain('type');
    expect(otherCalls()).toHaveLength(0);
  });

  it('an extension with a dot or a path is refused with zero requests', async () => {
    const { client, calls } = harness();
    for (const extension of ['.png', '../x', '']) {
      const error = await rejection(client.media.create(extension, 'image'));
      expect(issuePaths(error as InvalidInputError)).toContain('extension');
    }
    expect(calls()).toHaveLength(0);
  });

  it('PUT sends the bytes to upload_url with the returned content type and no auth headers', async () => {
    const { agent, client, calls } = harness();
    const rec = record('jpg', 'image/x-custom-jpeg');
    agent
      .get(UPLOADS)
      .intercept({ path: '/put/med_123.jpg?sig=abc', method: 'PUT', headers: { 'content-type': 'image/x-custom-jpeg' } })
      .reply(200, '');
    await client.media.put(rec, JPEG);
    const call = calls()[0];
    expect(call?.method).toBe('PUT');
    expect(header(call, 'authorization')).toBeUndefined();
    expect(header(call, 'hf-api-key')).toBeUndefined();
    expect(header(call, 'hf-secret')).toBeUndefined();
    expect(header(call, 'idempotency-key')).toBeUndefined();
  });

  it('confirm: POST /v1/agent/media/{id}/confirm with {type} -> uploaded or not_ready', async () => {
    const { agent, client, calls } = harness();
    const pool = agent.get(BASE);
    pool
      .intercept({ path: '/v1/agent/media/med_123.png/confirm', method: 'POST', headers: { authorization: AUTHORIZATION } })
      .reply(200, { status: 'not_ready' });
    pool.intercept({ path: '/v1/agent/media/med_123.png/confirm', method: 'POST' }).reply(200, { status: 'uploaded' });
    expect(await client.media.confirm(record('png', 'image/png'))).toBe('not_ready');
    expect(await client.media.confirm(record('png', 'image/png'))).toBe('uploaded');
    expect(jsonBody(calls()[0])).toEqual({ type: 'image' });
  });

  it('upload: create, PUT, confirm (not_ready then uploaded), and return the hosted url', async () => {
    const { agent, client, calls } = harness();
    const rec = record('png', 'image/png');
    const pool = agent.get(BASE);
    pool.intercept({ path: '/v1/agent/media', method: 'POST' }).reply(201, rec);
    agent.get(UPLOADS).intercept({ path: '/put/med_123.png?sig=abc', method: 'PUT' }).reply(200, '');
    pool.intercept({ path: '/v1/agent/media/med_123.png/confirm', method: 'POST' }).reply(200, { status: 'not_ready' });
    pool.intercept({ path: '/v1/agent/media/med_123.png/confirm', method: 'POST' }).reply(200, { status: 'uploaded' });
    expect(await client.media.upload(JPEG, 'png', 'image', { confirmDelayMs: 1 })).toBe(rec.url);
    expect(calls().map((c) => `${c.method} ${c.origin}${c.path}`)).toEqual([
      `POST ${BASE}/v1/agent/media`,
      `PUT ${UPLOADS}/put/med_123.png`,
      `POST ${BASE}/v1/agent/media/med_123.png/confirm`,
      `POST ${BASE}/v1/agent/media/med_123.png/confirm`,
    ]);
  });

  it('upload: still not_ready after every confirmation is an error', async () => {
    const { agent, client } = harness();
    const rec = record('png', 'image/png');
    agent.get(BASE).intercept({ path: '/v1/agent/media', method: 'POST' }).reply(201, rec);
    agent.get(UPLOADS).intercept({ path: '/put/med_123.png?sig=abc', method: 'PUT' }).reply(200, '');
    agent
      .get(BASE)
      .intercept({ path: '/v1/agent/media/med_123.png/confirm', method: 'POST' })
      .reply(200, { status: 'not_ready' })
      .persist();
    expect((await rejection(client.media.upload(JPEG, 'png', 'image', { confirmAttempts: 2, confirmDelayMs: 1 }))).code).toBe(
      'invalid_response',
    );
  });

  it('uploadLocalImage: a JPEG (even named .png) is uploaded with extension jpg, and the PUT carries the returned content type', async () => {
    const path = join(dir, 'photo.png');
    writeFileSync(path, JPEG);
    const { agent, client, calls } = harness();
    const rec = record('jpg', 'image/jpeg');
    agent.get(BASE).intercept({ path: '/v1/agent/media', method: 'POST' }).reply(201, rec);
    agent
      .get(UPLOADS)
      .intercept({ path: '/put/med_123.jpg?sig=abc', method: 'PUT', headers: { 'content-type': 'image/jpeg' } })
      .reply(200, '');
    agent.get(BASE).intercept({ path: '/v1/agent/media/med_123.jpg/confirm', method: 'POST' }).reply(200, { status: 'uploaded' });
    expect(await client.media.uploadLocalImage(path)).toBe(rec.url);
    expect(jsonBody(calls()[0])).toEqual({ extension: 'jpg', type: 'image' });
    expect(header(calls()[1], 'authorization')).toBeUndefined();
  });

  it('uploadLocalImage: a text file named .jpg is refused before any request', async () => {
    const path = join(dir, 'notes.jpg');
    writeFileSync(path, 'just some text, not an image');
    const { client, calls } = harness();
    expect((await rejection(client.media.uploadLocalImage(path))).code).toBe('invalid_file');
    expect(calls()).toHaveLength(0);
  });
});
