/**
 * One generation model, as genpipe knows it: how a step's input becomes a valid request body, where
 * local image paths may stand, what it costs, the shape of its outputs (so a for_each step can be
 * checked before its upstream has run), how a run submits and tracks it, and whether an nsfw
 * result can be re-rolled with another seed. Each model is one file in this folder that exports
 * one definition; `registry.ts` lists them.
 */
import type * as z from 'zod';
import type { OptionsCatalog } from '../api/wire.js';
import type { ModelAdapter } from './adapter.js';

/** A place in a request body that holds an image URL: `*` stands for every array item. */
export type ImageField = readonly (string | '*')[];

/** What the plan needs of a model (a raw endpoint path has one too, without an adapter). */
export interface ModelSpec {
  name: string;
  /** Validates the rendered input and returns the request body; throws InvalidInputError. */
  build(input: unknown, context: { catalog?: OptionsCatalog | undefined }): unknown;
  /** Where local file paths may stand in for image URLs. */
  imageFields: readonly ImageField[];
  /** Listed price per instance in US$, when the spec states one. */
  listPriceUsd?: number;
  /**
   * Priced by tokens (§8 rule 2): the charge at submit is the service's estimate, reconciled later to
   * actual token usage, so any price a manifest gives it is provisional.
   */
  tokenPriced?: true;
  /** Outputs as a downstream template sees them, with placeholder URLs, for plan-time checks. */
  placeholderOutputs(instanceId: string): Record<string, unknown>;
  /**
   * The input field checked against the live options catalog (§4.1): a step whose input sets it
   * cannot be validated, nor planned, without the catalog.
   */
  catalogField?: string;
  /**
   * Set for a model that speaks in conversations (§4.6): a step may script `replies` and share a
   * `conversation`, and its input must hold the message text at `messageField`. Other models
   * refuse both keys.
   */
  conversation?: { messageField: string };
}

/** A model a manifest names and a run can run. */
export interface ModelDefinition<Name extends string = string> extends ModelSpec {
  name: Name;
  /** One line for the docs: what the model makes. */
  summary: string;
  /** The step's `input` as the service takes it (before templates are rendered): the JSON Schema and the README's field list come from it. */
  inputSchema: z.ZodType;
  /** How a run submits, tracks and stops it. */
  adapter: ModelAdapter;
  /**
   * How long a request of this model takes, [shortest, longest] in ms, when the spec documents it:
   * a run's first polls are planned for it (poll-schedule.ts) instead of a cold backoff. Set only
   * from the spec; the spec (2.0.0) documents none for any model, so none sets it yet.
   */
  documentedDurationMs?: readonly [number, number];
  /** True when its body takes a `seed` (1 to 1,000,000), so an nsfw result can be re-rolled. */
  seeded: boolean;
  /**
   * The body a genpipe older than journaled seeds sent after re-rolling `times` times (a journal
   * it wrote is still resumed so). Default: the seed moved on by `times` (seedMovedOn).
   */
  rerolledBefore?(body: Record<string, unknown>, times: number): Record<string, unknown>;
}

/** Seeds are 1 to 1,000,000 (§4.2; the legacy models take the same range here). */
export const SEED_MAX = 1_000_000;

/** A body whose seed moved on by `times`, wrapping within 1 to SEED_MAX (an older genpipe's re-roll). */
export function seedMovedOn(body: Record<string, unknown>, times: number): Record<string, unknown> {
  const seed = body.seed;
  return { ...body, seed: typeof seed === 'number' ? ((seed - 1 + times) % SEED_MAX) + 1 : times };
}

const placeholderUrl = (instanceId: string, name: string): string =>
  `https://upstream.genpipe.invalid/${encodeURIComponent(instanceId)}/${name}`;
const PLACEHOLDER_ID = '00000000-0000-4000-8000-000000000000';

/** Placeholder outputs of a model that makes one image. */
export const imageOutputs = (id: string): Record<string, unknown> => ({
  request_id: PLACEHOLDER_ID,
  images: [{ url: placeholderUrl(id, 'image-0.png') }],
});
/** Placeholder outputs of a model that makes a video. */
export const videoOutputs = (id: string): Record<string, unknown> => ({
  request_id: PLACEHOLDER_ID,
  video: { url: placeholderUrl(id, 'video.mp4') },
});
