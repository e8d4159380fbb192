import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../src/api/errors.js';
import { buildMarketingImageRequest } from '../../src/api/marketing-image.js';
import { ASPECT_RATIOS, QUALITIES, RESOLUTIONS, type Preset } from '../../src/api/wire.js';
import { AUTHORIZATION, BASE, harness, invalid, issuePaths, jsonBody, rejection, submitted } from './helpers.js';

const PRESET_ID = '3fa85f64-5717-4562-b3fc-2c963f66afa6';
const img = (n: number): string[] => Array.from({ length: n }, (_, i) => `https://img.test/${i}.png`);
const refuses = (input: Record<string, unknown>, path: string): void => {
  expect(issuePaths(invalid(() => buildMarketingImageRequest(input)))).toContain(path);
};

describe('§4.4 marketing image body rules', () => {
  it('defaults: resolution 2k, quality high, direct mode (enhance_prompt false)', () => {
    expect(buildMarketingImageRequest({ prompt: 'a lamp' })).toEqual({
      prompt: 'a lamp',
      resolution: '2k',
      quality: 'high',
      enhance_prompt: false,
    });
  });

  it('explicit values win over the defaults', () => {
    expect(buildMarketingImageRequest({ prompt: 'x', resolution: '4k', quality: 'max' })).toMatchObject({
      resolution: '4k',
      quality: 'max',
      enhance_prompt: false,
    });
  });

  it('a member present but undefined still gets its default', () => {
    expect(buildMarketingImageRequest({ prompt: 'x', resolution: undefined, quality: undefined, enhance_prompt: undefined })).toEqual({
      prompt: 'x',
      resolution: '2k',
      quality: 'high',
      enhance_prompt: false,
    });
  });

  it('resolution: 1k, 2k, 4k — accepted; 8k and 2K refused', () => {
    for (const resolution of RESOLUTIONS) expect(buildMarketingImageRequest({ prompt: 'x', resolution }).resolution).toBe(resolution);
    expect([...RESOLUTIONS]).toEqual(['1k', '2k', '4k']);
    refuses({ resolution: '8k' }, 'resolution');
    refuses({ resolution: '2K' }, 'resolution');
  });

  it('aspect_ratio: auto, 1:1, 3:2, 2:3, 4:3, 3:4, 16:9, 9:16, 21:9 — accepted; 5:4 refused', () => {
    expect([...ASPECT_RATIOS]).toEqual(['auto', '1:1', '3:2', '2:3', '4:3', '3:4', '16:9', '9:16', '21:9']);
    for (const aspect_ratio of ASPECT_RATIOS)
      expect(buildMarketingImageRequest({ prompt: 'x', aspect_ratio }).aspect_ratio).toBe(aspect_ratio);
    refuses({ aspect_ratio: '5:4' }, 'aspect_ratio');
  });

  it('quality: low, medium, high, xhigh, max — accepted; ultra refused', () => {
    expect([...QUALITIES]).toEqual(['low', 'medium', 'high', 'xhigh', 'max']);
    for (const quality of QUALITIES) expect(buildMarketingImageRequest({ prompt: 'x', quality }).quality).toBe(quality);
    refuses({ quality: 'ultra' }, 'quality');
  });

  it('image_urls: up to 16 — 16 accepted, 17 refused; each must be a URL', () => {
    expect(buildMarketingImageRequest({ prompt: 'edit', image_urls: img(16) }).image_urls).toHaveLength(16);
    refuses({ image_urls: img(17) }, 'image_urls');
    refuses({ image_urls: ['local.png'] }, 'image_urls[0]');
  });

  it('direct mode: image_urls omitted generates, supplied edits — both accepted', () => {
    expect(buildMarketingImageRequest({ prompt: 'generate' })).not.toHaveProperty('image_urls');
    expect(buildMarketingImageRequest({ prompt: 'edit', image_urls: img(1) }).image_urls).toEqual(img(1));
  });

  it('direct mode without image_urls needs a prompt (the emulator decides what the spec does not show, and the client agrees) — refused when empty or missing', () => {
    refuses({}, 'prompt');
    refuses({ prompt: '   ' }, 'prompt');
    refuses({ enhance_prompt: false, image_urls: [] }, 'prompt');
    expect(buildMarketingImageRequest({ image_urls: img(1) }).image_urls).toEqual(img(1));
  });

  it('preset_id: a uuid — accepted; a name refused', () => {
    expect(buildMarketingImageRequest({ prompt: 'x', preset_id: PRESET_ID }).preset_id).toBe(PRESET_ID);
    refuses({ preset_id: 'summer-sale' }, 'preset_id');
  });

  it('enhanced mode requires preset_id and one product image — accepted with both, refused without preset_id', () => {
    expect(buildMarketingImageRequest({ enhance_prompt: true, preset_id: PRESET_ID, image_urls: img(1) })).toMatchObject({
      enhance_prompt: true,
      quality: 'high',
    });
    refuses({ enhance_prompt: true, image_urls: img(1) }, 'preset_id');
  });

  it('enhanced mode requires one product image — refused with none', () => {
    refuses({ enhance_prompt: true, preset_id: PRESET_ID }, 'image_urls');
    refuses({ enhance_prompt: true, preset_id: PRESET_ID, image_urls: [] }, 'image_urls');
  });

  it('enhanced mode: a second image is an optional model reference — 2 accepted; a third refused', () => {
    expect(buildMarketingImageRequest({ enhance_prompt: true, preset_id: PRESET_ID, image_urls: img(2) }).image_urls).toHaveLength(2);
    refuses({ enhance_prompt: true, preset_id: PRESET_ID, image_urls: img(3) }, 'image_urls');
  });

  it('an unknown field is refused', () => {
    refuses({ prompt: 'x', negative_prompt: 'y' }, 'negative_prompt');
  });
});

