/**
 * The CDN: generated outputs at `/cdn/outputs/{request_id}/{file}`, drawn on demand from the
 * request's art spec (a PNG, a WAV, or an MP4 placeholder) and cached.
 */
import { HttpError, type EmuResponse } from './http-util.js';
import { placeholderMp4 } from './mp4.js';
import { drawArt } from './png.js';
import type { RequestStore } from './request-store.js';
import type { RouteInput } from './router.js';
import { toneWav } from './wav.js';

const MAX_CACHE = 512;
/** The cache also stays under this many bytes (true-size videos are 20 MB each). */
const MAX_CACHE_BYTES = 256 * 1024 * 1024;

export class Cdn {
  readonly #cache = new Map<string, Buffer>();
  #cachedBytes = 0;

  /** `videoBytes`: the size of a video output (true sizes); 0 for the small placeholder. */
  constructor(
    private readonly requests: RequestStore,
    private readonly videoBytes = 0,
  ) {}

  serve(input: RouteInput): EmuResponse {
    const file = input.params.file ?? '';
    const bytes = this.bytesOf(input.params.id ?? '', file);
    const type = contentTypeOf(file);
    if (!bytes || !type) throw new HttpError(404, 'output not found');
    return { status: 200, bytes, headers: { 'content-type': type, 'cache-control': 'public, max-age=86400' } };
  }

  /** An output's bytes, or undefined while its request has not completed (or for an unknown file). */
  bytesOf(id: string, file: string): Buffer | undefined {
    const r = this.requests.get(id);
    if (!r || this.requests.statusOf(r) !== 'completed' || !contentTypeOf(file)) return undefined;
    const key = `${r.id}/${file}`;
    let bytes = this.#cache.get(key);
    if (!bytes) {
      bytes = render(file, r.art.seedText, this.videoBytes, () =>
        drawArt(
          file.startsWith('min') ? { ...r.art, width: Math.max(16, r.art.width >> 1), height: Math.max(9, r.art.height >> 1) } : r.art,
        ),
      );
      while (this.#cache.size > 0 && (this.#cache.size >= MAX_CACHE || this.#cachedBytes + bytes.length > MAX_CACHE_BYTES)) {
        const oldest = this.#cache.keys().next().value as string;
        this.#cachedBytes -= this.#cache.get(oldest)?.length ?? 0;
        this.#cache.delete(oldest);
      }
      this.#cache.set(key, bytes);
      this.#cachedBytes += bytes.length;
    }
    return bytes;
  }
}

function contentTypeOf(file: string): string | undefined {
  if (file.endsWith('.png')) return 'image/png';
  if (file.endsWith('.wav')) return 'audio/wav';
  if (file.endsWith('.mp4')) return 'video/mp4';
  return undefined;
}

function render(file: string, seedText: string, videoBytes: number, png: () => Buffer): Buffer {
  if (file.endsWith('.wav')) return toneWav(seedText);
  if (file.endsWith('.mp4')) return placeholderMp4(`${seedText}|${file}`, videoBytes);
  return png();
}
