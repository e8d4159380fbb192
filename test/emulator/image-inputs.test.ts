/**
 * §4.2 image URL rules ("reachable by the service; non-animated JPEG, PNG or WebP; at most 64 MiB
 * each; must pass decoding and validation") on the inputs the emulator can see: loopback URLs, its
 * own media and outputs. URLs it cannot reach: accepted offline by default, refused when strict.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { crc32 } from 'node:zlib';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { imageProblem, MAX_IMAGE_BYTES } from '../../src/emulator/image-inputs.js';
import type { Emulator } from '../../src/emulator/start-emulator.js';
import { AUTH, http, start, until } from './helpers.js';

const still = (format: 'png' | 'jpeg' | 'webp') => {
  const image = sharp({ create: { width: 8, height: 6, channels: 3, background: '#3366aa' } });
  return (format === 'png' ? image.png() : format === 'jpeg' ? image.jpeg() : image.webp()).toBuffer();
};

/** A PNG with an acTL chunk before its image data: an APNG, which libvips would decode as a still. */
function apng(png: Buffer): Buffer {
  const data = Buffer.alloc(8);
  data.writeUInt32BE(2, 0);
  const chunk = Buffer.alloc(20);
  chunk.writeUInt32BE(8, 0);
  chunk.write('acTL', 4, 'latin1');
  data.copy(chunk, 8);
  chunk.writeUInt32BE(crc32(chunk.subarray(4, 16)), 16);
  const ihdrEnd = 8 + 25;
  return Buffer.concat([png.subarray(0, ihdrEnd), chunk, png.subarray(ihdrEnd)]);
}

let emu: Emulator;
let strict: Emulator;
let files: Server;
let origin: string;
const served: Record<string, { bytes: Buffer; length?: number }> = {};

beforeAll(async () => {
  const png = await still('png');
  const frame = (c: string) =>
    sharp({ create: { width: 4, height: 4, channels: 4, background: c } })
      .png()
      .toBuffer();
  Object.assign(served, {
    '/ok.png': { bytes: png },
    '/photo': { bytes: png },
    '/still.jpg': { bytes: await still('jpeg') },
    '/still.webp': { bytes: await still('webp') },
    '/anim.webp': {
      bytes: await sharp([await frame('red'), await frame('blue')], { join: { animated: true } })
        .webp()
        .toBuffer(),
    },
    '/anim.png': { bytes: apng(png) },
    '/text.png': { bytes: Buffer.from('this is not a png') },
    '/cut.png': { bytes: png.subarray(0, png.length - 20) },
    '/big.png': { bytes: png, length: MAX_IMAGE_BYTES + 1 },
  });
  files = createServer((req, res) => {
    const f = served[req.url ?? ''];
    if (!f) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-length': String(f.length ?? f.bytes.length) });
    // A declared length over the limit is refused from the header: the rest of the body never comes.
    if (f.length !== undefined) res.write(f.bytes);
    else res.end(f.bytes);
  });
  await new Promise<void>((r) => files.listen(0, '127.0.0.1', r));
  origin = `http://127.0.0.1:${(files.address() as AddressInfo).port}`;
  emu = await start();
  strict = await start({ strictImageUrls: true });
});
afterAll(async () => {
  await emu.close();
  await strict.close();
  await new Promise((r) => files.close(r));
});

const sheet = (target: Emulator, body: unknown) => http(target, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: body });

/** Submits, and checks a refusal names the field and leaves the ledger and the requests untouched. */
async function refused(target: Emulator, body: unknown, detail: RegExp): Promise<void> {
  const entries = target.ledger.entries.length;
  const count = target.requests.byId.size;
  const r = await sheet(target, body);
  expect(r.status).toBe(422);
  expect(r.json.detail).toMatch(detail);
  expect(target.ledger.entries.length).toBe(entries);
  expect(target.requests.byId.size).toBe(count);
}

async function accepted(target: Emulator, body: unknown): Promise<void> {
  const r = await sheet(target, body);
  expect(r.status).toBe(200);
  expect(target.ledger.entries.find((e) => e.request_id === r.json.request_id && e.kind === 'charge')).toBeDefined();
}