describe('marketing image submit: POST {base_url}/marketing-studio/image/sunburst', () => {
  it('sends method, path, Authorization and the JSON body, and returns the request id', async () => {
    const { agent, client, calls } = harness();
    const body = buildMarketingImageRequest({ prompt: 'a lamp on a desk', aspect_ratio: '16:9' });
    agent
      .get(BASE)
      .intercept({
        path: '/marketing-studio/image/sunburst',
        method: 'POST',
        headers: { authorization: AUTHORIZATION, 'content-type': 'application/json' },
      })
      .reply(200, { request_id: submitted().request_id });
    expect((await client.marketingImage.submit(body)).request_id).toBe(submitted().request_id);
    expect(jsonBody(calls()[0])).toEqual({
      prompt: 'a lamp on a desk',
      aspect_ratio: '16:9',
      resolution: '2k',
      quality: 'high',
      enhance_prompt: false,
    });
  });

  it('with a webhook URL, sends it as ?hf_webhook=', async () => {
    const { agent, client, calls } = harness();
    const hook = 'https://hooks.example.test/run/abc123';
    agent
      .get(BASE)
      .intercept({ path: '/marketing-studio/image/sunburst', method: 'POST', query: { hf_webhook: hook } })
      .reply(200, submitted());
    await client.marketingImage.submit({ prompt: 'a shoe' }, { webhookUrl: hook });
    expect(calls()[0]?.searchParams).toEqual({ hf_webhook: hook });
  });

  it('a refused body sends zero requests and raises invalid_input naming the field', async () => {
    const { client, calls } = harness();
    const error = await rejection(client.marketingImage.submit({ enhance_prompt: true, image_urls: img(1) }));
    expect(error).toBeInstanceOf(InvalidInputError);
    expect(error.code).toBe('invalid_input');
    expect(issuePaths(error as InvalidInputError)).toContain('preset_id');
    expect(calls()).toHaveLength(0);
  });
});

describe('§4.5 preset catalog: every page, following cursor', () => {
  const preset = (n: number): Preset => ({ id: `00000000-0000-4000-8000-00000000000${n}`, type: 'ads', name: `Preset ${n}` });

  it('iterates 3 pages, sending size and cursor as query parameters, with Authorization', async () => {
    const { agent, client, calls } = harness();
    const pool = agent.get(BASE);
    const path = '/marketing-studio/image/presets';
    pool
      .intercept({ path, query: { size: '2' }, headers: { authorization: AUTHORIZATION } })
      .reply(200, { total: 5, cursor: 'c-2', items: [preset(1), preset(2)] });
    pool.intercept({ path, query: { size: '2', cursor: 'c-2' } }).reply(200, { total: 5, cursor: 'c-3', items: [preset(3), preset(4)] });
    pool.intercept({ path, query: { size: '2', cursor: 'c-3' } }).reply(200, { total: 5, cursor: null, items: [preset(5)] });
    const seen: string[] = [];
    for await (const item of client.marketingImage.presets({ pageSize: 2 })) seen.push(item.name);
    expect(seen).toEqual(['Preset 1', 'Preset 2', 'Preset 3', 'Preset 4', 'Preset 5']);
    expect(calls().map((c) => c.searchParams)).toEqual([{ size: '2' }, { size: '2', cursor: 'c-2' }, { size: '2', cursor: 'c-3' }]);
    expect(calls().every((c) => c.method === 'GET' && c.path === path)).toBe(true);
  });

  it('a single page with cursor null ends the iteration after one request', async () => {
    const { agent, client, calls } = harness();
    agent
      .get(BASE)
      .intercept({ path: '/marketing-studio/image/presets', query: { size: '50' } })
      .reply(200, { total: 1, cursor: null, items: [preset(1)] });
    const items: Preset[] = [];
    for await (const item of client.marketingImage.presets()) items.push(item);
    expect(items).toEqual([preset(1)]);
    expect(calls()).toHaveLength(1);
  });

  it('a cursor that repeats stops the iteration instead of looping forever', async () => {
    const { agent, client, calls } = harness();
    const pool = agent.get(BASE);
    pool
      .intercept({ path: '/marketing-studio/image/presets', query: { size: '1' } })
      .reply(200, { total: 9, cursor: 'same', items: [preset(1)] });
    pool
      .intercept({ path: '/marketing-studio/image/presets', query: { size: '1', cursor: 'same' } })
      .reply(200, { total: 9, cursor: 'same', items: [preset(2)] });
    const items: Preset[] = [];
    for await (const item of client.marketingImage.presets({ pageSize: 1 })) items.push(item);
    expect(items.map((p) => p.name)).toEqual(['Preset 1', 'Preset 2']);
    expect(calls()).toHaveLength(2);
  });

  it('an item that is not a usable preset (type other than ads) is a protocol error', async () => {
    const { agent, client } = harness();
    agent
      .get(BASE)
      .intercept({ path: '/marketing-studio/image/presets', query: { size: '50' } })
      .reply(200, { total: 1, cursor: null, items: [{ ...preset(1), type: 'video' }] });
    expect((await rejection(client.marketingImage.presetPage())).code).toBe('protocol');
  });
});
