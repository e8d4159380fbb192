/**
 * What the plan needs to know of each generation model: how a step's input becomes a valid
 * request body, where local image paths may stand, what it costs, and the shape of its outputs
 * (so a for_each step can be checked before its upstream has run). Adding a model means adding one
 * entry here (and, for running it, one adapter in this folder).
 */
import { buildCharacterSheetRequest } from '../api/character-sheet.js';
import { buildMarketingImageRequest } from '../api/marketing-image.js';
import { validateBody } from '../api/validate.js';
import {
  CHARACTER_SHEET_PRICE_USD,
  DopParams,
  SendMessageRequest,
  SoulParams,
  SoulStandardRequest,
  SpeakParams,
  type OptionsCatalog,
} from '../api/wire.js';
import type { ModelName } from '../manifest/schema.js';

/** A place in a request body that holds an image URL: `*` stands for every array item. */
export type ImageField = readonly (string | '*')[];

export interface ModelSpec {
  name: ModelName | 'raw';
  /** Validates the rendered input and returns the request body; throws InvalidInputError. */
  build(input: unknown, context: { catalog?: OptionsCatalog | undefined }): unknown;
  /** Where local file paths may stand in for image URLs. */
  imageFields: readonly ImageField[];
  /** Listed price per instance in US$, when the spec states one. */
  listPriceUsd?: number;
  /** Outputs as a downstream template sees them, with placeholder URLs, for plan-time checks. */
  placeholderOutputs(instanceId: string): Record<string, unknown>;
  /** Whether the selection needs the live options catalog to be checked. */
  needsCatalog?(input: unknown): boolean;
}

const placeholderUrl = (instanceId: string, name: string): string => `https://upstream.genpipe.invalid/${encodeURIComponent(instanceId)}/${name}`;
const imageOutputs = (id: string): Record<string, unknown> => ({ request_id: '00000000-0000-4000-8000-000000000000', images: [{ url: placeholderUrl(id, 'image-0.png') }] });
const videoOutputs = (id: string): Record<string, unknown> => ({ request_id: '00000000-0000-4000-8000-000000000000', video: { url: placeholderUrl(id, 'video.mp4') } });

export const MODELS: Readonly<Record<ModelName, ModelSpec>> = {
  'character-sheet': {
    name: 'character-sheet',
    build: (input, { catalog }) => buildCharacterSheetRequest(input, catalog),
    imageFields: [['image_url'], ['item_image_urls', '*']],
    listPriceUsd: CHARACTER_SHEET_PRICE_USD,
    placeholderOutputs: imageOutputs,
    needsCatalog: (input) => {
      const selection = (input as { selection?: unknown } | null)?.selection;
      return selection !== null && typeof selection === 'object' && Object.keys(selection).length > 0;
    },
  },
  'marketing-image': {
    name: 'marketing-image',
    build: (input) => buildMarketingImageRequest(input),
    imageFields: [['image_urls', '*']],
    placeholderOutputs: imageOutputs,
  },
  agent: {
    name: 'agent',
    build: (input) => validateBody(SendMessageRequest, input, 'agent message'),
    imageFields: [],
    placeholderOutputs: (id) => ({ session_id: '00000000-0000-4000-8000-000000000000', message_id: 'placeholder', answer: `answer of ${id}` }),
  },
  dop: {
    name: 'dop',
    build: (input) => validateBody(DopParams, input, 'DoP params'),
    imageFields: [['input_images', '*', 'image_url'], ['input_images_end', '*', 'image_url']],
    placeholderOutputs: videoOutputs,
  },
  soul: {
    name: 'soul',
    build: (input) => validateBody(SoulParams, input, 'Soul params'),
    imageFields: [['image_reference', 'image_url']],
    placeholderOutputs: imageOutputs,
  },
  speak: {
    name: 'speak',
    build: (input) => validateBody(SpeakParams, input, 'Speak params'),
    imageFields: [['input_image', 'image_url']],
    placeholderOutputs: videoOutputs,
  },
  'soul-standard': {
    name: 'soul-standard',
    build: (input) => validateBody(SoulStandardRequest, input, 'Soul standard request'),
    imageFields: [],
    placeholderOutputs: imageOutputs,
  },
};

/** A raw endpoint path: any JSON object body, no listed price. */
export const RAW_MODEL: ModelSpec = {
  name: 'raw',
  build: (input) => input,
  imageFields: [],
  placeholderOutputs: imageOutputs,
};

export const modelFor = (model: string): ModelSpec => (Object.hasOwn(MODELS, model) ? MODELS[model as ModelName] : RAW_MODEL);

/** Visits every value at an image field of `body`, letting `replace` swap it. */
export function mapImageFields(body: unknown, fields: readonly ImageField[], replace: (value: string) => string): unknown {
  const walk = (node: unknown, path: readonly (string | '*')[]): unknown => {
    if (path.length === 0) return typeof node === 'string' ? replace(node) : node;
    const [head, ...rest] = path;
    if (head === '*') return Array.isArray(node) ? node.map((item) => walk(item, rest)) : node;
    if (node === null || typeof node !== 'object' || Array.isArray(node) || head === undefined || !Object.hasOwn(node, head)) return node;
    return { ...(node as Record<string, unknown>), [head]: walk((node as Record<string, unknown>)[head], rest) };
  };
  return fields.reduce((current, field) => walk(current, field), body);
}

/** True when a string is a URL the service can fetch (rather than a local path). */
export const isRemoteUrl = (value: string): boolean => /^https?:\/\//i.test(value);
