// Thumbnails: an image larger than 512 px on a side gets a WebP thumbnail of at most
// 512 px under thumbs/, made once; one that already fits is shown as itself (no thumbnail to
// make); one sharp cannot read gets none. Against real files and sharp, no stand-ins.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, describe, expect, it } from 'vitest';
import { posterPathOf, thumbPathOf, type Cell, type CellFile } from '../../src/gallery/gallery-data.js';
import { findFfmpeg, makeThumbnails, noteDownloadedImage, THUMBNAIL_MAX_PX, type ThumbnailMemo } from '../../src/gallery/thumbnails.js';
import { cleanTemps, tempDir } from '../run/runner-helpers.js';
import { realVideo } from './videos.js';

afterAll(cleanTemps);

async function image(runDir: string, path: string, width: number, height: number): Promise<CellFile> {
  mkdirSync(join(runDir, 'outputs', 'sheets'), { recursive: true });
  await sharp({ create: { width, height, channels: 3, background: { r: 200, g: 120, b: 40 } } })
    .png()
    .toFile(join(runDir, path));
  return { path, kind: 'image', thumb: thumbPathOf(path) };
}

const cellsOf = (files: CellFile[]): Cell[] => [{ id: 'sheets[seed=1]', values: { seed: '1' }, status: 'completed', files }];

describe('thumbnails', () => {
  it('makes a WebP of at most 512 px for a larger image, none for one that already fits or cannot be read, and each once', async () => {
    const runDir = tempDir();
    const big = await image(runDir, 'outputs/sheets/big.png', 1536, 1024);
    const tall = await image(runDir, 'outputs/sheets/tall.png', 300, 600);
    const small = await image(runDir, 'outputs/sheets/small.png', 512, 288);
    const broken: CellFile = { path: 'outputs/sheets/broken.png', kind: 'image', thumb: thumbPathOf('outputs/sheets/broken.png') };
    writeFileSync(join(runDir, broken.path), 'not a png');
    const memo: ThumbnailMemo = new Map();
    const data = cellsOf([big, tall, small, broken]);
    expect(await makeThumbnails(runDir, data, undefined, memo)).toBe(2);
    const sizeOf = async (f: CellFile): Promise<[number, number, string]> => {
      const m = await sharp(join(runDir, f.thumb ?? '')).metadata();
      return [m.width ?? 0, m.height ?? 0, m.format ?? ''];
    };
    expect(await sizeOf(big)).toEqual([THUMBNAIL_MAX_PX, 341, 'webp']);
    expect(await sizeOf(tall)).toEqual([256, THUMBNAIL_MAX_PX, 'webp']);
    // Already within 512 x 512: the page shows the output itself.
    expect(small.thumb).toBeUndefined();
    expect(existsSync(join(runDir, thumbPathOf(small.path)))).toBe(false);
    expect(broken.thumb).toBeUndefined();
    // A later rewrite of the page (new cell objects, as each rewrite builds) makes nothing again
    // and still drops the thumbnails that do not exist.
    const again = cellsOf([
      { ...big, thumb: thumbPathOf(big.path) },
      { ...small, thumb: thumbPathOf(small.path) },
    ]);
    expect(await makeThumbnails(runDir, again, undefined, memo)).toBe(0);
    expect(again[0]?.files.map((f) => f.thumb)).toEqual([thumbPathOf(big.path), undefined]);
    // Without the memo (genpipe report), an existing thumbnail is kept, not made again.
    const fresh = cellsOf([{ ...big, thumb: thumbPathOf(big.path) }]);
    expect(await makeThumbnails(runDir, fresh)).toBe(0);
    expect(fresh[0]?.files[0]?.thumb).toBe(thumbPathOf(big.path));
  });

  it('an output no longer on disk gets no thumbnail, and the others are still made', async () => {
    const runDir = tempDir();
    const big = await image(runDir, 'outputs/sheets/big.png', 1536, 1024);
    const gone: CellFile = { path: 'outputs/sheets/gone.png', kind: 'image', thumb: thumbPathOf('outputs/sheets/gone.png') };
    const memo: ThumbnailMemo = new Map();
    expect(await makeThumbnails(runDir, cellsOf([gone, big]), undefined, memo)).toBe(1);
    expect(gone.thumb).toBeUndefined();
    expect(memo.get(gone.path)).toBe(false);
    expect(existsSync(join(runDir, thumbPathOf(big.path)))).toBe(true);
  });
});

