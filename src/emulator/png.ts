/**
 * A minimal PNG encoder (8-bit palette, one IDAT, node:zlib) and the emulator's drawings. The pixels
 * are a pure function of the art spec, so a character sheet changes visibly with tier, seed and
 * variation_index, and two fetches of one output give the same bytes.
 */
import { constants, crc32, deflateSync } from 'node:zlib';
import { hash32, Rng } from './prng.js';
import type { ArtSpec } from './request-store.js';

function chunk(type: string, data: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(12 + data.length);
  out.writeUInt32BE(data.length, 0);
  out.write(type, 4, 'ascii');
  out.set(data, 8);
  out.writeUInt32BE(crc32(out.subarray(4, 8 + data.length)), 8 + data.length);
  return out;
}

/**
 * Encodes an indexed-colour PNG (8-bit palette indices). `raw` holds the scanlines as PNG stores
 * them: each row is a filter byte (0, none) followed by `width` indices, so the encoder deflates it
 * without a copy. Deflate with run-length matches only: a flat-coloured drawing in palette indices is
 * rows of runs, which that strategy compresses best and fastest (the emulator draws one image per
 * download, so this is on the hot path of every throughput benchmark).
 */
export function encodePng(width: number, height: number, palette: readonly Rgb[], raw: Uint8Array): Buffer {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 3; // colour type: palette
  const plte = Buffer.from(palette.flat());
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  return Buffer.concat([
    signature,
    chunk('IHDR', ihdr),
    chunk('PLTE', plte),
    chunk('IDAT', deflateSync(raw, { level: 1, strategy: constants.Z_RLE })),
    chunk('IEND', new Uint8Array(0)),
  ]);
}

export type Rgb = [number, number, number];

function hsl(h: number, s: number, l: number): Rgb {
  const a = s * Math.min(l, 1 - l);
  const f = (n: number): number => {
    const k = (n + h / 30) % 12;
    return Math.round(255 * (l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1))));
  };
  return [f(0), f(8), f(4)];
}

const GRADIENT_STEPS = 64;

const TIER_HUES: Record<string, number> = {
  normal: 30,
  freak: 300,
  total: 0,
  insects: 90,
  frogs: 130,
  cats: 40,
  dogs: 25,
  capybaras: 20,
  birds: 200,
};

/** Above this long side, the drawing is made small and scaled up (true sizes stay fast). */
const DRAWN_LONG_SIDE = 320;

/**
 * Draws the picture an art spec describes: a sheet (portrait + full body) or a plain render. A
 * large output (true sizes) is the small seeded drawing scaled up by whole pixels: the pixels
 * still differ wherever the art seeds differ, and a 2K sheet costs little more than a small one
 * (its rows repeat, which deflate stores as matches).
 */
export function drawArt(art: ArtSpec): Buffer {
  const long = Math.max(art.width, art.height);
  if (long <= DRAWN_LONG_SIDE) {
    const { palette, px } = drawIndexed(art, art.width, art.height);
    return encodePng(art.width, art.height, palette, px);
  }
  const f = Math.ceil(long / 160);
  const sw = Math.max(1, Math.ceil(art.width / f));
  const sh = Math.max(1, Math.ceil(art.height / f));
  const small = drawIndexed(art, sw, sh);
  const w = art.width;
  const h = art.height;
  const stride = w + 1;
  const px = new Uint8Array(stride * h);
  const row = new Uint8Array(stride);
  for (let sy = 0; sy < sh; sy++) {
    const from = sy * (sw + 1) + 1;
    for (let x = 0; x < w; x++) row[x + 1] = small.px[from + Math.floor(x / f)] ?? 0;
    for (let y = sy * f; y < Math.min(h, (sy + 1) * f); y++) px.set(row, y * stride);
  }
  return encodePng(w, h, small.palette, px);
}

/** The drawing in palette indices, as PNG scanlines (a filter byte, then `w` indices per row). */
function drawIndexed(art: ArtSpec, w: number, h: number): { palette: Rgb[]; px: Uint8Array } {
  const rng = new Rng(hash32(art.seedText));
  const stride = w + 1;
  // PNG scanlines: a filter byte (0) then the row's palette indices; drawn in place, encoded without a copy.
  const px = new Uint8Array(stride * h);
  const palette: Rgb[] = [];
  /** A colour's palette index (the drawing uses well under 256 colours: 64 gradient steps and a few shapes). */
  const colour = (c: Rgb): number => {
    const found = palette.findIndex((p) => p[0] === c[0] && p[1] === c[1] && p[2] === c[2]);
    if (found >= 0) return found;
    palette.push(c);
    return palette.length - 1;
  };
  /** Paints columns [x0, x1] of row y (clipped to the image). Shapes are drawn a row span at a time. */
  const span = (y: number, x0: number, x1: number, index: number): void => {
    if (y < 0 || y >= h) return;
    const from = Math.max(0, x0);
    const to = Math.min(w - 1, x1);
    if (from <= to) px.fill(index, y * stride + 1 + from, y * stride + 2 + to);
  };
  const baseHue = art.tier !== undefined ? (TIER_HUES[art.tier] ?? 0) : rng.int(0, 359);
  const bgA = hsl(baseHue, 0.35, 0.85);
  const bgB = hsl((baseHue + 40) % 360, 0.35, 0.7);
  // A vertical gradient in 64 steps: each row is one colour, which deflate stores as a run.
  for (let y = 0; y < h; y++) {
    const t = Math.floor((y * GRADIENT_STEPS) / h) / GRADIENT_STEPS;
    span(y, 0, w - 1, colour(bgA.map((a, k) => Math.round(a * (1 - t) + (bgB[k] as number) * t)) as Rgb));
  }
  // The pixels (x, y) with (x - cx)² + (y - cy)² <= r²: on row y, x within cx ± sqrt(r² - (y - cy)²).
  const disc = (cx: number, cy: number, r: number, c: Rgb): void => {
    const index = colour(c);
    for (let y = Math.floor(cy - r); y <= cy + r; y++) {
      const reach = r * r - (y - cy) ** 2;
      if (reach < 0) continue;
      const half = Math.sqrt(reach);
      span(y, Math.ceil(cx - half), Math.floor(cx + half), index);
    }
  };
  const rect = (x0: number, y0: number, x1: number, y1: number, c: Rgb): void => {
    const index = colour(c);
    for (let y = Math.floor(y0); y < y1; y++) span(y, Math.floor(x0), Math.ceil(x1) - 1, index);
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
    for (let i = 0; i < 6; i++)
      disc(rng.int(0, w), rng.int(0, h), rng.int(3, Math.max(4, Math.floor(h / 3))), hsl(rng.int(0, 359), 0.6, 0.5));
  }
  return { palette, px };
}