describe('loopback URLs are fetched, sniffed and decoded', () => {
  it.each(['/ok.png', '/photo', '/still.jpg', '/still.webp'])(
    'accepts the still image at %s (a URL without extension by what it serves)',
    async (path) => {
      await accepted(emu, { image_url: `${origin}${path}` });
    },
  );

  it.each([
    ['/anim.webp', /^image_url: the image is an animated WebP/],
    ['/anim.png', /^image_url: the image is an animated PNG/],
    ['/text.png', /^image_url: the image is not a JPEG, PNG or WebP image/],
    ['/cut.png', /^image_url: the image does not decode as a PNG image/],
    ['/big.png', /^image_url: the image is larger than 64 MiB/],
    ['/missing.png', /^image_url: the image is not reachable \(HTTP 404\)/],
  ])('refuses %s with the shape of any invalid input, charging nothing', async (path, detail) => {
    await refused(emu, { image_url: `${origin}${path}` }, detail);
  });

  it('names the item reference that fails, and applies to marketing image_urls', async () => {
    await refused(emu, { item_image_urls: [`${origin}/ok.png`, `${origin}/text.png`] }, /^item_image_urls\[1\]: /);
    const entries = emu.ledger.entries.length;
    const r = await http(emu, 'POST', '/marketing-studio/image/sunburst', {
      headers: AUTH,
      json: { prompt: 'edit', image_urls: [`${origin}/anim.webp`] },
    });
    expect(r.status).toBe(422);
    expect(r.json.detail).toMatch(/^image_urls\[0\]: the image is an animated WebP/);
    expect(emu.ledger.entries.length).toBe(entries);
    const ok = await http(emu, 'POST', '/marketing-studio/image/sunburst', {
      headers: AUTH,
      json: { prompt: 'edit', image_urls: [`${origin}/still.webp`] },
    });
    expect(ok.status).toBe(200);
  });

  it('checks bytes over 64 MiB by their size alone', async () => {
    expect(await imageProblem(Buffer.alloc(MAX_IMAGE_BYTES + 1))).toBe('is larger than 64 MiB');
    expect(await imageProblem(await still('png'))).toBeUndefined();
  });
});

describe('its own outputs and uploaded media', () => {
  async function upload(bytes: Buffer): Promise<{ url: string; confirmed: string }> {
    const rec = (await http(emu, 'POST', '/v1/agent/media', { headers: AUTH, json: { extension: 'png', type: 'image' } })).json;
    const put = new URL(rec.upload_url);
    expect((await http(emu, 'PUT', put.pathname + put.search, { headers: { 'content-type': 'image/png' }, body: bytes })).status).toBe(200);
    const confirm = await http(emu, 'POST', `/v1/agent/media/${encodeURIComponent(rec.id)}/confirm`, {
      headers: AUTH,
      json: { type: 'image' },
    });
    return { url: rec.url, confirmed: confirm.json.status };
  }

  it('an uploaded .png that decodes is uploaded and accepted as image_url', async () => {
    const { url, confirmed } = await upload(await still('png'));
    expect(confirmed).toBe('uploaded');
    await accepted(emu, { image_url: url });
  });

  it('an uploaded .png whose bytes are "this is not a png" is not_ready at confirm and refused as image_url', async () => {
    const { url, confirmed } = await upload(Buffer.from('this is not a png'));
    expect(confirmed).toBe('not_ready');
    await refused(emu, { image_url: url }, /^image_url: the image is not a JPEG, PNG or WebP image/);
  });

  it("a completed sheet's URL is accepted; an output URL that is not there is refused as unreachable", async () => {
    const first = await sheet(emu, { tier: 'cats', seed: 3 });
    const done = await until(async () => {
      const s = (await http(emu, 'GET', `/requests/${first.json.request_id}/status`, { headers: AUTH })).json;
      return s.status === 'completed' ? s : undefined;
    });
    await accepted(emu, { image_url: done.images[0].url });
    await refused(emu, { image_url: `${emu.url}/cdn/outputs/${randomUUID()}/sheet.png` }, /^image_url: the image is not reachable/);
    await refused(emu, { image_url: `${emu.url}/cdn/elsewhere.png` }, /^image_url: the image is not reachable/);
  });
});

describe('URLs the emulator cannot reach', () => {
  it('are accepted by default (offline stand-in), with or without extension; another extension is refused', async () => {
    await accepted(emu, { image_url: 'https://unreachable.invalid/me.png' });
    await accepted(emu, { image_url: 'https://a.test/photo' });
    await refused(emu, { image_url: 'https://a.test/clip.gif' }, /^image_url: must be a non-animated JPEG, PNG or WebP image, not \.gif/);
  });

  it('are refused as unreachable with strictImageUrls, whatever their extension; loopback still works', async () => {
    await refused(strict, { image_url: 'https://unreachable.invalid/me.png' }, /^image_url: the image is not reachable/);
    await refused(strict, { image_url: 'https://a.test/photo' }, /^image_url: the image is not reachable/);
    await accepted(strict, { image_url: `${origin}/photo` });
  });
});
