/** Media, presets, marketing modes, legacy outputs, inspection endpoints, accounts and auth details. */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accountFromPair, accountsFromFile } from '../../src/emulator/accounts.js';
import { isLoopbackAddress } from '../../src/emulator/loopback.js';
import { drawArt } from '../../src/emulator/png.js';
import type { Emulator } from '../../src/emulator/start-emulator.js';
import { AUTH, http, LEGACY_AUTH, start, until } from './helpers.js';

let emu: Emulator;
beforeAll(async () => {
  emu = await start({
    accounts: [
      { keyId: '00000000-0000-4000-8000-000000000000', secret: 'emulator-secret', credits: 100_000, agentEnabled: true },
      { keyId: '44444444-4444-4444-8444-444444444444', secret: 'second-secret', credits: 100, agentEnabled: true },
    ],
  });
});
afterAll(() => emu.close());
const OTHER = { authorization: 'Key 44444444-4444-4444-8444-444444444444:second-secret' };

describe('auth (§5)', () => {
  it('401 without credentials, with a malformed header, and with a wrong secret', async () => {
    expect((await http(emu, 'GET', '/requests/x/status')).status).toBe(401);
    expect((await http(emu, 'GET', '/requests/x/status', { headers: { authorization: 'Bearer abc' } })).status).toBe(401);
    const wrong = await http(emu, 'GET', '/requests/x/status', {
      headers: { authorization: 'Key 00000000-0000-4000-8000-000000000000:nope' },
    });
    expect(wrong.status).toBe(401);
    expect(wrong.json.detail).not.toContain('nope');
    expect(
      (
        await http(emu, 'POST', '/v1/text2image/soul', {
          headers: { 'hf-api-key': 'not-a-uuid', 'hf-secret': 'emulator-secret' },
          json: { params: {} },
        })
      ).status,
    ).toBe(401);
    expect((await http(emu, 'POST', '/v1/text2image/soul', { headers: AUTH, json: { params: {} } })).status).toBe(401);
  });

  it('the options catalog needs no auth', async () => {
    expect((await http(emu, 'GET', '/models/vendor/ai-influencer/options')).status).toBe(200);
  });

  it('unknown paths are 404 and wrong methods 405, both with a detail', async () => {
    const missing = await http(emu, 'GET', '/nope');
    expect(missing.status).toBe(404);
    expect(missing.json.detail).toMatch(/no route/);
    const method = await http(emu, 'PUT', '/requests/x/status');
    expect(method.status).toBe(405);
    expect(method.headers.allow).toBe('GET');
  });
});

describe('media upload flow', () => {
  it('creates a record with an extension-based id and content type', async () => {
    const r = await http(emu, 'POST', '/v1/agent/media', { headers: AUTH, json: { extension: 'WAV', type: 'audio' } });
    expect(r.status).toBe(201);
    expect(r.json.id).toMatch(/^[0-9a-f-]{36}\.wav$/);
    expect(r.json.content_type).toBe('audio/wav');
    expect(r.json.type).toBe('audio');
  });

  it('refuses a type that contradicts the extension', async () => {
    const r = await http(emu, 'POST', '/v1/agent/media', { headers: AUTH, json: { extension: 'mp3', type: 'image' } });
    expect(r.status).toBe(422);
    expect(r.json.detail).toMatch(/^extension: /);
  });

  it('PUT refuses a wrong content type (415) and a wrong signature (403); confirm stays not_ready', async () => {
    const rec = (await http(emu, 'POST', '/v1/agent/media', { headers: AUTH, json: { extension: 'png', type: 'image' } })).json;
    const path = new URL(rec.upload_url);
    const wrong = await http(emu, 'PUT', path.pathname + path.search, {
      headers: { 'content-type': 'image/jpeg' },
      body: Buffer.from('x'),
    });
    expect(wrong.status).toBe(415);
    const forged = await http(emu, 'PUT', `${path.pathname}?signature=forged`, {
      headers: { 'content-type': 'image/png' },
      body: Buffer.from('x'),
    });
    expect(forged.status).toBe(403);
    const confirm = await http(emu, 'POST', `/v1/agent/media/${encodeURIComponent(rec.id)}/confirm`, {
      headers: AUTH,
      json: { type: 'image' },
    });
    expect(confirm.json.status).toBe('not_ready');
    expect((await http(emu, 'GET', new URL(rec.url).pathname)).status).toBe(404);
    expect(
      (await http(emu, 'POST', `/v1/agent/media/${encodeURIComponent(rec.id)}/confirm`, { headers: OTHER, json: { type: 'image' } }))
        .status,
    ).toBe(404);
  });

  it('uploaded media can be referenced as a character-sheet image_url', async () => {
    const rec = (await http(emu, 'POST', '/v1/agent/media', { headers: AUTH, json: { extension: 'png', type: 'image' } })).json;
    const path = new URL(rec.upload_url);
    // A real PNG: the image rules (§4.2) decode what a sheet is given.
    const png = drawArt({ width: 16, height: 9, seedText: 'upload', layout: 'render' });
    expect((await http(emu, 'PUT', path.pathname + path.search, { headers: { 'content-type': 'image/png' }, body: png })).status).toBe(200);
    const served = await http(emu, 'GET', new URL(rec.url).pathname);
    expect(served.headers['content-type']).toBe('image/png');
    expect((await http(emu, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: { image_url: rec.url } })).status).toBe(200);
  });
});

