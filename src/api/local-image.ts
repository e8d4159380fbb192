/**
 * Local files as image inputs (§4.2 image URL rules, §8): non-animated JPEG, PNG or WebP, told by
 * magic bytes rather than by name, at most 64 MiB.
 */
import { open, stat } from 'node:fs/promises';
import { GenpipeError } from './errors.js';

export const MAX_IMAGE_BYTES = 64 * 1024 * 1024;

export type ImageKind = 'jpeg' | 'png' | 'webp';

export interface LocalImage {
  path: string;
  kind: ImageKind;
  extension: 'jpg' | 'png' | 'webp';
  contentType: string;
  size: number;
}

const KIND_INFO: Record<ImageKind, { extension: LocalImage['extension']; contentType: string }> = {
  jpeg: { extension: 'jpg', contentType: 'image/jpeg' },
  png: { extension: 'png', contentType: 'image/png' },
  webp: { extension: 'webp', contentType: 'image/webp' },
};

/** Tells the image kind from the first bytes, or undefined when it is none of the accepted kinds. */
export function sniffImageKind(head: Uint8Array): ImageKind | undefined {
  if (head.length >= 3 && head[0] === 0xff && head[1] === 0xd8 && head[2] === 0xff) return 'jpeg';
  const png = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
  if (head.length >= 8 && png.every((b, i) => head[i] === b)) return 'png';
  if (head.length >= 12 && ascii(head, 0, 4) === 'RIFF' && ascii(head, 8, 12) === 'WEBP') return 'webp';
  return undefined;
}

/** True when a PNG (APNG `acTL` chunk before the image data) or WebP (VP8X animation flag or ANIM chunk) is animated. */
export function isAnimated(kind: ImageKind, bytes: Uint8Array): boolean {
  if (kind === 'png') {
    for (let offset = 8; offset + 8 <= bytes.length;) {
      const length = readU32BE(bytes, offset);
      const type = ascii(bytes, offset + 4, offset + 8);
      if (type === 'acTL') return true;
      if (type === 'IDAT' || type === 'IEND') return false;
      offset += 12 + length;
    }
    return false;
  }
  if (kind === 'webp') {
    for (let offset = 12; offset + 8 <= bytes.length;) {
      const type = ascii(bytes, offset, offset + 4);
      const length = readU32LE(bytes, offset + 4);
      if (type === 'VP8X' && offset + 8 < bytes.length && ((bytes[offset + 8] ?? 0) & 0x02) !== 0) return true;
      if (type === 'ANIM' || type === 'ANMF') return true;
      offset += 8 + length + (length % 2);
    }
  }
  return false;
}

/** Checks a local image file and returns what the upload needs; throws `invalid_file` naming the path. */
export async function checkLocalImage(path: string): Promise<LocalImage> {
  let size: number;
  try {
    const info = await stat(path);
    if (!info.isFile()) throw new GenpipeError('invalid_file', `${path} is not a regular file.`);
    size = info.size;
  } catch (error) {
    if (error instanceof GenpipeError) throw error;
    throw new GenpipeError('invalid_file', `Cannot read the image ${path}: ${(error as NodeJS.ErrnoException).code ?? 'unknown error'}.`, {
      cause: error,
    });
  }
  if (size > MAX_IMAGE_BYTES) throw new GenpipeError('invalid_file', `${path} is ${size} bytes; images may be at most 64 MiB.`);
  // Enough of the file to find the animation markers, which sit before the image data.
  const handle = await open(path, 'r');
  let head: Uint8Array;
  try {
    const buffer = Buffer.alloc(Math.min(size, 1024 * 1024));
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
    head = buffer.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
  const kind = sniffImageKind(head);
  if (!kind) throw new GenpipeError('invalid_file', `${path} is not a JPEG, PNG or WebP image.`);
  if (isAnimated(kind, head))
    throw new GenpipeError('invalid_file', `${path} is an animated ${kind.toUpperCase()}; only still images are accepted.`);
  return { path, kind, size, ...KIND_INFO[kind] };
}

function ascii(bytes: Uint8Array, start: number, end: number): string {
  return String.fromCharCode(...bytes.subarray(start, end));
}
function readU32BE(bytes: Uint8Array, offset: number): number {
  return (
    (((bytes[offset] ?? 0) << 24) >>> 0) + ((bytes[offset + 1] ?? 0) << 16) + ((bytes[offset + 2] ?? 0) << 8) + (bytes[offset + 3] ?? 0)
  );
}
function readU32LE(bytes: Uint8Array, offset: number): number {
  return (
    (bytes[offset] ?? 0) + ((bytes[offset + 1] ?? 0) << 8) + ((bytes[offset + 2] ?? 0) << 16) + (((bytes[offset + 3] ?? 0) << 24) >>> 0)
  );
}
