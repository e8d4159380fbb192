/**
 * §4.4: the marketing image model, direct and enhanced modes. An estimate is charged at submit and
 * reconciled against the token model's actual usage on completion (§8 rule 2).
 */
import { MarketingImageRequest } from '../api/wire.js';
import { authKey, requireModel } from './auth.js';
import { HttpError, parseJson, validate, type EmuResponse } from './http-util.js';
import type { Ledger } from './ledger.js';
import type { ImageInputs } from './image-inputs.js';
import type { PresetCatalog } from './presets.js';
import type { Rng } from './prng.js';
import type { RequestStore } from './request-store.js';
import type { RouteInput } from './router.js';
import { rawBodyHash, ensureBalance, submitAnswer, webhookFromQuery, type SubmitGate, type WebhookPolicy } from './submit.js';
import { marketingUsage } from './token-model.js';

export interface MarketingImageDeps {
  ledger: Ledger;
  requests: RequestStore;
  presets: PresetCatalog;
  images: ImageInputs;
  rng: Rng;
  gate: SubmitGate;
  webhooks: WebhookPolicy;
}

/** Output size for an aspect ratio: the long side is 160 pixels. */
export function sizeFor(aspect: string): { width: number; height: number } {
  const [w, h] = aspect === 'auto' ? [1, 1] : aspect.split(':').map(Number);
  const rw = w ?? 1;
  const rh = h ?? 1;
  return rw >= rh
    ? { width: 160, height: Math.max(1, Math.round((160 * rh) / rw)) }
    : { width: Math.max(1, Math.round((160 * rw) / rh)), height: 160 };
}

/** The long side of a marketing image at its true size, by `resolution`. */
export const LONG_SIDE: Readonly<Record<'1k' | '2k' | '4k', number>> = { '1k': 1024, '2k': 2048, '4k': 4096 };

export class MarketingImageModel {
  constructor(private readonly d: MarketingImageDeps) {}

  /** `POST {base_url}/marketing-studio/image/sunburst`. */
  async submit(input: RouteInput): Promise<EmuResponse> {
    const d = this.d;
    const account = authKey(d.ledger, input.headers);
    requireModel(account, 'marketing-image');
    const raw = parseJson(input.body) ?? {};
    const body = validate(MarketingImageRequest, raw);
    const enhanced = body.enhance_prompt === true;
    const resolution = body.resolution ?? '2k';
    const quality = body.quality ?? 'high';
    let aspect: string = body.aspect_ratio ?? 'auto';
    let preset: string | null = null;
    if (enhanced) {
      const p = d.presets.usable(body.preset_id ?? '');
      if (!p) throw new HttpError(422, 'preset_id: no visible preset has this id; list the presets again');
      preset = p.id;
      // Enhanced mode: auto takes the preset's aspect ratio; quality is preserved (§4.4).
      if (aspect === 'auto') aspect = p.aspectRatio;
    } else if ((body.image_urls?.length ?? 0) === 0 && (body.prompt ?? '').trim() === '') {
      throw new HttpError(422, 'prompt: a direct generation (no image_urls) needs a prompt');
    }
    for (const [i, u] of (body.image_urls ?? []).entries()) await d.images.check(u, `image_urls[${i}]`);
    const webhook = webhookFromQuery(input.url, d.webhooks);
    const usage = marketingUsage(body, resolution, quality, d.rng.between(0.85, 1));
    await d.gate.pass();
    ensureBalance(account, usage.estimate.micros);
    const mode = enhanced ? 'enhanced' : (body.image_urls?.length ?? 0) > 0 ? 'direct-edit' : 'direct-generate';
    const r = d.requests.create({
      keyId: account.keyId,
      model: 'marketing-image',
      modelPath: input.url.pathname,
      idempotencyKey: undefined,
      bodyHash: rawBodyHash(input.body),
      chargedMicros: usage.estimate.micros,
      actualMicros: usage.actual.micros,
      art: {
        ...sizeFor(aspect),
        longSide: LONG_SIDE[resolution],
        layout: 'render',
        seedText: `marketing|${body.prompt ?? ''}|${aspect}|${preset ?? ''}|${(body.image_urls ?? []).join(',')}`,
      },
      webhook,
      text: body.prompt,
      details: {
        mode,
        resolution,
        quality,
        aspect_ratio: aspect,
        preset_id: preset,
        // With one product image and no model reference, enhanced mode generates no person (§4.4).
        person: enhanced ? (body.image_urls?.length ?? 0) > 1 : null,
        estimate_tokens: { input: usage.estimate.inputTokens, output: usage.estimate.outputTokens },
        actual_tokens: { input: usage.actual.inputTokens, output: usage.actual.outputTokens },
      },
    });
    return submitAnswer(d.requests, r);
  }
}
