/** §4.4: the marketing image model; §4.5: its preset catalog. */
import { InvalidInputError } from './errors.js';
import { baseUrl, withWebhook, type ApiContext, type CallContext } from './context.js';
import { validateBody } from './validate.js';
import { MarketingImageRequest, PresetPage, SubmitResponse, type Preset } from './wire.js';

export const MARKETING_IMAGE_PATH = '/marketing-studio/image/sunburst';
export const MARKETING_PRESETS_PATH = '/marketing-studio/image/presets';

/**
 * Validates a marketing-image body (§4.4) and fills the defaults the spec states: resolution 2k,
 * quality high, direct mode (enhance_prompt false).
 */
export function buildMarketingImageRequest(input: unknown): MarketingImageRequest {
  const body = validateBody(MarketingImageRequest, input, 'marketing-image request');
  // Not shown in the spec; the emulator decides (emulator/marketing-image.ts) and the client agrees,
  // so a request the service would refuse is never sent: a direct image is made from a prompt or
  // from reference images.
  if (body.enhance_prompt !== true && (body.image_urls?.length ?? 0) === 0 && (body.prompt ?? '').trim() === '') {
    throw new InvalidInputError('marketing-image request', [
      { path: 'prompt', message: 'a direct generation (no image_urls) needs a prompt' },
    ]);
  }
  // `??`, not a spread under the defaults: a member present but undefined must still get its default.
  return { ...body, resolution: body.resolution ?? '2k', quality: body.quality ?? 'high', enhance_prompt: body.enhance_prompt ?? false };
}

export interface PresetListOptions extends CallContext {
  /** Page size sent as `size`. Default 50. */
  pageSize?: number;
}

export class MarketingImageApi {
  constructor(private readonly ctx: ApiContext) {}

  /** `POST {base_url}/marketing-studio/image/sunburst`. Spends credits; the service takes no Idempotency-Key here. */
  async submit(body: MarketingImageRequest, options: CallContext & { webhookUrl?: string | undefined } = {}): Promise<SubmitResponse> {
    const checked = validateBody(MarketingImageRequest, body, 'marketing-image request');
    const result = await this.ctx.transport.call({
      method: 'POST',
      url: withWebhook(baseUrl(this.ctx, MARKETING_IMAGE_PATH), options.webhookUrl),
      auth: 'key',
      json: checked,
      schema: SubmitResponse,
      safety: { kind: 'spends' },
      signal: options.signal,
    });
    return result.data;
  }

  /** One page of `GET {base_url}/marketing-studio/image/presets?size=N[&cursor=C]`. */
  async presetPage(options: PresetListOptions & { cursor?: string | null | undefined } = {}): Promise<PresetPage> {
    const url = new URL(baseUrl(this.ctx, MARKETING_PRESETS_PATH));
    url.searchParams.set('size', String(options.pageSize ?? 50));
    // The spec does not name the cursor parameter (§4.5); `cursor` is what the service reads.
    if (options.cursor) url.searchParams.set('cursor', options.cursor);
    const result = await this.ctx.transport.call({
      method: 'GET',
      url: url.toString(),
      auth: 'key',
      schema: PresetPage,
      safety: { kind: 'safe' },
      signal: options.signal,
    });
    return result.data;
  }

  /** Every visible preset, following `cursor` page after page until it is null. */
  async *presets(options: PresetListOptions = {}): AsyncGenerator<Preset> {
    const seen = new Set<string>();
    let cursor: string | null | undefined;
    for (let page = 0; page < 10_000; page++) {
      const result = await this.presetPage({ ...options, cursor });
      for (const item of result.items) yield item;
      if (result.cursor === null) return;
      // A cursor that repeats would loop forever; stop instead.
      if (seen.has(result.cursor)) return;
      seen.add(result.cursor);
      cursor = result.cursor;
    }
  }
}
