/**
 * Thumbnails for the contact sheet: at most 512 px on the long side, WebP, under the run's
 * `thumbs/`, made once per output with sharp (libvips), a few at a time (p-limit). A thumbnail is
 * written to a temp file and renamed into place, so a crash never leaves half of one; an output
 * sharp cannot read gets none (the page falls back to the output itself).
 *
 * An image that already fits in 512 × 512 gets none either: the page shows the output itself,
 * which is what its thumbnail would be. Its size comes from its first bytes where the format
 * allows (image-size.ts), else from sharp; making the thumbnail cost about 3 ms of CPU per image
 * here, which at zero latency had made a run 3x slower.
 */
import { mkdir, rename, stat, unlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import pLimit from 'p-limit';
import type { Cell } from './gallery-data.js';
import { imageSizeOf, type ImageSize } from '../util/image-size.js';

export const THUMBNAIL_MAX_PX = 512;
/** Thumbnails made at once; libvips uses threads of its own for each. */
const PARALLEL = 2;

/**
 * What is known of each output (by its path): whether it has a thumbnail. A running run's gallery
 * keeps one across its rewrites, so each output is looked at once; a run tells it the size of each
 * image it downloads (noteDownloadedImage), so most are never looked at.
 */
export type ThumbnailMemo = Map<string, boolean>;

/**
 * Records what a download learnt of an image from its first bytes: one that fits needs no
 * thumbnail, so the gallery need not open the file again to find out. Anything else is left to
 * makeThumbnails.
 */
export function noteDownloadedImage(memo: ThumbnailMemo, path: string, size: ImageSize | undefined): void {
  if (size !== undefined && fits(size)) memo.set(path, false);
}

/** Makes the missing thumbnails of the cells' images; drops the `thumb` of an image that has none. Returns how many were made. */
export async function makeThumbnails(
  runDir: string,
  cells: Iterable<Cell>,
  signal?: AbortSignal,
  memo: ThumbnailMemo = new Map(),
): Promise<number> {
  const limit = pLimit(PARALLEL);
  let made = 0;
  const jobs: Promise<void>[] = [];
  for (const cell of cells) {
    for (const file of cell.files) {
      const thumb = file.thumb;
      if (thumb === undefined) continue;
      const known = memo.get(file.path);
      if (known === false) file.thumb = undefined;
      if (known !== undefined) continue;
      const source = join(runDir, file.path);
      // Most outputs are PNG, GIF or WebP: their size is in their first bytes (see image-size.ts).
      const header = imageSizeOf(source);
      // No file (moved away since it was downloaded), or one small enough: no thumbnail to make.
      if (header === null || (header && fits(header))) {
        file.thumb = undefined;
        memo.set(file.path, false);
        continue;
      }
      jobs.push(
        limit(async () => {
          if (signal?.aborted) return;
          const target = join(runDir, thumb);
          if (await exists(target)) {
            memo.set(file.path, true);
            return;
          }
          const temp = `${target}.${process.pid}.tmp`;
          try {
            // Loaded only for an image that needs it: libvips takes about 60 ms of CPU to load, and a
            // run of small images (most of them) never does.
            const { default: sharp } = await import('sharp');
            if (!header && fits(await sharp(source).metadata())) {
              file.thumb = undefined;
              memo.set(file.path, false);
              return;
            }
            await mkdir(dirname(target), { recursive: true });
            await sharp(source)
              .resize({ width: THUMBNAIL_MAX_PX, height: THUMBNAIL_MAX_PX, fit: 'inside', withoutEnlargement: true })
              .webp({ quality: 80 })
              .toFile(temp);
            await rename(temp, target);
            memo.set(file.path, true);
            made++;
          } catch {
            await unlink(temp).catch(() => undefined);
            file.thumb = undefined;
            memo.set(file.path, false);
          }
        }),
      );
    }
  }
  await Promise.all(jobs);
  return made;
}

const fits = ({ width = 0, height = 0 }: { width?: number | undefined; height?: number | undefined }): boolean =>
  width <= THUMBNAIL_MAX_PX && height <= THUMBNAIL_MAX_PX;

async function exists(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}