describe('presets (§2.6, §4.5)', () => {
  it('pages with size and cursor, listing only visible presets, until cursor is null', async () => {
    const seen: string[] = [];
    let cursor: string | null = null;
    let total = -1;
    for (let i = 0; i < 20; i++) {
      const page: any = (
        await http(emu, 'GET', `/marketing-studio/image/presets?size=4${cursor ? `&cursor=${cursor}` : ''}`, { headers: AUTH })
      ).json;
      total = page.total;
      expect(page.items.length).toBeLessThanOrEqual(4);
      for (const item of page.items) expect(item.type).toBe('ads');
      seen.push(...page.items.map((p: any) => p.id));
      cursor = page.cursor;
      if (cursor === null) break;
    }
    expect(cursor).toBeNull();
    expect(seen).toHaveLength(total);
    expect(new Set(seen).size).toBe(total);
    const hidden = emu.presets.presets.filter((p) => !p.visible).map((p) => p.id);
    expect(hidden.length).toBeGreaterThan(0);
    for (const id of hidden) expect(seen).not.toContain(id);
  });

  it('visibility changes at runtime: a hidden preset leaves the list and is refused in enhanced mode', async () => {
    const id = emu.presets.visible()[0]!.id;
    const body = { prompt: 'p', enhance_prompt: true, preset_id: id, image_urls: ['https://example.com/product.png'] };
    expect((await http(emu, 'POST', '/marketing-studio/image/sunburst', { headers: AUTH, json: body })).status).toBe(200);
    expect((await http(emu, 'POST', `/_emulator/presets/${id}`, { json: { visible: false } })).status).toBe(200);
    const page = (await http(emu, 'GET', '/marketing-studio/image/presets?size=100', { headers: AUTH })).json;
    expect(page.items.map((p: any) => p.id)).not.toContain(id);
    const refused = await http(emu, 'POST', '/marketing-studio/image/sunburst', { headers: AUTH, json: body });
    expect(refused.status).toBe(422);
    expect(refused.json.detail).toMatch(/^preset_id: /);
    emu.setPresetVisibility(id, true);
  });

  it('refuses a bad size (422) and an unknown cursor (400); needs auth', async () => {
    expect((await http(emu, 'GET', '/marketing-studio/image/presets?size=0', { headers: AUTH })).status).toBe(422);
    expect((await http(emu, 'GET', '/marketing-studio/image/presets?size=abc', { headers: AUTH })).status).toBe(422);
    expect((await http(emu, 'GET', '/marketing-studio/image/presets?cursor=zzz', { headers: AUTH })).status).toBe(400);
    expect((await http(emu, 'GET', '/marketing-studio/image/presets')).status).toBe(401);
  });
});

