/**
 * §2.7 and §4.7: legacy DoP, Soul and Speak endpoints, authenticated with hf-api-key and hf-secret.
 * Each returns a job set; every job is a generation request underneath, so it progresses, is billed
 * and refunded, and triggers webhooks like any other. `GET /v1/job-sets/{id}` goes beyond the spec.
 * Speak has no job-set type in the spec's enum; a talking-avatar render is image-to-video, so its
 * job sets have type image2video and jobs of job_set_type speak.
 */
import { DopRequest, SoulRequest, SpeakRequest, type LegacyWebhook } from '../api/wire.js';
import { authLegacy, requireModel } from './auth.js';
import { HttpError, isoMs, json, parseJson, validate, type EmuResponse } from './http-util.js';
import { newUuid } from './ids.js';
import { usdToMicros, type Ledger } from './ledger.js';
import { sizeFor } from './marketing-image.js';
import { MODELS, type ModelId } from './models.js';
import type { EmuRequest, RequestStore, WebhookTarget } from './request-store.js';
import type { RouteInput } from './router.js';
import type { StateEvent } from './state-journal.js';
import { rawBodyHash, checkWebhookUrl, ensureBalance, type SubmitGate, type WebhookPolicy } from './submit.js';

export interface JobSetRecord {
  id: string;
  keyId: string;
  type: 'text2image_soul' | 'image2video';
  jobSetType: string;
  createdAt: number;
  jobIds: string[];
  inputParams: Record<string, unknown>;
}

export interface LegacyDeps {
  ledger: Ledger;
  requests: RequestStore;
  gate: SubmitGate;
  webhooks: WebhookPolicy;
}

/** Soul batch sizes the emulator accepts (the spec shows no bounds). */
export const SOUL_BATCH_MAX = 4;

export class LegacyPlatform {
  readonly jobSets = new Map<string, JobSetRecord>();

  constructor(private readonly d: LegacyDeps) {}

  /** `POST {platform_url}/v1/image2video/dop`. */
  dop(input: RouteInput): Promise<EmuResponse> {
    authLegacy(this.d.ledger, input.headers);
    const body = validate(DopRequest, parseJson(input.body));
    return this.#create(input, body, 'dop', 'image2video', 'image2video', 1, body.webhook ?? null, body.params.prompt ?? '', '16:9');
  }

