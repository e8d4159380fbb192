import { closeSync, mkdtempSync, openSync, rmSync, truncateSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { checkLocalImage, isAnimated, MAX_IMAGE_BYTES, sniffImageKind } from '../../src/api/local-image.js';
import { rejection } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'genpipe-images-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const u32be = (n: number): number[] => [(n >>> 24) & 0xff, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff];
const u32le = (n: number): number[] => [n & 0xff, (n >>> 8) & 0xff, (n >>> 16) & 0xff, (n >>> 24) & 0xff];
const ascii = (s: string): number[] => [...s].map((c) => c.charCodeAt(0));

const JPEG = Uint8Array.from([0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, ...ascii('JFIF'), 0x00, 0x01, 0xff, 0xd9]);

function pngChunk(type: string, data: number[]): number[] {
  return [...u32be(data.length), ...ascii(type), ...data, 0, 0, 0, 0];
}
function png(animated: boolean): Uint8Array {
  return Uint8Array.from([
    0x89,
    0x50,
    0x4e,
    0x47,
    0x0d,
    0x0a,
    0x1a,
    0x0a,
    ...pngChunk('IHDR', [...u32be(1), ...u32be(1), 8, 6, 0, 0, 0]),
    ...(animated ? pngChunk('acTL', [...u32be(2), ...u32be(0)]) : []),
    ...pngChunk('IDAT', [0x78, 0x9c, 0x63, 0, 0, 0, 0x01]),
    ...pngChunk('IEND', []),
  ]);
}
function webp(flags: number | undefined): Uint8Array {
  const body =
    flags === undefined
      ? [...ascii('VP8 '), ...u32le(4), 0, 0, 0, 0]
      : [...ascii('VP8X'), ...u32le(10), flags, 0, 0, 0, 0, 0, 0, 0, 0, 0, ...ascii('VP8 '), ...u32le(4), 0, 0, 0, 0];
  return Uint8Array.from([...ascii('RIFF'), ...u32le(4 + body.length), ...ascii('WEBP'), ...body]);
}

function file(name: string, bytes: Uint8Array | string): string {
  const path = join(dir, name);
  writeFileSync(path, bytes);
  return path;
}

describe('local image checks: non-animated JPEG, PNG or WebP, at most 64 MiB', () => {
  it('JPEG, PNG and WebP are told by magic bytes', async () => {
    expect(await checkLocalImage(file('a.jpg', JPEG))).toMatchObject({
      kind: 'jpeg',
      extension: 'jpg',
      contentType: 'image/jpeg',
      size: JPEG.length,
    });
    expect(await checkLocalImage(file('b.png', png(false)))).toMatchObject({ kind: 'png', extension: 'png', contentType: 'image/png' });
    expect(await checkLocalImage(file('c.webp', webp(undefined)))).toMatchObject({
      kind: 'webp',
      extension: 'webp',
      contentType: 'image/webp',
    });
  });

  it('the name does not decide: a .png name with JPEG bytes is still JPEG', async () => {
    expect((await checkLocalImage(file('really-a-jpeg.png', JPEG))).kind).toBe('jpeg');
    expect((await checkLocalImage(file('no-extension', png(false)))).kind).toBe('png');
  });

  it('a text file named .jpg is refused (invalid_file, naming the path)', async () => {
    const path = file('notes.jpg', 'hello, I am text');
    const error = await rejection(checkLocalImage(path));
    expect(error.code).toBe('invalid_file');
    expect(error.message).toContain(path);
  });

  it('GIF and an empty file are refused', async () => {
    expect((await rejection(checkLocalImage(file('x.gif', Uint8Array.from(ascii('GIF89a\x01\x00\x01\x00')))))).code).toBe('invalid_file');
    expect((await rejection(checkLocalImage(file('empty.png', new Uint8Array(0))))).code).toBe('invalid_file');
  });

  it('an animated PNG (acTL chunk) is refused; the same PNG without acTL is accepted', async () => {
    expect(isAnimated('png', png(true))).toBe(true);
    expect(isAnimated('png', png(false))).toBe(false);
    const error = await rejection(checkLocalImage(file('anim.png', png(true))));
    expect(error.code).toBe('invalid_file');
    expect(error.message).toMatch(/animated/);
  });

  it('an animated WebP (VP8X animation flag) is refused; VP8X without the flag is accepted', async () => {
    expect(isAnimated('webp', webp(0x02))).toBe(true);
    expect(isAnimated('webp', webp(0x10))).toBe(false); // alpha only
    expect((await checkLocalImage(file('still-x.webp', webp(0x10)))).kind).toBe('webp');
    expect((await rejection(checkLocalImage(file('anim.webp', webp(0x02 | 0x10))))).code).toBe('invalid_file');
  });

  it('exactly 64 MiB is accepted; one byte more is refused (sparse files)', async () => {
    const fill = (name: string, size: number): string => {
      const path = join(dir, name);
      const fd = openSync(path, 'w');
      writeSync(fd, JPEG);
      closeSync(fd);
      truncateSync(path, size);
      return path;
    };
    expect((await checkLocalImage(fill('max.jpg', MAX_IMAGE_BYTES))).size).toBe(64 * 1024 * 1024);
    const error = await rejection(checkLocalImage(fill('big.jpg', MAX_IMAGE_BYTES + 1)));
    expect(error.code).toBe('invalid_file');
    expect(error.message).toMatch(/64 MiB/);
  });

  it('a missing file and a directory are refused', async () => {
    expect((await rejection(checkLocalImage(join(dir, 'absent.png')))).code).toBe('invalid_file');
    expect((await rejection(checkLocalImage(dir))).code).toBe('invalid_file');
  });

  it('sniffImageKind needs the full signature', () => {
    expect(sniffImageKind(Uint8Array.from([0xff, 0xd8]))).toBeUndefined();
    expect(sniffImageKind(Uint8Array.from([...ascii('RIFF'), 0, 0, 0, 0, ...ascii('WAVE')]))).toBeUndefined();
  });
});
