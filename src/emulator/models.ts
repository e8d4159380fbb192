/**
 * The models the emulator serves, with their duration distributions (before the time scale) and
 * list prices. Only the character sheet's price is in the spec (§8 rule 1); the others are the
 * emulator's own figures (docs/emulator.md lists them as gap fills).
 */
export type ModelId = 'character-sheet' | 'marketing-image' | 'soul-standard' | 'soul' | 'dop' | 'speak';

/** What a finished request carries (§2.1, §6 payload rows). */
export type OutputKind = 'image' | 'video' | 'speak';

export interface ModelInfo {
  id: ModelId;
  output: OutputKind;
  /** Time spent queued, uniform in [min, max] milliseconds. */
  queuedMs: readonly [number, number];
  /** Time spent in progress, uniform in [min, max] milliseconds. */
  runMs: readonly [number, number];
  /** Fixed price per request in US$, when the model has one (marketing image is priced by tokens). */
  priceUsd: number;
}

export const MODELS: Readonly<Record<ModelId, ModelInfo>> = {
  'character-sheet': { id: 'character-sheet', output: 'image', queuedMs: [500, 2_000], runMs: [8_000, 20_000], priceUsd: 0.05 },
  'marketing-image': { id: 'marketing-image', output: 'image', queuedMs: [500, 1_500], runMs: [10_000, 30_000], priceUsd: 0 },
  'soul-standard': { id: 'soul-standard', output: 'image', queuedMs: [300, 1_000], runMs: [5_000, 12_000], priceUsd: 0.03 },
  soul: { id: 'soul', output: 'image', queuedMs: [300, 1_000], runMs: [5_000, 12_000], priceUsd: 0.03 },
  dop: { id: 'dop', output: 'video', queuedMs: [1_000, 3_000], runMs: [30_000, 90_000], priceUsd: 0.25 },
  speak: { id: 'speak', output: 'speak', queuedMs: [1_000, 3_000], runMs: [20_000, 60_000], priceUsd: 0.15 },
};

export const MODEL_IDS = Object.keys(MODELS) as ModelId[];
