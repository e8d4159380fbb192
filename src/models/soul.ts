/** Soul text-to-image, a legacy job set (§4.7). */
import { validateBody } from '../api/validate.js';
import { SoulParams } from '../api/wire.js';
import { jobSetAdapter } from './job-set-adapter.js';
import { imageOutputs, type ModelDefinition } from './model.js';

export const soul: ModelDefinition<'soul'> = {
  name: 'soul',
  summary: 'Soul text-to-image (the legacy `params` object)',
  inputSchema: SoulParams,
  build: (input) => validateBody(SoulParams, input, 'Soul params'),
  imageFields: [['image_reference', 'image_url']],
  placeholderOutputs: imageOutputs,
  adapter: jobSetAdapter((body, ctx) => ctx.client.legacy.soul(body as SoulParams, null, { signal: ctx.signal }), {
    type: 'text2image_soul',
  }),
  seeded: true,
};