describe('thumbnails: what a download learnt', () => {
  it('an image the download saw fit in 512 px is not opened again; one it saw larger, or could not size, is looked at as before', async () => {
    const runDir = tempDir();
    // On disk these are all larger than 512 px: only what the memo was told decides.
    const toldSmall = await image(runDir, 'outputs/sheets/told-small.png', 1536, 1024);
    const toldLarge = await image(runDir, 'outputs/sheets/told-large.png', 1536, 1024);
    const unsized = await image(runDir, 'outputs/sheets/unsized.png', 1536, 1024);
    const memo: ThumbnailMemo = new Map();
    noteDownloadedImage(memo, toldSmall.path, { width: 512, height: 512 });
    noteDownloadedImage(memo, toldLarge.path, { width: 513, height: 100 });
    noteDownloadedImage(memo, unsized.path, undefined);
    expect(await makeThumbnails(runDir, cellsOf([toldSmall, toldLarge, unsized]), undefined, memo)).toBe(2);
    expect(toldSmall.thumb).toBeUndefined();
    expect(existsSync(join(runDir, thumbPathOf(toldSmall.path)))).toBe(false);
    expect(existsSync(join(runDir, thumbPathOf(toldLarge.path)))).toBe(true);
    expect(existsSync(join(runDir, thumbPathOf(unsized.path)))).toBe(true);
  });
});

describe('poster frames of videos', () => {
  const ffmpeg = findFfmpeg();

  it("finds Debian's ffmpeg (scripts/ensure-test-deps.mjs installs it)", () => {
    expect(ffmpeg, 'install the Debian package ffmpeg').toMatch(/\/ffmpeg$/);
  });

  it('makes the first frame of a video a JPEG of at most 512 px, once; a file ffmpeg cannot read gets none', async () => {
    const runDir = tempDir();
    mkdirSync(join(runDir, 'outputs', 'clips'), { recursive: true });
    realVideo(ffmpeg as string, join(runDir, 'outputs/clips/wide.mp4'), 1280, 720);
    writeFileSync(join(runDir, 'outputs/clips/broken.mp4'), 'not a video');
    const video = (path: string): CellFile => ({ path, kind: 'video', poster: posterPathOf(path) });
    const wide = video('outputs/clips/wide.mp4');
    const broken = video('outputs/clips/broken.mp4');
    const gone = video('outputs/clips/gone.mp4');
    const memo: ThumbnailMemo = new Map();
    expect(await makeThumbnails(runDir, cellsOf([wide, broken, gone]), undefined, memo)).toBe(1);
    expect(wide.poster).toBe(posterPathOf(wide.path));
    const poster = sharp(join(runDir, posterPathOf(wide.path)));
    const meta = await poster.metadata();
    expect([meta.width, meta.height, meta.format]).toEqual([THUMBNAIL_MAX_PX, 288, 'jpeg']);
    // The first frame (red), not a later one (blue).
    const { channels } = await poster.stats();
    expect(channels[0]?.mean).toBeGreaterThan(200);
    expect(channels[2]?.mean).toBeLessThan(60);
    expect(broken.poster).toBeUndefined();
    expect(gone.poster).toBeUndefined();
    expect(existsSync(join(runDir, posterPathOf(broken.path)))).toBe(false);
    // Made once: a rewrite with the memo, or without it (genpipe report), keeps the one there.
    const again = [video(wide.path), video(broken.path)];
    expect(await makeThumbnails(runDir, cellsOf(again), undefined, memo)).toBe(0);
    expect(again.map((f) => f.poster)).toEqual([posterPathOf(wide.path), undefined]);
    const fresh = video(wide.path);
    expect(await makeThumbnails(runDir, cellsOf([fresh]))).toBe(0);
    expect(fresh.poster).toBe(posterPathOf(wide.path));
  });

  it('without ffmpeg a video has no poster file (the page shows its "video" placeholder)', async () => {
    const runDir = tempDir();
    mkdirSync(join(runDir, 'outputs', 'clips'), { recursive: true });
    realVideo(ffmpeg as string, join(runDir, 'outputs/clips/small.mp4'), 64, 48);
    const small: CellFile = { path: 'outputs/clips/small.mp4', kind: 'video', poster: posterPathOf('outputs/clips/small.mp4') };
    expect(await makeThumbnails(runDir, cellsOf([small]), undefined, new Map(), null)).toBe(0);
    expect(small.poster).toBeUndefined();
    expect(existsSync(join(runDir, posterPathOf(small.path)))).toBe(false);
  });
});
