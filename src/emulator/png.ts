/**
 * A minimal PNG encoder (RGB, 8 bits, one IDAT, node:zlib) and the emulator's drawings. The pixels
 * are a pure function of the art spec, so a character sheet changes visibly with tier, seed and
 * variation_index, and two fetches of one output give the same bytes.
 */
import { deflateSync } from 'node:zlib';
import { hash32, Rng } from './prng.js';
import type { ArtSpec } from './request-store.js';

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

export function crc32(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of bytes) c = (CRC_TABLE[(c ^ b) & 0xff] ?? 0) ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function chunk(type: string, data: Uint8Array): Buffer {
  const out = Buffer.alloc(12 + data.length);
  out.writeUInt32BE(data.length, 0);
  out.write(type, 4, 'ascii');
  Buffer.from(data).copy(out, 8);
  out.writeUInt32BE(crc32(out.subarray(4, 8 + data.length)), 8 + data.length);
  return out;
}

/**
 * Encodes an RGB image as a PNG. `raw` holds the scanlines as PNG stores them: each row is a filter
 * byte (0, none) followed by `width * 3` bytes, so the encoder deflates it without a copy. Level 1
 * deflate: flat-coloured drawings compress nearly as well as at the default level, several times
 * faster (the emulator draws one per download).
 */
export function encodePng(width: number, height: number, raw: Uint8Array): Buffer {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // colour type RGB
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  return Buffer.concat([signature, chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw, { level: 1 })), chunk('IEND', new Uint8Array(0))]);
}

type Rgb = [number, number, number];

function hsl(h: number, s: number, l: number): Rgb {
  const a = s * Math.min(l, 1 - l);
  const f = (n: number): number => {
    const k = (n + h / 30) % 12;
    return Math.round(255 * (l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1))));
  };
  return [f(0), f(8), f(4)];
}

const TIER_HUES: Record<string, number> = { normal: 30, freak: 300, total: 0, insects: 90, frogs: 130, cats: 40, dogs: 25, capybaras: 20, birds: 200 };

/** Draws the picture an art spec describes: a sheet (portrait + full body) or a plain render. */
export function drawArt(art: ArtSpec): Buffer {
  const { width: w, height: h } = art;
  const rng = new Rng(hash32(art.seedText));
  const stride = w * 3 + 1;
  // PNG scanlines: a filter byte (0) then the row's pixels; drawn in place, encoded without a copy.
  const px = new Uint8Array(stride * h);
  const set = (x: number, y: number, c: Rgb): void => {
    if (x < 0 || y < 0 || x >= w || y >= h) return;
    const i = y * stride + 1 + x * 3;
    px[i] = c[0];
    px[i + 1] = c[1];
    px[i + 2] = c[2];
  };
  const baseHue = art.tier !== undefined ? (TIER_HUES[art.tier] ?? 0) : rng.int(0, 359);
  const bgA = hsl(baseHue, 0.35, 0.85);
  const bgB = hsl((baseHue + 40) % 360, 0.35, 0.7);
  // A diagonal gradient: the colour depends on x + y only, so each diagonal's colour is mixed once.
  const diagonal = new Uint8Array((w + h) * 3);
  for (let d = 0; d < w + h; d++) {
    const t = d / (w + h);
    for (let k = 0; k < 3; k++) diagonal[d * 3 + k] = Math.round((bgA[k] as number) * (1 - t) + (bgB[k] as number) * t);
  }
  for (let y = 0; y < h; y++) px.set(diagonal.subarray(y * 3, (y + w) * 3), y * stride + 1);
  const disc = (cx: number, cy: number, r: number, c: Rgb): void => {
    for (let y = Math.floor(cy - r); y <= cy + r; y++) for (let x = Math.floor(cx - r); x <= cx + r; x++) if ((x - cx) ** 2 + (y - cy) ** 2 <= r * r) set(x, y, c);
  };
  const rect = (x0: number, y0: number, x1: number, y1: number, c: Rgb): void => {
    for (let y = Math.floor(y0); y < y1; y++) for (let x = Math.floor(x0); x < x1; x++) set(x, y, c);
  };
  const skin = hsl((baseHue + rng.int(0, 120)) % 360, 0.5 + rng.next() * 0.4, 0.35 + rng.next() * 0.3);
  const cloth = hsl(rng.int(0, 359), 0.6, 0.45);
  const eye = hsl(rng.int(0, 359), 0.8, 0.2);
  if (art.layout === 'sheet') {
    // Left: close-up portrait. Right: full-body view. A divider between them.
    rect(w / 2 - 1, 0, w / 2 + 1, h, [40, 40, 40]);
    const r = h * (0.28 + rng.next() * 0.1);
    const cx = w / 4 + rng.int(-4, 4);
    const cy = h / 2 + rng.int(-3, 3);
    disc(cx, cy, r, skin);
    disc(cx - r / 2.5, cy - r / 5, Math.max(1.5, r / 6), eye);
    disc(cx + r / 2.5, cy - r / 5, Math.max(1.5, r / 6), eye);
    rect(cx - r / 3, cy + r / 2.5, cx + r / 3, cy + r / 2.5 + 2, cloth);
    const bx = (3 * w) / 4 + rng.int(-6, 6);
    const headR = h * (0.08 + rng.next() * 0.05);
    disc(bx, h * 0.2, headR, skin);
    const bodyW = w * (0.06 + rng.next() * 0.08);
    rect(bx - bodyW / 2, h * 0.2 + headR, bx + bodyW / 2, h * 0.65, cloth);
    rect(bx - bodyW / 2, h * 0.65, bx - bodyW / 8, h * 0.92, skin);
    rect(bx + bodyW / 8, h * 0.65, bx + bodyW / 2, h * 0.92, skin);
  } else {
    for (let i = 0; i < 6; i++) disc(rng.int(0, w), rng.int(0, h), rng.int(3, Math.max(4, Math.floor(h / 3))), hsl(rng.int(0, 359), 0.6, 0.5));
  }
  return encodePng(w, h, px);
}
