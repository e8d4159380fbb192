/** §4.8: the webhook-enabled model path, `POST {platform_url}/{vendor}-ai/soul/standard?hf_webhook=...`. */
import { platformUrl, segment, withWebhook, type ApiContext, type CallContext } from './context.js';
import { validateBody } from './validate.js';
import { SoulStandardRequest, SubmitResponse } from './wire.js';

export const soulStandardPath = (vendor: string): string => `/${segment(vendor)}-ai/soul/standard`;

export class SoulStandardApi {
  constructor(private readonly ctx: ApiContext) {}

  async submit(body: SoulStandardRequest, options: CallContext & { webhookUrl?: string | undefined } = {}): Promise<SubmitResponse> {
    const checked = validateBody(SoulStandardRequest, body, 'Soul standard request');
    const result = await this.ctx.transport.call({
      method: 'POST',
      url: withWebhook(platformUrl(this.ctx, soulStandardPath(this.ctx.config.vendor)), options.webhookUrl),
      auth: 'key',
      json: checked,
      schema: SubmitResponse,
      safety: { kind: 'spends' },
      signal: options.signal,
    });
    return result.data;
  }
}
