/**
 * §4.7: legacy platform endpoints (DoP, Soul, Speak) that return job sets (§2.7), authenticated
 * with `hf-api-key` and `hf-secret`. `GET /v1/job-sets/{id}` goes beyond the spec: it is what the
 * public v1 client polls.
 */
import { platformUrl, segment, type ApiContext, type CallContext } from './context.js';
import { validateBody } from './validate.js';
import { registerSecret } from '../util/redact.js';
import {
  DopRequest,
  JobSet,
  SoulRequest,
  SpeakRequest,
  type DopParams,
  type LegacyWebhook,
  type SoulParams,
  type SpeakParams,
} from './wire.js';

export const DOP_PATH = '/v1/image2video/dop';
export const SOUL_PATH = '/v1/text2image/soul';
export const speakPath = (vendor: string): string => `/v1/speak/${segment(vendor)}`;
export const jobSetPath = (id: string): string => `/v1/job-sets/${segment(id)}`;

export class LegacyApi {
  constructor(private readonly ctx: ApiContext) {}

  async #submit(path: string, body: unknown, options: CallContext): Promise<JobSet> {
    const result = await this.ctx.transport.call({
      method: 'POST',
      url: platformUrl(this.ctx, path),
      auth: 'legacy',
      json: body,
      schema: JobSet,
      safety: { kind: 'spends' },
      signal: options.signal,
    });
    return result.data;
  }

  // Async so that an invalid body rejects the returned promise rather than throwing synchronously.
  // A webhook secret is registered for redaction like the key secret (it must not reach logs).

  /** `POST {platform_url}/v1/image2video/dop`. */
  async dop(params: DopParams, webhook: LegacyWebhook | null = null, options: CallContext = {}): Promise<JobSet> {
    if (webhook) registerSecret(webhook.secret);
    return this.#submit(DOP_PATH, validateBody(DopRequest, { webhook, params }, 'DoP request'), options);
  }

  /** `POST {platform_url}/v1/text2image/soul`. */
  async soul(params: SoulParams, webhook: LegacyWebhook | null = null, options: CallContext = {}): Promise<JobSet> {
    if (webhook) registerSecret(webhook.secret);
    return this.#submit(SOUL_PATH, validateBody(SoulRequest, { webhook, params }, 'Soul request'), options);
  }

  /** `POST {platform_url}/v1/speak/{vendor}`: `params` only, no webhook. */
  async speak(params: SpeakParams, options: CallContext = {}): Promise<JobSet> {
    return this.#submit(speakPath(this.ctx.config.vendor), validateBody(SpeakRequest, { params }, 'Speak request'), options);
  }

  /** `GET {platform_url}/v1/job-sets/{id}` (beyond the spec; see the README). */
  async jobSet(id: string, options: CallContext = {}): Promise<JobSet> {
    const result = await this.ctx.transport.call({
      method: 'GET',
      url: platformUrl(this.ctx, jobSetPath(id)),
      auth: 'legacy',
      schema: JobSet,
      safety: { kind: 'safe' },
      signal: options.signal,
    });
    return result.data;
  }
}
