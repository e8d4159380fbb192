import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../src/api/errors.js';
import { redact } from '../../src/util/redact.js';
import type { DopParams, JobSet, SoulParams, SpeakParams } from '../../src/api/wire.js';
import {
  BASE,
  harness,
  header,
  issuePaths,
  JOB_ID,
  JOB_SET_ID,
  jsonBody,
  KEY_ID,
  KEY_SECRET,
  AUTHORIZATION,
  PLATFORM,
  rejection,
  submitted,
} from './helpers.js';

const UUID = '9b2f7c1e-4d3a-4e5b-8c6d-7e8f9a0b1c2d';
const jobSet = (type: JobSet['type']): JobSet => ({
  id: JOB_SET_ID,
  type,
  created_at: '2025-03-01T12:00:00.000Z',
  jobs: [{ id: JOB_ID, job_set_type: type, status: 'queued', results: null }],
  input_params: { prompt: 'x' },
});
const LEGACY_HEADERS = { 'hf-api-key': KEY_ID, 'hf-secret': KEY_SECRET, 'content-type': 'application/json' };

const dopParams: DopParams = {
  model: 'dop-turbo',
  prompt: 'slow push in',
  seed: 12,
  motions: [{ id: UUID, strength: 0.5 }],
  input_images: [{ type: 'image_url', image_url: 'https://img.test/start.png' }],
  input_images_end: [{ type: 'image_url', image_url: 'https://img.test/end.png' }],
  enhance_prompt: true,
};
const soulParams: SoulParams = {
  prompt: 'a portrait',
  width_and_height: '1536x2048',
  enhance_prompt: false,
  style_id: UUID,
  style_strength: 0.8,
  quality: 'high',
  seed: 3,
  custom_reference_id: UUID,
  custom_reference_strength: 0.4,
  image_reference: { type: 'image_url', image_url: 'https://img.test/ref.png' },
  batch_size: 2,
};
const speakParams: SpeakParams = {
  input_image: { type: 'image_url', image_url: 'https://img.test/face.png' },
  input_audio: { type: 'audio_url', audio_url: 'https://audio.test/voice.mp3' },
  prompt: 'say hello',
  quality: 'mid',
  enhance_prompt: false,
  seed: 9,
  duration: 5.5,
};

describe('§4.7 legacy platform endpoints (hf-api-key + hf-secret)', () => {
  it('DoP: POST {platform_url}/v1/image2video/dop with {webhook: null, params}', async () => {
    const { agent, client, calls } = harness();
    agent
      .get(PLATFORM)
      .intercept({ path: '/v1/image2video/dop', method: 'POST', headers: LEGACY_HEADERS })
      .reply(200, jobSet('image2video'));
    expect(await client.legacy.dop(dopParams)).toEqual(jobSet('image2video'));
    expect(jsonBody(calls()[0])).toEqual({ webhook: null, params: dopParams });
    expect(header(calls()[0], 'authorization')).toBeUndefined();
  });

  it('DoP: the webhook object {url, secret} is sent when given', async () => {
    const { agent, client, calls } = harness();
    agent.get(PLATFORM).intercept({ path: '/v1/image2video/dop', method: 'POST' }).reply(200, jobSet('image2video'));
    await client.legacy.dop({ prompt: 'x' }, { url: 'https://hooks.test/h', secret: 'whsec-123456' });
    expect(jsonBody(calls()[0])).toEqual({ webhook: { url: 'https://hooks.test/h', secret: 'whsec-123456' }, params: { prompt: 'x' } });
    // The webhook secret is now hidden from logs and messages like the key secret.
    expect(redact('delivery signed with whsec-123456')).toBe('delivery signed with [REDACTED]');
  });

  it('Soul: POST {platform_url}/v1/text2image/soul with {webhook, params}', async () => {
    const { agent, client, calls } = harness();
    agent
      .get(PLATFORM)
      .intercept({ path: '/v1/text2image/soul', method: 'POST', headers: LEGACY_HEADERS })
      .reply(200, jobSet('text2image_soul'));
    expect((await client.legacy.soul(soulParams)).type).toBe('text2image_soul');
    expect(jsonBody(calls()[0])).toEqual({ webhook: null, params: soulParams });
    expect(header(calls()[0], 'authorization')).toBeUndefined();
  });

  it('Speak: POST {platform_url}/v1/speak/{vendor} with params only (no webhook member)', async () => {
    const { agent, client, calls } = harness({ vendor: 'acme' });
    agent.get(PLATFORM).intercept({ path: '/v1/speak/acme', method: 'POST', headers: LEGACY_HEADERS }).reply(200, jobSet('image2video'));
    await client.legacy.speak(speakParams);
    expect(jsonBody(calls()[0])).toEqual({ params: speakParams });
    expect(jsonBody(calls()[0])).not.toHaveProperty('webhook');
  });

  it('params shapes: a wrong type or an unknown member is refused, naming the field, with zero requests', async () => {
    const { client, calls } = harness();
    const cases: [Promise<unknown>, string][] = [
      [client.legacy.dop({ seed: 1.5 }), 'params.seed'],
      [client.legacy.dop({ motions: [{ id: 'not-a-uuid', strength: 1 }] }), 'params.motions[0].id'],
      [client.legacy.soul({ style_id: 'nope' }), 'params.style_id'],
      [client.legacy.soul({ batch_size: 'two' } as never), 'params.batch_size'],
      [client.legacy.speak({ input_audio: { type: 'audio_url', image_url: 'x' } } as never), 'params.input_audio.audio_url'],
      [client.legacy.speak({ promt: 'typo' } as never), 'params.promt'],
      [client.legacy.dop({ prompt: 'x' }, { url: 'not a url', secret: 's' }), 'webhook.url'],
    ];
    expect(() => void client.legacy.dop({ seed: 1.5 }).catch(() => undefined)).not.toThrow();
    for (const [promise, path] of cases) {
      const error = await rejection(promise);
      expect(error).toBeInstanceOf(InvalidInputError);
      expect(issuePaths(error as InvalidInputError)).toContain(path);
    }
    expect(calls()).toHaveLength(0);
  });

  it('job-set status: GET {platform_url}/v1/job-sets/{id} with the legacy headers (beyond the spec)', async () => {
    const { agent, client, calls } = harness();
    agent
      .get(PLATFORM)
      .intercept({ path: `/v1/job-sets/${JOB_SET_ID}`, method: 'GET', headers: { 'hf-api-key': KEY_ID, 'hf-secret': KEY_SECRET } })
      .reply(200, {
        ...jobSet('image2video'),
        jobs: [
          {
            id: JOB_ID,
            job_set_type: 'image2video',
            status: 'completed',
            results: { min: { type: 'video', url: 'https://cdn.test/min.mp4' }, raw: { type: 'video', url: 'https://cdn.test/raw.mp4' } },
          },
        ],
      });
    const result = await client.legacy.jobSet(JOB_SET_ID);
    expect(result.jobs[0]?.results?.raw.url).toBe('https://cdn.test/raw.mp4');
    expect(header(calls()[0], 'authorization')).toBeUndefined();
  });

  it("a job set of a type outside the spec's two (Speak has none) is still read, not refused after it was paid for", async () => {
    const { agent, client } = harness();
    agent
      .get(PLATFORM)
      .intercept({ path: `/v1/job-sets/${JOB_SET_ID}` })
      .reply(200, { ...jobSet('image2video'), type: 'speak' });
    expect((await client.legacy.jobSet(JOB_SET_ID)).type).toBe('speak');
  });

  it('a job set without its jobs breaks the spec (a protocol error)', async () => {
    const { agent, client } = harness();
    const { jobs: _jobs, ...withoutJobs } = jobSet('image2video');
    agent
      .get(PLATFORM)
      .intercept({ path: `/v1/job-sets/${JOB_SET_ID}` })
      .reply(200, withoutJobs);
    expect((await rejection(client.legacy.jobSet(JOB_SET_ID))).code).toBe('protocol');
  });
});

