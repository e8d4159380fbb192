/**
 * The marketing image token model (§8 billing rule 2; the spec gives no figures, these are the
 * emulator's). Input tokens grow with prompt length and reference images (and the preset template
 * in enhanced mode, at the same rate: no surcharge); output tokens with resolution and quality.
 * The estimate charged at submit assumes the nominal output; the actual output is 85–100 % of it,
 * so reconciliation on completion refunds the difference.
 */
import type { MarketingImageRequest } from '../api/wire.js';

export const INPUT_USD_PER_MTOK = 5;
export const OUTPUT_USD_PER_MTOK = 40;
export const TOKENS_PER_REFERENCE_IMAGE = 560;
export const PRESET_TEMPLATE_TOKENS = 350;
export const OUTPUT_TOKENS_BY_RESOLUTION: Readonly<Record<string, number>> = { '1k': 1_024, '2k': 2_048, '4k': 4_096 };
export const QUALITY_FACTOR: Readonly<Record<string, number>> = { low: 0.25, medium: 0.5, high: 1, xhigh: 1.5, max: 2 };

export interface TokenUsage {
  inputTokens: number;
  outputTokens: number;
  micros: number;
}

export function inputTokens(body: MarketingImageRequest): number {
  const prompt = Math.ceil((body.prompt ?? '').length / 4);
  const images = (body.image_urls?.length ?? 0) * TOKENS_PER_REFERENCE_IMAGE;
  return prompt + images + (body.enhance_prompt === true ? PRESET_TEMPLATE_TOKENS : 0);
}

export function nominalOutputTokens(resolution: string, quality: string): number {
  return Math.round((OUTPUT_TOKENS_BY_RESOLUTION[resolution] ?? 2_048) * (QUALITY_FACTOR[quality] ?? 1));
}

export function costMicros(input: number, output: number): number {
  return Math.round(input * INPUT_USD_PER_MTOK + output * OUTPUT_USD_PER_MTOK);
}

/** The estimate (nominal output) and the actual usage (output × `fraction`, 0.85 ≤ fraction ≤ 1). */
export function marketingUsage(
  body: MarketingImageRequest,
  resolution: string,
  quality: string,
  fraction: number,
): { estimate: TokenUsage; actual: TokenUsage } {
  const inTok = inputTokens(body);
  const nominal = nominalOutputTokens(resolution, quality);
  const actualOut = Math.round(nominal * Math.min(1, Math.max(0.85, fraction)));
  return {
    estimate: { inputTokens: inTok, outputTokens: nominal, micros: costMicros(inTok, nominal) },
    actual: { inputTokens: inTok, outputTokens: actualOut, micros: costMicros(inTok, actualOut) },
  };
}
