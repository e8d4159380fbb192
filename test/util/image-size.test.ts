// Image sizes from a file's first bytes (PNG, GIF, WebP), checked against files sharp writes;
// JPEG and anything unreadable give undefined, and the thumbnail maker asks sharp instead; a
// missing file gives null, and nothing is asked of sharp.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp, { type Sharp } from 'sharp';
import { afterAll, describe, expect, it } from 'vitest';
import { imageSizeOf } from '../../src/util/image-size.js';
import { cleanTemps, tempDir } from '../run/runner-helpers.js';

afterAll(cleanTemps);

const picture = (width: number, height: number): Sharp =>
  sharp({ create: { width, height, channels: 4, background: { r: 10, g: 200, b: 90, alpha: 0.5 } } });

describe('imageSizeOf', () => {
  it('reads width and height of PNG, GIF and WebP (lossy, lossless, extended) from the header', async () => {
    const dir = tempDir();
    const cases: [string, Sharp][] = [
      ['a.png', picture(1536, 1024).png()],
      ['b.gif', picture(300, 600).gif()],
      ['c.webp', picture(513, 17).webp({ quality: 80 })],
      ['d.webp', picture(2000, 9).webp({ lossless: true })],
      ['e.webp', picture(640, 480).webp({ quality: 80 }).withMetadata({ icc: 'srgb' })],
    ];
    for (const [name, image] of cases) {
      const path = join(dir, name);
      await image.toFile(path);
      const { width, height } = await sharp(path).metadata();
      expect({ name, size: imageSizeOf(path) }).toEqual({ name, size: { width, height } });
    }
  });

  it('gives null for a missing file (nothing to hand sharp) and a path through a file', () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'plain'), 'x');
    expect(imageSizeOf(join(dir, 'missing.png'))).toBeNull();
    expect(imageSizeOf(join(dir, 'plain', 'a.png'))).toBeNull();
  });

  it('gives undefined for JPEG, a truncated header and text', async () => {
    const dir = tempDir();
    await picture(800, 600).jpeg().toFile(join(dir, 'a.jpg'));
    const png = await picture(800, 600).png().toBuffer();
    writeFileSync(join(dir, 'short.png'), png.subarray(0, 20));
    writeFileSync(join(dir, 'text.png'), 'not a png at all, not at all');
    for (const name of ['a.jpg', 'short.png', 'text.png'])
      expect({ name, size: imageSizeOf(join(dir, name)) }).toEqual({ name, size: undefined });
  });
});
