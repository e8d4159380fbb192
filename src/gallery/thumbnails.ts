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
 *
 * A video gets a poster frame: its first frame, as a JPEG of at most 512 px under `thumbs/`, made
 * once by Debian's `ffmpeg` when the machine has it (no npm package decodes video). Without
 * ffmpeg, or for a file it cannot decode, the cell has none and the page shows its "video"
 * placeholder instead of a black box.
 */
import { execFile } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { mkdir, rename, stat, unlink } from 'node:fs/promises';
import { delimiter, dirname, join } from 'node:path';
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

/** Longest a poster frame may take: ffmpeg on a file it cannot read should give up, not hang a gallery write. */
const POSTER_TIMEOUT_MS = 10_000;

let ffmpegFound: string | null | undefined;

/** Debian's ffmpeg (/usr/bin/ffmpeg, or on PATH), looked for once; null when the machine has none. */
export function findFfmpeg(): string | null {
  if (ffmpegFound !== undefined) return ffmpegFound;
  ffmpegFound = null;
  for (const dir of ['/usr/bin', ...(process.env.PATH ?? '').split(delimiter)]) {
    if (dir === '') continue;
    try {
      accessSync(join(dir, 'ffmpeg'), constants.X_OK);
      ffmpegFound = join(dir, 'ffmpeg');
      break;
    } catch {
      // not in this folder
    }
  }
  return ffmpegFound;
}

/**
 * Makes the missing thumbnails of the cells' images and poster frames of their videos; drops the
 * `thumb` of an image, or the `poster` of a video, that has none. `ffmpeg`: the program that makes
 * posters (null: none, every video keeps the page's placeholder). Returns how many were made.
 */
export async function makeThumbnails(
  runDir: string,
  cells: Iterable<Cell>,
  signal?: AbortSignal,
  memo: ThumbnailMemo = new Map(),
  ffmpeg: string | null = findFfmpeg(),
): Promise<number> {
  const limit = pLimit(PARALLEL);
  let made = 0;
  const jobs: Promise<void>[] = [];
  for (const cell of cells) {
    for (const file of cell.files) {
      const poster = file.poster;
      if (poster !== undefined) {
        const known = memo.get(file.path);
        if (known === false || (known === undefined && ffmpeg === null)) file.poster = undefined;
        if (known !== undefined || ffmpeg === null) continue;
        jobs.push(
          limit(async () => {
            if (signal?.aborted) return;
            const ok = await makePoster(ffmpeg, join(runDir, file.path), join(runDir, poster));
            memo.set(file.path, ok !== false);
            if (ok === false) file.poster = undefined;
            if (ok === 'made') made++;
          }),
        );
        continue;
      }
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

/** Writes the first frame of `source` to `target` (a JPEG of at most 512 px), through a temp file; false when ffmpeg could not. */
async function makePoster(ffmpeg: string, source: string, target: string): Promise<'made' | 'there' | false> {
  if (await exists(target)) return 'there';
  if (!(await exists(source))) return false;
  await mkdir(dirname(target), { recursive: true });
  const temp = `${target}.${process.pid}.tmp.jpg`;
  const args = ['-nostdin', '-v', 'error', '-y', '-i', source, '-frames:v', '1'];
  // At most 512 px on the long side, never enlarged.
  const fit = `scale='min(${THUMBNAIL_MAX_PX},iw)':'min(${THUMBNAIL_MAX_PX},ih)':force_original_aspect_ratio=decrease`;
  args.push('-vf', fit, '-q:v', '4', temp);
  const ok = await new Promise<boolean>((resolve) => {
    execFile(ffmpeg, args, { timeout: POSTER_TIMEOUT_MS, windowsHide: true }, (error) => resolve(error === null));
  });
  // ffmpeg may exit 0 having written nothing (a file with no video stream).
  if (ok && (await exists(temp))) {
    await rename(temp, target);
    return 'made';
  }
  await unlink(temp).catch(() => undefined);
  return false;
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
