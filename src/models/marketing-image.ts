/** The marketing image model (§4.4): no Idempotency-Key, no seed; priced by the manifest. */
import { buildMarketingImageRequest } from '../api/marketing-image.js';
import { MarketingImageRequest } from '../api/wire.js';
import { imageOutputs, type ModelDefinition } from './model.js';
import { requestAdapter } from './request-adapter.js';

export const marketingImage: ModelDefinition<'marketing-image'> = {
  name: 'marketing-image',
  tokenPriced: true,
  summary: 'a marketing image, direct or enhanced with a preset',
  inputSchema: MarketingImageRequest,
  build: (input) => buildMarketingImageRequest(input),
  imageFields: [['image_urls', '*']],
  placeholderOutputs: imageOutputs,
  adapter: requestAdapter({
    idempotentSubmit: false,
    submit: (body, _key, ctx) =>
      ctx.client.marketingImage.submit(body as MarketingImageRequest, { webhookUrl: ctx.webhookUrl, signal: ctx.signal }),
  }),
  seeded: false,
};
