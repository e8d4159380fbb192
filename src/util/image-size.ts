/**
 * An image's width and height from the first bytes of its file, for PNG, GIF and WebP: one small
 * read instead of a sharp (libvips) open. The gallery asks this of every output a download did not
 * already size (download.ts reads the same header as the bytes pass) to know whether it needs a
 * thumbnail; through sharp that took about 4 ms of the thread pool per image, which a
 * running run needs for its own downloads and syncs (a 30,000-instance run at zero latency spent
 * 21 s in one gallery rewrite). Other formats (JPEG keeps its size behind variable-length
 * segments) and unreadable files: undefined, and the caller asks sharp.
 */
import { closeSync, openSync, readSync } from 'node:fs';

export interface ImageSize {
  width: number;
  height: number;
}

/** Bytes enough for the headers read here (a WebP VP8X header ends at byte 30). */
export const IMAGE_HEADER_BYTES = 32;

const header = Buffer.alloc(IMAGE_HEADER_BYTES);

/**
 * Read synchronously, on purpose: three system calls of a few microseconds on the main thread
 * cost less than three trips through the thread pool, and leave the pool to the run. null: there
 * is no file at `path` (a run directory whose outputs were moved away), so nothing to ask sharp.
 */
export function imageSizeOf(path: string): ImageSize | null | undefined {
  let fd: number | undefined;
  try {
    fd = openSync(path, 'r');
    const bytesRead = readSync(fd, header, 0, IMAGE_HEADER_BYTES, 0);
    return imageSizeOfHeader(header.subarray(0, bytesRead));
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return code === 'ENOENT' || code === 'ENOTDIR' ? null : undefined;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** The size in an image file's first bytes; undefined for a format not read here or a short header. */
export function imageSizeOfHeader(b: Buffer): ImageSize | undefined {
  // PNG: the signature, then the IHDR chunk (length, type, width, height; big-endian).
  if (b.length >= 24 && b.subarray(0, 8).equals(PNG_SIGNATURE) && b.toString('latin1', 12, 16) === 'IHDR') {
    return sized(b.readUInt32BE(16), b.readUInt32BE(20));
  }
  // GIF: GIF87a or GIF89a, then the logical screen's width and height (little-endian).
  if (b.length >= 10 && /^GIF8[79]a$/.test(b.toString('latin1', 0, 6))) {
    return sized(b.readUInt16LE(6), b.readUInt16LE(8));
  }
  // WebP: a RIFF file of type WEBP whose first chunk is VP8 (lossy), VP8L (lossless) or VP8X (extended).
  if (b.length >= 30 && b.toString('latin1', 0, 4) === 'RIFF' && b.toString('latin1', 8, 12) === 'WEBP') {
    const chunk = b.toString('latin1', 12, 16);
    if (chunk === 'VP8 ' && b[23] === 0x9d && b[24] === 0x01 && b[25] === 0x2a)
      return sized(b.readUInt16LE(26) & 0x3fff, b.readUInt16LE(28) & 0x3fff);
    if (chunk === 'VP8L' && b[20] === 0x2f) {
      const bits = b.readUInt32LE(21);
      return sized((bits & 0x3fff) + 1, ((bits >>> 14) & 0x3fff) + 1);
    }
    if (chunk === 'VP8X') return sized(b.readUIntLE(24, 3) + 1, b.readUIntLE(27, 3) + 1);
  }
  return undefined;
}

const sized = (width: number, height: number): ImageSize | undefined => (width > 0 && height > 0 ? { width, height } : undefined);
