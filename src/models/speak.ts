/** Speak, a legacy job set (§4.7). */
import { validateBody } from '../api/validate.js';
import { SpeakParams } from '../api/wire.js';
import { jobSetAdapter } from './job-set-adapter.js';
import { videoOutputs, type ModelDefinition } from './model.js';

export const speak: ModelDefinition<'speak'> = {
  name: 'speak',
  summary: 'Speak: a talking video from an image and audio (the `params` object)',
  inputSchema: SpeakParams,
  build: (input) => validateBody(SpeakParams, input, 'Speak params'),
  imageFields: [['input_image', 'image_url']],
  placeholderOutputs: videoOutputs,
  adapter: jobSetAdapter((body, ctx) => ctx.client.legacy.speak(body as SpeakParams, { signal: ctx.signal })),
  seeded: true,
};
