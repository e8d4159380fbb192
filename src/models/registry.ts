/**
 * Every model genpipe can run, by the name a manifest uses, and the raw endpoint path that can only
 * be planned. Adding a model is one file in this folder (see model.ts) and one line in the list
 * below: the manifest's model names, the plan's rules and prices and the run's adapter all come
 * from it.
 */
import { agent } from './agent.js';
import { characterSheet } from './character-sheet.js';
import { dop } from './dop.js';
import { marketingImage } from './marketing-image.js';
import { imageOutputs, type ImageField, type ModelDefinition, type ModelSpec } from './model.js';
import type { ModelAdapter } from './adapter.js';
import { soulStandard } from './soul-standard.js';
import { soul } from './soul.js';
import { speak } from './speak.js';

export type { ImageField, ModelDefinition, ModelSpec } from './model.js';

export const MODEL_DEFINITIONS = [characterSheet, marketingImage, agent, dop, soul, speak, soulStandard] as const;

export type ModelName = (typeof MODEL_DEFINITIONS)[number]['name'];

/** The names a manifest's `model:` takes, in the order the docs list them. */
export const MODEL_NAMES = MODEL_DEFINITIONS.map((m) => m.name) as [ModelName, ...ModelName[]];

const BY_NAME: ReadonlyMap<string, ModelDefinition> = new Map(MODEL_DEFINITIONS.map((m) => [m.name, m]));

/** A raw endpoint path: any JSON object body, no listed price, planned but not run. */
export const RAW_MODEL: ModelSpec = {
  name: 'raw',
  build: (input) => input,
  imageFields: [],
  placeholderOutputs: imageOutputs,
};

export const modelFor = (model: string): ModelSpec => BY_NAME.get(model) ?? RAW_MODEL;

/** The model's definition, or undefined for a raw endpoint path. */
export const definitionOf = (model: string): ModelDefinition | undefined => BY_NAME.get(model);

export const adapterFor = (model: string): ModelAdapter | undefined => BY_NAME.get(model)?.adapter;

/** Visits every value at an image field of `body`, letting `replace` swap it. */
export function mapImageFields(
  body: unknown,
  fields: readonly ImageField[],
  replace: (value: string, at: readonly (string | number)[]) => string,
): unknown {
  const walk = (node: unknown, path: readonly (string | '*')[], at: readonly (string | number)[]): unknown => {
    if (path.length === 0) return typeof node === 'string' ? replace(node, at) : node;
    const [head, ...rest] = path;
    if (head === '*') return Array.isArray(node) ? node.map((item, i) => walk(item, rest, [...at, i])) : node;
    if (node === null || typeof node !== 'object' || Array.isArray(node) || head === undefined || !Object.hasOwn(node, head)) return node;
    return { ...(node as Record<string, unknown>), [head]: walk((node as Record<string, unknown>)[head], rest, [...at, head]) };
  };
  return fields.reduce((current, field) => walk(current, field, []), body);
}

/** True when a string is a URL the service can fetch (rather than a local path). */
export const isRemoteUrl = (value: string): boolean => /^https?:\/\//i.test(value);

/**
 * The input field of a step that the live options catalog checks (§4.1), when the step's model has
 * one and the step sets it: such a step is neither validated nor planned without the catalog.
 */
export function catalogFieldSet(model: string, input: Readonly<Record<string, unknown>> | undefined): string | undefined {
  const field = modelFor(model).catalogField;
  return field !== undefined && input !== undefined && Object.hasOwn(input, field) ? field : undefined;
}