describe('§4.8 webhook-enabled path: POST {platform_url}/{vendor}-ai/soul/standard?hf_webhook=', () => {
  it('sends prompt, aspect_ratio, resolution with Authorization and the webhook URL as hf_webhook', async () => {
    const { agent, client, calls } = harness();
    const hook = 'https://hooks.test/genpipe?token=abc&x=1';
    agent
      .get(PLATFORM)
      .intercept({
        path: '/vendor-ai/soul/standard',
        method: 'POST',
        query: { hf_webhook: hook },
        headers: { authorization: AUTHORIZATION },
      })
      .reply(200, submitted());
    const body = { prompt: 'a cat', aspect_ratio: '1:1', resolution: '720p' };
    expect((await client.soulStandard.submit(body, { webhookUrl: hook })).request_id).toBe(submitted().request_id);
    expect(jsonBody(calls()[0])).toEqual(body);
    expect(calls()[0]?.searchParams).toEqual({ hf_webhook: hook });
    expect(header(calls()[0], 'hf-secret')).toBeUndefined();
  });

  it('without a webhook URL, no hf_webhook parameter is sent', async () => {
    const { agent, client, calls } = harness({ vendor: 'acme' });
    agent.get(PLATFORM).intercept({ path: '/acme-ai/soul/standard', method: 'POST' }).reply(200, submitted());
    await client.soulStandard.submit({ prompt: 'a cat', aspect_ratio: '1:1', resolution: '720p' });
    expect(calls()[0]?.searchParams).toEqual({});
  });

  it('prompt, aspect_ratio and resolution are required strings — missing one is refused with zero requests', async () => {
    const { client, calls } = harness();
    const error = await rejection(client.soulStandard.submit({ prompt: 'a cat', aspect_ratio: '1:1' } as never));
    expect(issuePaths(error as InvalidInputError)).toContain('resolution');
    expect(calls()).toHaveLength(0);
  });

  it('goes to the platform address, not the base address', async () => {
    const { agent, client, calls } = harness();
    agent.get(PLATFORM).intercept({ path: '/vendor-ai/soul/standard', method: 'POST' }).reply(200, submitted());
    await client.soulStandard.submit({ prompt: 'p', aspect_ratio: '1:1', resolution: '720p' });
    expect(calls()[0]?.origin).toBe(PLATFORM);
    expect(calls()[0]?.origin).not.toBe(BASE);
  });
});