describe('marketing image modes (§4.4)', () => {
  const submit = (json: unknown) => http(emu, 'POST', '/marketing-studio/image/sunburst', { headers: AUTH, json });

  it('enhanced mode needs preset_id and one product image', async () => {
    expect((await submit({ prompt: 'p', enhance_prompt: true, image_urls: ['https://e.com/a.png'] })).json.detail).toMatch(/preset_id/);
    const id = emu.presets.visible()[0]!.id;
    expect((await submit({ prompt: 'p', enhance_prompt: true, preset_id: id })).json.detail).toMatch(/image_urls/);
    expect(
      (
        await submit({
          prompt: 'p',
          enhance_prompt: true,
          preset_id: id,
          image_urls: ['https://e.com/a.png', 'https://e.com/b.png', 'https://e.com/c.png'],
        })
      ).status,
    ).toBe(422);
  });

  it('enhanced auto uses the preset aspect ratio and keeps quality; no person without a model reference', async () => {
    const preset = emu.presets.visible().find((p) => p.aspectRatio === '9:16')!;
    const r = await submit({
      prompt: 'p',
      enhance_prompt: true,
      preset_id: preset.id,
      image_urls: ['https://e.com/a.png'],
      quality: 'low',
    });
    const req = emu.requests.get(r.json.request_id)!;
    expect(req.details).toMatchObject({ mode: 'enhanced', aspect_ratio: '9:16', quality: 'low', person: false });
    expect(req.art.height).toBeGreaterThan(req.art.width);
    const withModel = await submit({
      prompt: 'p',
      enhance_prompt: true,
      preset_id: preset.id,
      image_urls: ['https://e.com/a.png', 'https://e.com/model.png'],
    });
    expect(emu.requests.get(withModel.json.request_id)!.details.person).toBe(true);
  });

  it('direct mode generates without image_urls and edits with them; defaults 2k and high', async () => {
    const gen = await submit({ prompt: 'a poster' });
    expect(emu.requests.get(gen.json.request_id)!.details).toMatchObject({ mode: 'direct-generate', resolution: '2k', quality: 'high' });
    const edit = await submit({ prompt: 'make it blue', image_urls: ['https://e.com/a.png'] });
    expect(emu.requests.get(edit.json.request_id)!.details.mode).toBe('direct-edit');
    expect((await submit({})).status).toBe(422);
    expect((await submit({ prompt: 'x', image_urls: Array.from({ length: 17 }, (_, i) => `https://e.com/${i}.png`) })).status).toBe(422);
  });
});

describe('legacy outputs', () => {
  async function finished(setId: string) {
    return until(async () => {
      const s = (await http(emu, 'GET', `/v1/job-sets/${setId}`, { headers: LEGACY_AUTH })).json;
      return s.jobs.every((j: any) => j.status === 'completed') ? s : undefined;
    });
  }

  it('Speak: min is a valid WAV, raw a video/mp4', async () => {
    const set = (await http(emu, 'POST', '/v1/speak/vendor', { headers: LEGACY_AUTH, json: { params: { prompt: 'hello' } } })).json;
    expect(set.type).toBe('image2video');
    expect(set.jobs[0].status).toBe('queued');
    const done = await finished(set.id);
    const wav = await http(emu, 'GET', new URL(done.jobs[0].results.min.url).pathname);
    expect(wav.headers['content-type']).toBe('audio/wav');
    const b = wav.bytes;
    expect(b.toString('ascii', 0, 4)).toBe('RIFF');
    expect(b.readUInt32LE(4)).toBe(b.length - 8);
    expect(b.toString('ascii', 8, 16)).toBe('WAVEfmt ');
    expect(b.readUInt16LE(20)).toBe(1);
    expect(b.toString('ascii', 36, 40)).toBe('data');
    expect(b.readUInt32LE(40)).toBe(b.length - 44);
    const mp4 = await http(emu, 'GET', new URL(done.jobs[0].results.raw.url).pathname);
    expect(mp4.headers['content-type']).toBe('video/mp4');
    expect(mp4.bytes.toString('ascii', 4, 8)).toBe('ftyp');
  });

  it('Soul min and raw are PNGs; job sets of another account are 404', async () => {
    const set = (
      await http(emu, 'POST', '/v1/text2image/soul', {
        headers: LEGACY_AUTH,
        json: { params: { prompt: 'cat', width_and_height: '1536x1024' } },
      })
    ).json;
    const done = await finished(set.id);
    const min = await http(emu, 'GET', new URL(done.jobs[0].results.min.url).pathname);
    const raw = await http(emu, 'GET', new URL(done.jobs[0].results.raw.url).pathname);
    expect(min.headers['content-type']).toBe('image/png');
    expect(raw.bytes.readUInt32BE(16)).toBeGreaterThan(min.bytes.readUInt32BE(16));
    const other = await http(emu, 'GET', `/v1/job-sets/${set.id}`, {
      headers: { 'hf-api-key': '44444444-4444-4444-8444-444444444444', 'hf-secret': 'second-secret' },
    });
    expect(other.status).toBe(404);
    expect((await http(emu, 'POST', '/v1/text2image/soul', { headers: LEGACY_AUTH, json: { params: { batch_size: 9 } } })).status).toBe(
      422,
    );
    expect(
      (await http(emu, 'POST', '/v1/speak/vendor', { headers: LEGACY_AUTH, json: { webhook: null, params: {} } })).json.detail,
    ).toMatch(/^webhook: unknown field/);
  });
});

