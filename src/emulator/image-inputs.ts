/**
 * Image URL rules (service spec §4.2, §8): "reachable by the service; non-animated JPEG, PNG or
 * WebP; at most 64 MiB each; must pass decoding and validation". The emulator checks every image
 * it can see without leaving the machine: its own uploaded media and outputs (read in process) and
 * loopback URLs (fetched). A URL elsewhere it cannot reach: by default it is accepted as an offline
 * stand-in (checked only by its extension), so dry runs of real manifests work without a network;
 * with `strictImageUrls` it is refused as unreachable.
 */
import { createHash } from 'node:crypto';
import sharp from 'sharp';
import { request } from 'undici';
import { HttpError } from './http-util.js';
import { isLoopbackUrl } from './loopback.js';

/** §8: reference image download, 64 MiB each. */
export const MAX_IMAGE_BYTES = 64 * 1024 * 1024;
/** How long a loopback image may take to answer, ms (wall-clock). */
const FETCH_TIMEOUT_MS = 10_000;
const IMAGE_EXTENSIONS = new Set(['jpg', 'jpeg', 'png', 'webp']);

type Format = 'jpeg' | 'png' | 'webp';

function sniff(b: Uint8Array): Format | undefined {
  if (b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return 'jpeg';
  if (b.length >= 8 && Buffer.from(b.subarray(0, 8)).equals(PNG_SIGNATURE)) return 'png';
  if (b.length >= 12 && ascii(b, 0, 4) === 'RIFF' && ascii(b, 8, 12) === 'WEBP') return 'webp';
  return undefined;
}

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
const ascii = (b: Uint8Array, from: number, to: number): string => Buffer.from(b.subarray(from, to)).toString('latin1');

/** APNG (an acTL chunk before the image data) or an animated WebP (the VP8X animation flag). */
function animated(b: Uint8Array, format: Format): boolean {
  if (format === 'webp') return ascii(b, 12, 16) === 'VP8X' && b.length > 20 && ((b[20] ?? 0) & 0x02) !== 0;
  if (format !== 'png') return false;
  const view = Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  for (let at = 8; at + 8 <= view.length;) {
    const type = view.toString('latin1', at + 4, at + 8);
    if (type === 'acTL') return true;
    if (type === 'IDAT') return false;
    at += 12 + view.readUInt32BE(at);
  }
  return false;
}

/** Verdicts by content hash: the same reference image is checked once (a sweep reuses it thousands of times). */
const verdicts = new Map<string, string | null>();
const MAX_VERDICTS = 4_096;

/** Why these bytes are not an acceptable reference image, or undefined when they are. */
export async function imageProblem(bytes: Uint8Array): Promise<string | undefined> {
  if (bytes.length > MAX_IMAGE_BYTES) return 'is larger than 64 MiB';
  const format = sniff(bytes);
  if (!format) return 'is not a JPEG, PNG or WebP image';
  if (animated(bytes, format)) return `is an animated ${format === 'png' ? 'PNG' : 'WebP'}; only still images are accepted`;
  const key = createHash('sha256').update(bytes).digest('hex');
  const known = verdicts.get(key);
  if (known !== undefined) return known ?? undefined;
  let problem: string | null = null;
  try {
    const meta = await sharp(bytes).metadata();
    if ((meta.pages ?? 1) > 1) problem = 'is animated; only still images are accepted';
    else await sharp(bytes).raw().toBuffer();
  } catch {
    problem = `does not decode as a ${format === 'jpeg' ? 'JPEG' : format === 'png' ? 'PNG' : 'WebP'} image`;
  }
  if (verdicts.size >= MAX_VERDICTS) verdicts.delete(verdicts.keys().next().value as string);
  verdicts.set(key, problem);
  return problem ?? undefined;
}

/** Where the emulator finds an image of its own (uploaded media, a completed output) without HTTP. */
export type OwnImage = { bytes: Uint8Array } | { problem: string } | undefined;

export interface ImageInputDeps {
  /** The bytes behind a URL of the emulator's own origin; undefined when the URL is not its own. */
  own: (url: URL) => OwnImage;
  /** Refuse (true) or accept (false, the default) image URLs the emulator cannot reach. */
  strict: boolean;
}

export class ImageInputs {
  constructor(private readonly d: ImageInputDeps) {}

  /** Refuses (422, `field: message`, before anything is charged) an image URL the service would refuse. */
  async check(value: string | null | undefined, field: string): Promise<void> {
    if (value == null) return;
    const url = new URL(value);
    const own = this.d.own(url);
    let bytes: Uint8Array;
    if (own !== undefined) {
      if ('problem' in own) throw new HttpError(422, `${field}: ${own.problem}`);
      bytes = own.bytes;
    } else if (isLoopbackUrl(url)) {
      bytes = await fetchImage(url, field);
    } else {
      if (this.d.strict)
        throw new HttpError(422, `${field}: the image is not reachable (strict image URLs: the emulator reaches only this machine)`);
      // Offline stand-in: the extension is all there is to check; a URL without one passes.
      const ext = /\.([A-Za-z0-9]+)$/.exec(url.pathname)?.[1]?.toLowerCase();
      if (ext !== undefined && ext.length <= 5 && !IMAGE_EXTENSIONS.has(ext))
        throw new HttpError(422, `${field}: must be a non-animated JPEG, PNG or WebP image, not .${ext}`);
      return;
    }
    const problem = await imageProblem(bytes);
    if (problem !== undefined) throw new HttpError(422, `${field}: the image ${problem}`);
  }
}

async function fetchImage(url: URL, field: string): Promise<Uint8Array> {
  const unreachable = (why: string): HttpError => new HttpError(422, `${field}: the image is not reachable (${why})`);
  let res: Awaited<ReturnType<typeof request>>;
  try {
    res = await request(url, { method: 'GET', headersTimeout: FETCH_TIMEOUT_MS, bodyTimeout: FETCH_TIMEOUT_MS });
  } catch (error) {
    throw unreachable((error as NodeJS.ErrnoException).code ?? 'the connection failed');
  }
  if (res.statusCode !== 200) {
    await res.body.dump();
    throw unreachable(`HTTP ${res.statusCode}`);
  }
  const declared = Number(res.headers['content-length']);
  if (Number.isFinite(declared) && declared > MAX_IMAGE_BYTES) {
    res.body.destroy();
    throw new HttpError(422, `${field}: the image is larger than 64 MiB`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of res.body) {
      size += (chunk as Buffer).length;
      if (size > MAX_IMAGE_BYTES) {
        res.body.destroy();
        throw new HttpError(422, `${field}: the image is larger than 64 MiB`);
      }
      chunks.push(chunk as Buffer);
    }
  } catch (error) {
    if (error instanceof HttpError) throw error;
    throw unreachable('the download was cut');
  }
  return Buffer.concat(chunks);
}
