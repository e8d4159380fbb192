/** §4.2 "Output: one image, 2K, aspect ratio 16:9", and outputs at their true sizes on request. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inflateSync } from 'node:zlib';
import type { Emulator } from '../../src/emulator/start-emulator.js';
import { AUTH, http, LEGACY_AUTH, start, until } from './helpers.js';

let small: Emulator;
let big: Emulator;
beforeAll(async () => {
  small = await start();
  big = await start({ trueSizes: true });
});
afterAll(async () => {
  await small.close();
  await big.close();
});

const dims = (png: Buffer) => ({ width: png.readUInt32BE(16), height: png.readUInt32BE(20) });

/** The decoded image data of a PNG (its IDAT, inflated). */
function pixels(png: Buffer): Buffer {
  const parts: Buffer[] = [];
  for (let at = 8; at < png.length;) {
    const len = png.readUInt32BE(at);
    if (png.toString('latin1', at + 4, at + 8) === 'IDAT') parts.push(png.subarray(at + 8, at + 8 + len));
    at += 12 + len;
  }
  return inflateSync(Buffer.concat(parts));
}

async function output(emu: Emulator, path: string, body: unknown): Promise<Buffer> {
  const r = await http(emu, 'POST', path, { headers: AUTH, json: body });
  expect(r.status).toBe(200);
  const done = await until(async () => {
    const s = (await http(emu, 'GET', `/requests/${r.json.request_id}/status`, { headers: AUTH })).json;
    return s.status === 'completed' ? s : undefined;
  });
  return (await http(emu, 'GET', new URL((done.images?.[0] ?? done.video).url).pathname)).bytes;
}

describe('true sizes', () => {
  it('sheets are 2048 × 1152 with true sizes on, 160 × 90 without; pixels still differ by seed', async () => {
    expect(dims(await output(small, '/vendor/ai-influencer', { tier: 'cats', seed: 1 }))).toEqual({ width: 160, height: 90 });
    const a = await output(big, '/vendor/ai-influencer', { tier: 'cats', seed: 1 });
    const b = await output(big, '/vendor/ai-influencer', { tier: 'cats', seed: 2 });
    expect(dims(a)).toEqual({ width: 2048, height: 1152 });
    expect(pixels(a).length).toBe((2048 + 1) * 1152);
    expect(pixels(a).equals(pixels(b))).toBe(false);
  });

  it.each([
    ['4k', '16:9', { width: 4096, height: 2304 }],
    ['1k', '9:16', { width: 576, height: 1024 }],
    ['2k', '1:1', { width: 2048, height: 2048 }],
  ])('a marketing image at %s %s is %o', async (resolution, aspect_ratio, size) => {
    const png = await output(big, '/marketing-studio/image/sunburst', { prompt: 'shoes', resolution, aspect_ratio, quality: 'low' });
    expect(dims(png)).toEqual(size);
  });

  it('videos are 20 MB of MP4 boxes by default, and differ between requests', async () => {
    const video = async (prompt: string) => {
      const set = (await http(big, 'POST', '/v1/image2video/dop', { headers: LEGACY_AUTH, json: { params: { prompt } } })).json;
      const done = await until(async () => {
        const s = (await http(big, 'GET', `/v1/job-sets/${set.id}`, { headers: LEGACY_AUTH })).json;
        return s.jobs[0].status === 'completed' ? s : undefined;
      });
      return (await http(big, 'GET', new URL(done.jobs[0].results.raw.url).pathname)).bytes;
    };
    const first = await video('wave');
    expect(first.length).toBe(20 * 1024 * 1024);
    expect(first.toString('latin1', 4, 8)).toBe('ftyp');
    // ftyp, free, then an mdat box that fills the rest.
    const freeLen = first.readUInt32BE(24);
    expect(first.toString('latin1', 24 + 4 + freeLen - 4, 24 + freeLen + 8).slice(-4)).toBe('mdat');
    expect(first.equals(await video('bow'))).toBe(false);
  });
});
