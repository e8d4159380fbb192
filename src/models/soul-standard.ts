/** The webhook-enabled Soul standard path (§4.8): no Idempotency-Key, no seed. */
import { validateBody } from '../api/validate.js';
import { SoulStandardRequest } from '../api/wire.js';
import { imageOutputs, type ModelDefinition } from './model.js';
import { requestAdapter } from './request-adapter.js';

export const soulStandard: ModelDefinition<'soul-standard'> = {
  name: 'soul-standard',
  summary: 'Soul text-to-image on the webhook-enabled path',
  inputSchema: SoulStandardRequest,
  build: (input) => validateBody(SoulStandardRequest, input, 'Soul standard request'),
  imageFields: [],
  placeholderOutputs: imageOutputs,
  adapter: requestAdapter({
    idempotentSubmit: false,
    submit: (body, _key, ctx) =>
      ctx.client.soulStandard.submit(body as SoulStandardRequest, { webhookUrl: ctx.webhookUrl, signal: ctx.signal }),
  }),
  seeded: false,
};
