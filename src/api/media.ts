/** §2.4 and §4.6 rule 5: the agent media upload flow, also used to pass local files by URL. */
import { readFile } from 'node:fs/promises';
import { baseUrl, segment, type ApiContext, type CallContext } from './context.js';
import { GenpipeError } from './errors.js';
import { checkLocalImage } from './local-image.js';
import { sleep } from './sleep.js';
import { validateBody } from './validate.js';
import { MediaConfirmResponse, MediaCreateRequest, MediaRecord, type MediaType } from './wire.js';
import { AGENT_BASE_PATH } from './agent.js';

export class MediaApi {
  constructor(private readonly ctx: ApiContext) {}

  /** `POST /v1/agent/media` (201): creates the record with its upload_url and hosted url. */
  async create(extension: string, type: MediaType, options: CallContext = {}): Promise<MediaRecord> {
    const body = validateBody(MediaCreateRequest, { extension, type }, 'media record');
    const result = await this.ctx.transport.call({
      method: 'POST',
      url: baseUrl(this.ctx, `${AGENT_BASE_PATH}/media`),
      auth: 'key',
      json: body,
      schema: MediaRecord,
      safety: { kind: 'safe' },
      signal: options.signal,
    });
    return result.data;
  }

  /** PUTs the bytes to the pre-signed upload_url with the record's content type and no auth headers. */
  async put(record: MediaRecord, bytes: Uint8Array, options: CallContext = {}): Promise<void> {
    await this.ctx.transport.call({
      method: 'PUT',
      url: record.upload_url,
      auth: 'none',
      bytes,
      headers: { 'content-type': record.content_type },
      safety: { kind: 'safe' },
      signal: options.signal,
    });
  }

  /** `POST /v1/agent/media/{id}/confirm`: `uploaded`, or `not_ready` until the bytes arrive. */
  async confirm(record: Pick<MediaRecord, 'id' | 'type'>, options: CallContext = {}): Promise<MediaConfirmResponse['status']> {
    const result = await this.ctx.transport.call({
      method: 'POST',
      url: baseUrl(this.ctx, `${AGENT_BASE_PATH}/media/${segment(record.id)}/confirm`),
      auth: 'key',
      json: { type: record.type },
      schema: MediaConfirmResponse,
      safety: { kind: 'safe' },
      signal: options.signal,
    });
    return result.data.status;
  }

  /** The whole flow: create, PUT, confirm (waiting out `not_ready` a few times), and return the hosted url. */
  async upload(
    bytes: Uint8Array,
    extension: string,
    type: MediaType,
    options: CallContext & { confirmAttempts?: number; confirmDelayMs?: number } = {},
  ): Promise<string> {
    const record = await this.create(extension, type, options);
    await this.put(record, bytes, options);
    const attempts = options.confirmAttempts ?? 10;
    for (let i = 0; i < attempts; i++) {
      if ((await this.confirm(record, options)) === 'uploaded') return record.url;
      await sleep((options.confirmDelayMs ?? 500) * (i + 1), options.signal);
    }
    throw new GenpipeError('invalid_response', `The upload of media ${record.id} was still not_ready after ${attempts} confirmations.`);
  }

  /** Checks a local image (JPEG/PNG/WebP, still, ≤ 64 MiB), uploads it and returns its hosted url. */
  async uploadLocalImage(path: string, options: CallContext = {}): Promise<string> {
    const image = await checkLocalImage(path);
    const bytes = await readFile(path);
    return this.upload(bytes, image.extension, 'image', options);
  }
}