  /** `POST {platform_url}/v1/text2image/soul`. */
  soul(input: RouteInput): Promise<EmuResponse> {
    authLegacy(this.d.ledger, input.headers);
    const body = validate(SoulRequest, parseJson(input.body));
    const batch = body.params.batch_size ?? 1;
    if (batch < 1 || batch > SOUL_BATCH_MAX) throw new HttpError(422, `params.batch_size: must be from 1 to ${SOUL_BATCH_MAX}`);
    const wh = /^(\d+)x(\d+)$/.exec(body.params.width_and_height ?? '');
    const aspect = wh ? `${wh[1]}:${wh[2]}` : '1:1';
    return this.#create(
      input,
      body,
      'soul',
      'text2image_soul',
      'text2image_soul',
      batch,
      body.webhook ?? null,
      body.params.prompt ?? '',
      aspect,
    );
  }

  /** `POST {platform_url}/v1/speak/{vendor}`: `params` only. */
  speak(input: RouteInput): Promise<EmuResponse> {
    authLegacy(this.d.ledger, input.headers);
    const body = validate(SpeakRequest, parseJson(input.body));
    return this.#create(input, body, 'speak', 'image2video', 'speak', 1, null, body.params.prompt ?? '', '1:1');
  }

  async #create(
    input: RouteInput,
    body: { params: Record<string, unknown> },
    model: ModelId,
    type: JobSetRecord['type'],
    jobSetType: string,
    jobs: number,
    hook: LegacyWebhook | null,
    prompt: string,
    aspect: string,
  ): Promise<EmuResponse> {
    const d = this.d;
    const account = authLegacy(d.ledger, input.headers);
    requireModel(account, model);
    let webhook: WebhookTarget | undefined;
    if (hook) webhook = { url: checkWebhookUrl(hook.url, 'webhook.url', d.webhooks).toString(), secret: hook.secret };
    const price = usdToMicros(MODELS[model].priceUsd);
    await d.gate.pass();
    ensureBalance(account, price * jobs);
    const set: JobSetRecord = {
      id: newUuid(),
      keyId: account.keyId,
      type,
      jobSetType,
      createdAt: d.requests.now(),
      jobIds: [],
      inputParams: body.params,
    };
    const hash = rawBodyHash(input.body);
    // Soul's width_and_height is its true size; the others render stills only inside videos.
    const wh = /^(\d+)x(\d+)$/.exec(String(body.params.width_and_height ?? ''));
    const longSide = wh ? Math.min(8192, Math.max(Number(wh[1]), Number(wh[2]))) : 1024;
    // One line of the state file (`--state`): the job set with every job and its charge.
    d.requests.transaction(() => {
      for (let i = 0; i < jobs; i++) {
        const r = d.requests.create({
          keyId: account.keyId,
          model,
          modelPath: input.url.pathname,
          bodyHash: hash,
          chargedMicros: price,
          art: { ...sizeFor(aspect), longSide, layout: 'render', seedText: `${model}|${prompt}|${String(body.params.seed ?? '')}|${i}` },
          webhook,
          jobSetId: set.id,
          text: prompt,
          details: { job_index: i },
        });
        set.jobIds.push(r.id);
      }
      this.jobSets.set(set.id, set);
      d.requests.journal?.write({ t: 'job_set', set });
    });
    return json(200, this.view(set, true));
  }

  /** Replays a job set from the state file (`--state`). */
  restore(event: StateEvent): void {
    const set = event.set as JobSetRecord;
    this.jobSets.set(set.id, set);
  }

  /** `GET {platform_url}/v1/job-sets/{id}`. */
  get(input: RouteInput): EmuResponse {
    const account = authLegacy(this.d.ledger, input.headers);
    const set = this.jobSets.get(input.params.id ?? '');
    if (!set || set.keyId !== account.keyId) throw new HttpError(404, 'job set not found');
    return json(200, this.view(set));
  }

  /**
   * The `foreign_status` fault on `GET /v1/job-sets/{id}`: another job set of the account (the
   * latest, of the same type when there is one), or, when it has no other, this one under an id
   * that is not its.
   */
  foreignGet(input: RouteInput): EmuResponse {
    const account = authLegacy(this.d.ledger, input.headers);
    const set = this.jobSets.get(input.params.id ?? '');
    if (!set || set.keyId !== account.keyId) throw new HttpError(404, 'job set not found');
    const sameType = (s: JobSetRecord): number => (s.type === set.type ? 1 : 0);
    let other: JobSetRecord | undefined;
    for (const s of this.jobSets.values()) {
      if (s.id === set.id || s.keyId !== set.keyId) continue;
      if (!other || sameType(s) > sameType(other) || (sameType(s) === sameType(other) && s.createdAt >= other.createdAt)) other = s;
    }
    return json(200, other ? this.view(other) : { ...this.view(set), id: newUuid() });
  }

  /** The job set (§2.7). At creation every job is reported `queued`, even at time scale 0. */
  view(set: JobSetRecord, fresh = false): Record<string, unknown> {
    const jobs = set.jobIds.map((id) => {
      const r = this.d.requests.get(id) as EmuRequest;
      const status = fresh ? 'queued' : this.d.requests.statusOf(r);
      const job: Record<string, unknown> = {
        id,
        job_set_type: set.jobSetType,
        status,
        // §2.7: a job has results with min and raw; their URLs answer 404 until the job completes.
        results: this.#results(r),
      };
      if (status === 'failed') job.error = r.error ?? 'generation failed';
      return job;
    });
    return { id: set.id, type: set.type, created_at: isoMs(set.createdAt), jobs, input_params: set.inputParams };
  }

  #results(r: EmuRequest): { min: { type: string; url: string }; raw: { type: string; url: string } } {
    const u = (file: string): string => this.d.requests.outputUrl(r, file);
    if (r.model === 'soul') return { min: { type: 'image', url: u('min.png') }, raw: { type: 'image', url: u('raw.png') } };
    if (r.model === 'speak') return { min: { type: 'audio', url: u('audio.wav') }, raw: { type: 'video', url: u('raw.mp4') } };
    return { min: { type: 'video', url: u('min.mp4') }, raw: { type: 'video', url: u('raw.mp4') } };
  }
}
