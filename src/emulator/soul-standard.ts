/** §4.8: the webhook-enabled model path, `POST {platform_url}/{vendor}-ai/soul/standard?hf_webhook=...`. */
import { SoulStandardRequest } from '../api/wire.js';
import { authKey, requireModel } from './auth.js';
import { parseJson, validate, type EmuResponse } from './http-util.js';
import { usdToMicros, type Ledger } from './ledger.js';
import { LONG_SIDE, sizeFor } from './marketing-image.js';
import { MODELS } from './models.js';
import type { RequestStore } from './request-store.js';
import type { RouteInput } from './router.js';
import { rawBodyHash, ensureBalance, submitAnswer, webhookFromQuery, type SubmitGate, type WebhookPolicy } from './submit.js';

export class SoulStandardModel {
  constructor(private readonly d: { ledger: Ledger; requests: RequestStore; gate: SubmitGate; webhooks: WebhookPolicy }) {}

  async submit(input: RouteInput): Promise<EmuResponse> {
    const d = this.d;
    const account = authKey(d.ledger, input.headers);
    requireModel(account, 'soul-standard');
    const raw = parseJson(input.body);
    const body = validate(SoulStandardRequest, raw);
    const webhook = webhookFromQuery(input.url, d.webhooks);
    const price = usdToMicros(MODELS['soul-standard'].priceUsd);
    await d.gate.pass();
    ensureBalance(account, price);
    const aspect = /^\d+:\d+$/.test(body.aspect_ratio) ? body.aspect_ratio : '1:1';
    const r = d.requests.create({
      keyId: account.keyId,
      model: 'soul-standard',
      modelPath: input.url.pathname,
      bodyHash: rawBodyHash(input.body),
      chargedMicros: price,
      art: {
        ...sizeFor(aspect),
        longSide: LONG_SIDE[body.resolution as '1k'] ?? 2048,
        layout: 'render',
        seedText: `soul-standard|${body.prompt}|${body.aspect_ratio}|${body.resolution}`,
      },
      webhook,
      text: body.prompt,
      details: { aspect_ratio: body.aspect_ratio, resolution: body.resolution },
    });
    return submitAnswer(d.requests, r);
  }
}
