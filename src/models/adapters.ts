/** The adapter of every model, by the name a manifest uses. Adding a model: one adapter, one line. */
import type { CharacterSheetRequest, DopParams, MarketingImageRequest, SoulParams, SoulStandardRequest, SpeakParams } from '../api/wire.js';
import type { ModelName } from '../manifest/schema.js';
import type { ModelAdapter } from './adapter.js';
import { agentAdapter } from './agent-adapter.js';
import { jobSetAdapter } from './job-set-adapter.js';
import { requestAdapter } from './request-adapter.js';

export const ADAPTERS: Readonly<Record<ModelName, ModelAdapter>> = {
  'character-sheet': requestAdapter({
    idempotentSubmit: true,
    submit: (body, idempotencyKey, ctx) => ctx.client.characterSheet.submit(body as CharacterSheetRequest, { idempotencyKey, webhookUrl: ctx.webhookUrl, signal: ctx.signal }),
  }),
  'marketing-image': requestAdapter({
    idempotentSubmit: false,
    submit: (body, _key, ctx) => ctx.client.marketingImage.submit(body as MarketingImageRequest, { webhookUrl: ctx.webhookUrl, signal: ctx.signal }),
  }),
  'soul-standard': requestAdapter({
    idempotentSubmit: false,
    submit: (body, _key, ctx) => ctx.client.soulStandard.submit(body as SoulStandardRequest, { webhookUrl: ctx.webhookUrl, signal: ctx.signal }),
  }),
  dop: jobSetAdapter((body, ctx) => ctx.client.legacy.dop(body as DopParams, null, { signal: ctx.signal })),
  soul: jobSetAdapter((body, ctx) => ctx.client.legacy.soul(body as SoulParams, null, { signal: ctx.signal })),
  speak: jobSetAdapter((body, ctx) => ctx.client.legacy.speak(body as SpeakParams, { signal: ctx.signal })),
  agent: agentAdapter,
};

export const adapterFor = (model: string): ModelAdapter | undefined => (Object.hasOwn(ADAPTERS, model) ? ADAPTERS[model as ModelName] : undefined);