describe('inspection (/_emulator)', () => {
  it('requests lists account, model path, idempotency key, body hash and status', async () => {
    await http(emu, 'POST', '/vendor/ai-influencer', { headers: { ...AUTH, 'idempotency-key': 'inspect-me' }, json: { brief: 'b' } });
    const rows = (await http(emu, 'GET', '/_emulator/requests')).json.requests;
    const row = rows.find((r: any) => r.idempotency_key === 'inspect-me');
    expect(row).toMatchObject({ key_id: '00000000-0000-4000-8000-000000000000', model_path: '/vendor/ai-influencer' });
    expect(row.body_hash).toMatch(/^[0-9a-f]{64}$/);
    expect(['queued', 'in_progress', 'completed']).toContain(row.status);
  });

  it('stats count by route and report the peak in flight; reset starts a new window', async () => {
    const stats = (await http(emu, 'GET', '/_emulator/stats')).json;
    expect(stats.by_route['POST /vendor/ai-influencer']).toBeGreaterThan(0);
    expect(stats.peak_in_flight).toBeGreaterThanOrEqual(1);
    await Promise.all(Array.from({ length: 8 }, () => http(emu, 'GET', '/models/vendor/ai-influencer/options')));
    const reset = (await http(emu, 'POST', '/_emulator/stats/reset')).json;
    expect(reset.by_route).toEqual({});
    expect((await http(emu, 'GET', '/_emulator/stats')).json.by_route['GET /_emulator/stats']).toBe(1);
  });

  it('is loopback only', () => {
    expect(isLoopbackAddress('127.0.0.1')).toBe(true);
    expect(isLoopbackAddress('::1')).toBe(true);
    expect(isLoopbackAddress('::ffff:127.0.0.5')).toBe(true);
    expect(isLoopbackAddress('10.0.0.1')).toBe(false);
    expect(isLoopbackAddress('::ffff:192.168.1.2')).toBe(false);
  });

  it('the catalog switches work over HTTP too', async () => {
    await http(emu, 'POST', '/_emulator/catalog', { json: { hidden: true } });
    expect((await http(emu, 'GET', '/models/vendor/ai-influencer/options')).status).toBe(404);
    await http(emu, 'POST', '/_emulator/catalog', { json: { hidden: false } });
    expect((await http(emu, 'GET', '/models/vendor/ai-influencer/options')).status).toBe(200);
  });
});

describe('accounts', () => {
  const dir = mkdtempSync(join(tmpdir(), 'genpipe-accounts-'));

  it('reads YAML and JSON accounts files with defaults', () => {
    const yaml = join(dir, 'a.yaml');
    writeFileSync(
      yaml,
      'accounts:\n  - key_id: alice\n    secret: alice-secret\n    credits: 10\n    agent_enabled: false\n  - key_id: bob\n    secret: bob-secret\n',
    );
    expect(accountsFromFile(yaml)).toEqual([
      { keyId: 'alice', secret: 'alice-secret', credits: 10, agentEnabled: false },
      { keyId: 'bob', secret: 'bob-secret', credits: 1_000_000, agentEnabled: true },
    ]);
    const json = join(dir, 'a.json');
    writeFileSync(json, JSON.stringify({ accounts: [{ key_id: 'carol', secret: 'carol-secret' }] }));
    expect(accountsFromFile(json)[0]!.keyId).toBe('carol');
  });

  it('refuses a bad accounts file naming file:line:col and the field', () => {
    const bad = join(dir, 'bad.yaml');
    writeFileSync(bad, 'accounts:\n  - key_id: alice\n    secret: s\n    credits: -5\n');
    expect(() => accountsFromFile(bad)).toThrow(/bad\.yaml:4:14: accounts\[0\]\.credits: /);
    writeFileSync(bad, 'accounts:\n  - key_id: a\n    secret: s\n  - key_id: a\n    secret: t\n');
    expect(() => accountsFromFile(bad)).toThrow(/appears twice/);
  });

  it('--account ID:SECRET', () => {
    expect(accountFromPair('dave:pa:ss')).toMatchObject({ keyId: 'dave', secret: 'pa:ss', agentEnabled: true });
    expect(() => accountFromPair('nocolon')).toThrow(/KEY_ID:SECRET/);
  });
});
