/** DoP image-to-video, a legacy job set (§4.7). */
import { validateBody } from '../api/validate.js';
import { DopParams } from '../api/wire.js';
import { jobSetAdapter } from './job-set-adapter.js';
import { videoOutputs, type ModelDefinition } from './model.js';

export const dop: ModelDefinition<'dop'> = {
  name: 'dop',
  summary: 'DoP image-to-video (the legacy `params` object)',
  inputSchema: DopParams,
  build: (input) => validateBody(DopParams, input, 'DoP params'),
  imageFields: [
    ['input_images', '*', 'image_url'],
    ['input_images_end', '*', 'image_url'],
  ],
  placeholderOutputs: videoOutputs,
  adapter: jobSetAdapter((body, ctx) => ctx.client.legacy.dop(body as DopParams, null, { signal: ctx.signal }), { type: 'image2video' }),
  seeded: true,
};
