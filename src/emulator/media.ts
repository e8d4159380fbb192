/**
 * §2.4 and §4.6 rule 5: the agent media upload flow. Create a record (id with the extension,
 * content_type from it), PUT the bytes to the pre-signed upload_url with exactly that content type,
 * confirm (`not_ready` until the bytes arrived, and for an image until they decode; then `uploaded`), then the bytes are served at `url`.
 */
import { createHmac } from 'node:crypto';
import { MediaConfirmRequest, MediaCreateRequest, type MediaType } from '../api/wire.js';
import { authKey, requireAgent } from './auth.js';
import { HttpError, json, parseJson, validate, type EmuResponse } from './http-util.js';
import { newHex, newUuid } from './ids.js';
import { imageProblem, type OwnImage } from './image-inputs.js';
import type { Ledger } from './ledger.js';
import type { RouteInput } from './router.js';
import type { Urls } from './urls.js';

/** Largest upload, bytes (the spec shows no limit; 64 MiB matches the image input limit). */
export const MAX_UPLOAD_BYTES = 64 * 1024 * 1024;

const CONTENT_TYPES: Record<string, { contentType: string; family: MediaType }> = {
  png: { contentType: 'image/png', family: 'image' },
  jpg: { contentType: 'image/jpeg', family: 'image' },
  jpeg: { contentType: 'image/jpeg', family: 'image' },
  webp: { contentType: 'image/webp', family: 'image' },
  gif: { contentType: 'image/gif', family: 'image' },
  mp4: { contentType: 'video/mp4', family: 'video' },
  mov: { contentType: 'video/quicktime', family: 'video' },
  webm: { contentType: 'video/webm', family: 'video' },
  wav: { contentType: 'audio/wav', family: 'audio' },
  mp3: { contentType: 'audio/mpeg', family: 'audio' },
  m4a: { contentType: 'audio/mp4', family: 'audio' },
  ogg: { contentType: 'audio/ogg', family: 'audio' },
  pdf: { contentType: 'application/pdf', family: 'file' },
  txt: { contentType: 'text/plain', family: 'file' },
  json: { contentType: 'application/json', family: 'file' },
  csv: { contentType: 'text/csv', family: 'file' },
  zip: { contentType: 'application/zip', family: 'file' },
};

export interface MediaItem {
  id: string;
  keyId: string;
  type: MediaType;
  contentType: string;
  signature: string;
  bytes: Buffer | undefined;
}

export class MediaStore {
  readonly items = new Map<string, MediaItem>();
  readonly #signingKey: string;

  constructor(
    private readonly ledger: Ledger,
    private readonly urls: Urls,
  ) {
    // A secret: from the system's randomness, not the seed (a seed would make upload URLs guessable).
    this.#signingKey = newHex(16);
  }

  get(id: string): MediaItem | undefined {
    return this.items.get(id);
  }

  #record(m: MediaItem): Record<string, string> {
    const cdn = this.urls.cdn();
    const id = encodeURIComponent(m.id);
    return {
      id: m.id,
      type: m.type,
      content_type: m.contentType,
      upload_url: `${cdn}/cdn/upload/${id}?signature=${m.signature}`,
      url: `${cdn}/cdn/media/${id}`,
    };
  }

  /** `POST /v1/agent/media` → 201 record. */
  create(input: RouteInput): EmuResponse {
    const account = authKey(this.ledger, input.headers);
    requireAgent(account);
    const body = validate(MediaCreateRequest, parseJson(input.body));
    const ext = body.extension.toLowerCase();
    const known = CONTENT_TYPES[ext];
    if (known && body.type !== 'file' && known.family !== body.type) {
      throw new HttpError(422, `extension: .${ext} is a ${known.family} extension, not ${body.type}`);
    }
    if (!known && body.type !== 'file') throw new HttpError(422, `extension: .${ext} is not a supported ${body.type} extension`);
    const id = `${newUuid()}.${ext}`;
    const item: MediaItem = {
      id,
      keyId: account.keyId,
      type: body.type,
      contentType: known?.contentType ?? 'application/octet-stream',
      signature: createHmac('sha256', this.#signingKey).update(id).digest('hex').slice(0, 32),
      bytes: undefined,
    };
    this.items.set(id, item);
    return json(201, this.#record(item));
  }

  /** The bytes at a media `url` of this emulator, for the image URL rules (§4.2, image-inputs.ts). */
  imageAt(id: string): OwnImage {
    const media = this.items.get(id);
    if (!media || media.bytes === undefined) return { problem: 'the image is not reachable (no uploaded media at this URL)' };
    if (media.type !== 'image') return { problem: 'the media at this URL is not an image' };
    return { bytes: media.bytes };
  }

  /** `PUT {upload_url}`: no auth, the signature in the URL; the content type must be the record's. */
  put(input: RouteInput): EmuResponse {
    const item = this.items.get(input.params.id ?? '');
    if (!item || input.url.searchParams.get('signature') !== item.signature)
      throw new HttpError(403, 'the upload URL is invalid or its signature does not match');
    const sent = (headerValue(input.headers['content-type']) ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
    if (sent !== item.contentType) {
      throw new HttpError(415, `wrong content type: this upload URL takes ${item.contentType}, got ${sent === '' ? 'none' : sent}`);
    }
    item.bytes = input.body;
    return { status: 200, bytes: new Uint8Array(0) };
  }

  /** `POST /v1/agent/media/{id}/confirm`: `uploaded` or `not_ready`. */
  async confirm(input: RouteInput): Promise<EmuResponse> {
    const account = authKey(this.ledger, input.headers);
    requireAgent(account);
    const item = this.items.get(input.params.id ?? '');
    if (!item || item.keyId !== account.keyId) throw new HttpError(404, 'media not found');
    const body = validate(MediaConfirmRequest, parseJson(input.body));
    if (body.type !== item.type) throw new HttpError(422, `type: this media was created as ${item.type}, not ${body.type}`);
    // The emulator's choice (the spec shows no refusal at confirm): image bytes that would not pass
    // the image rules (§4.2) are not ready, as an upload still being processed would be.
    const ready = item.bytes !== undefined && (item.type !== 'image' || (await imageProblem(item.bytes)) === undefined);
    return json(200, { id: item.id, status: ready ? 'uploaded' : 'not_ready' });
  }

  /** `GET {url}`: the uploaded bytes. */
  serve(input: RouteInput): EmuResponse {
    const item = this.items.get(input.params.id ?? '');
    if (!item || item.bytes === undefined) throw new HttpError(404, 'media not found');
    return { status: 200, bytes: item.bytes, headers: { 'content-type': item.contentType } };
  }
}

function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}
