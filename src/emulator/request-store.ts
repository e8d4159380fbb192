/**
 * Generation requests and their lifecycle (§3.1, §4.1): queued → in_progress → completed, failed or
 * nsfw, or canceled while queued. Status is computed from timestamps when it is read (cheap and
 * exact); a timer settles each request at its end time so that refunds and webhooks happen even if
 * nobody polls. Failed, nsfw and canceled requests are refunded in full; a completed one is
 * reconciled down to its actual cost (marketing image estimates, §8 rule 2).
 */
import type { RequestStatusValue } from '../api/wire.js';
import { newUuid } from './ids.js';
import type { Ledger } from './ledger.js';
import { MODELS, type ModelId } from './models.js';
import type { Rng } from './prng.js';
import type { Scheduler } from './scheduler.js';
import type { StateEvent, StateJournal } from './state-journal.js';

export type Outcome = 'completed' | 'failed' | 'nsfw';

/** How the emulator draws its output files; the pixels depend on `seedText`. */
export interface ArtSpec {
  width: number;
  height: number;
  seedText: string;
  /** Character-sheet layout (portrait + full body) or a plain render. */
  layout: 'sheet' | 'render';
  tier?: string;
  variationIndex?: number;
  /**
   * The long side of the true output, pixels (a sheet's 2K, a marketing image's resolution). With
   * true sizes on (`trueSizes`), `width` and `height` are scaled up to it when the request is made.
   */
  longSide?: number;
}

export interface WebhookTarget {
  url: string;
  /** Sent as `X-Webhook-Secret-Key` (legacy webhook object, or `--webhook-secret`). */
  secret?: string | undefined;
}

export interface EmuRequest {
  id: string;
  keyId: string;
  model: ModelId;
  /** The path the request was submitted to, e.g. `/vendor/ai-influencer`. */
  modelPath: string;
  idempotencyKey: string | undefined;
  bodyHash: string;
  createdAt: number;
  startAt: number;
  endAt: number;
  outcome: Outcome;
  canceled: boolean;
  settled: boolean;
  /** Charged at submit (the estimate, for token-priced models), micro-dollars. */
  chargedMicros: number;
  /** What the request really costs when it completes, micro-dollars. */
  actualMicros: number;
  error: string | undefined;
  art: ArtSpec;
  webhook: WebhookTarget | undefined;
  /** Legacy job set this request is a job of. */
  jobSetId: string | undefined;
  /** Extra facts for inspection (resolved parameters, token counts). */
  details: Record<string, unknown>;
}

export interface CreateRequest {
  keyId: string;
  model: ModelId;
  modelPath: string;
  idempotencyKey?: string | undefined;
  bodyHash: string;
  chargedMicros: number;
  actualMicros?: number;
  art: ArtSpec;
  webhook?: WebhookTarget | undefined;
  jobSetId?: string | undefined;
  /** Text searched for the `[emulator:fail]` / `[emulator:nsfw]` markers. */
  text?: string | undefined;
  details?: Record<string, unknown>;
}

export interface OutcomeRates {
  failureRate: number;
  nsfwRate: number;
}

export interface RequestStoreOptions {
  scheduler: Scheduler;
  rng: Rng;
  ledger: Ledger;
  rates: OutcomeRates;
  modelRates: Partial<Record<ModelId, Partial<OutcomeRates>>>;
  durations: Partial<Record<ModelId, { queuedMs?: readonly [number, number]; runMs?: readonly [number, number] }>>;
  platformUrl: () => string;
  cdnUrl: () => string;
  now?: () => number;
  /** Serve outputs at their true dimensions (`ArtSpec.longSide`). Default false: small drawings. */
  trueSizes?: boolean;
}

/** The art at its true dimensions: the same aspect ratio, the long side `longSide`. */
export function trueSize(art: ArtSpec): ArtSpec {
  const long = art.longSide;
  if (long === undefined) return art;
  const f = long / Math.max(art.width, art.height);
  return { ...art, width: Math.max(1, Math.round(art.width * f)), height: Math.max(1, Math.round(art.height * f)) };
}

export const FAIL_MARKER = '[emulator:fail]';
export const NSFW_MARKER = '[emulator:nsfw]';

export class RequestStore {
  readonly byId = new Map<string, EmuRequest>();
  readonly #o: RequestStoreOptions;
  readonly #settledListeners: ((r: EmuRequest) => void)[] = [];
  readonly now: () => number;
  active = 0;
  peakActive = 0;
  /** `--state`: requests, settlements and cancellations are written there too. */
  journal: StateJournal | undefined;

  constructor(options: RequestStoreOptions) {
    this.#o = options;
    this.now = options.now ?? Date.now;
  }

  onSettled(fn: (r: EmuRequest) => void): void {
    this.#settledListeners.push(fn);
  }

  /** Runs `fn` so that every state event it causes is written as one line (`--state`). */
  transaction<T>(fn: () => T): T {
    return this.journal ? this.journal.transaction(fn) : fn();
  }

  /** Replays one event of the state file (`--state`); `resumeTimers` then restarts the clocks. */
  restore(event: StateEvent): void {
    if (event.t === 'request') {
      const r = { ...(event.request as EmuRequest), settled: false, canceled: false };
      this.byId.set(r.id, r);
      return;
    }
    const r = this.byId.get(String(event.id));
    if (!r) return;
    if (event.t === 'cancel') r.canceled = true;
    if (event.t === 'settle' || event.t === 'cancel') r.settled = true;
  }

  /** After a restore: every request not yet final counts as active again and settles at its end time. */
  resumeTimers(): void {
    const now = this.now();
    for (const r of this.byId.values()) {
      if (r.settled) continue;
      this.active++;
      this.#o.scheduler.after(Math.max(0, r.endAt - now), () => this.settle(r));
    }
    this.peakActive = this.active;
  }

  create(input: CreateRequest): EmuRequest {
    const o = this.#o;
    const info = MODELS[input.model];
    const d = o.durations[input.model] ?? {};
    const queued = d.queuedMs ?? info.queuedMs;
    const run = d.runMs ?? info.runMs;
    const now = this.now();
    const startAt = now + o.scheduler.scale(o.rng.between(queued[0], queued[1]));
    const endAt = startAt + o.scheduler.scale(o.rng.between(run[0], run[1]));
    const r: EmuRequest = {
      id: newUuid(),
      keyId: input.keyId,
      model: input.model,
      modelPath: input.modelPath,
      idempotencyKey: input.idempotencyKey,
      bodyHash: input.bodyHash,
      createdAt: now,
      startAt,
      endAt,
      outcome: this.#drawOutcome(input.model, input.text),
      canceled: false,
      settled: false,
      chargedMicros: input.chargedMicros,
      actualMicros: input.actualMicros ?? input.chargedMicros,
      error: undefined,
      art: o.trueSizes === true ? trueSize(input.art) : input.art,
      webhook: input.webhook,
      jobSetId: input.jobSetId,
      details: input.details ?? {},
    };
    if (r.outcome === 'failed') r.error = `generation failed: the ${input.model} model could not render this request (emulated failure)`;
    this.byId.set(r.id, r);
    this.active++;
    if (this.active > this.peakActive) this.peakActive = this.active;
    this.transaction(() => {
      this.journal?.write({ t: 'request', request: { ...r } });
      o.ledger.record(r.keyId, 'charge', r.chargedMicros, { requestId: r.id }, `${input.model} submitted`);
    });
    o.scheduler.after(Math.max(0, endAt - now), () => this.settle(r));
    return r;
  }

  #drawOutcome(model: ModelId, text: string | undefined): Outcome {
    if (text?.includes(FAIL_MARKER)) return 'failed';
    if (text?.includes(NSFW_MARKER)) return 'nsfw';
    const rates = { ...this.#o.rates, ...this.#o.modelRates[model] };
    const x = this.#o.rng.next();
    if (x < rates.failureRate) return 'failed';
    if (x < rates.failureRate + rates.nsfwRate) return 'nsfw';
    return 'completed';
  }

  get(id: string): EmuRequest | undefined {
    return this.byId.get(id);
  }

  /** The latest request of `r`'s account other than `r`, of the same model when one exists (the `foreign_status` fault). */
  latestOtherOf(r: EmuRequest): EmuRequest | undefined {
    const sameModel = (x: EmuRequest): number => (x.model === r.model ? 1 : 0);
    let best: EmuRequest | undefined;
    for (const x of this.byId.values()) {
      if (x.id === r.id || x.keyId !== r.keyId) continue;
      if (!best || sameModel(x) > sameModel(best) || (sameModel(x) === sameModel(best) && x.createdAt >= best.createdAt)) best = x;
    }
    return best;
  }

  statusOf(r: EmuRequest, now: number = this.now()): RequestStatusValue {
    if (r.canceled) return 'canceled';
    if (now >= r.endAt) {
      if (!r.settled) this.settle(r);
      return r.outcome;
    }
    return now >= r.startAt ? 'in_progress' : 'queued';
  }

  /** Cancels a queued request (POST cancel answers 202), refunding it; false once it has started. */
  cancel(r: EmuRequest): boolean {
    if (r.canceled) return true;
    if (r.settled || this.now() >= r.startAt) return false;
    r.canceled = true;
    r.settled = true;
    this.active--;
    this.transaction(() => {
      this.journal?.write({ t: 'cancel', id: r.id });
      this.#o.ledger.record(r.keyId, 'refund', r.chargedMicros, { requestId: r.id }, `${r.model} canceled while queued`);
    });
    return true;
  }

  /** Final bookkeeping, once: refunds and reconciliation, then the settled listeners (webhooks). */
  settle(r: EmuRequest): void {
    if (r.settled) return;
    r.settled = true;
    this.active--;
    const ledger = this.#o.ledger;
    this.transaction(() => {
      this.journal?.write({ t: 'settle', id: r.id });
      if (r.outcome === 'completed') {
        const diff = r.chargedMicros - r.actualMicros;
        if (diff > 0) ledger.record(r.keyId, 'refund', diff, { requestId: r.id }, `${r.model} reconciled to actual usage`);
        else if (diff < 0) ledger.record(r.keyId, 'charge', -diff, { requestId: r.id }, `${r.model} reconciled to actual usage`);
      } else {
        ledger.record(r.keyId, 'refund', r.chargedMicros, { requestId: r.id }, `${r.model} ${r.outcome}: refunded`);
      }
    });
    for (const fn of this.#settledListeners) fn(r);
  }

  statusUrl(r: EmuRequest): string {
    return `${this.#o.platformUrl()}/requests/${r.id}/status`;
  }

  cancelUrl(r: EmuRequest): string {
    return `${this.#o.platformUrl()}/requests/${r.id}/cancel`;
  }

  outputUrl(r: EmuRequest, file: string): string {
    return `${this.#o.cdnUrl()}/cdn/outputs/${r.id}/${file}`;
  }

  /** Output members of a completed request (§2.1). */
  outputs(r: EmuRequest): { images?: { url: string }[]; video?: { url: string }; audio?: { url: string } } {
    const kind = MODELS[r.model].output;
    if (kind === 'image') return { images: [{ url: this.outputUrl(r, r.art.layout === 'sheet' ? 'sheet.png' : 'image-0.png') }] };
    if (kind === 'video') return { video: { url: this.outputUrl(r, 'video.mp4') } };
    return { video: { url: this.outputUrl(r, 'video.mp4') }, audio: { url: this.outputUrl(r, 'audio.wav') } };
  }

  /** The RequestStatus body (§2.1). */
  statusBody(r: EmuRequest): Record<string, unknown> {
    const status = this.statusOf(r);
    const body: Record<string, unknown> = { status, request_id: r.id, status_url: this.statusUrl(r), cancel_url: this.cancelUrl(r) };
    if (status === 'failed') body.error = r.error ?? 'generation failed';
    if (status === 'completed') Object.assign(body, this.outputs(r));
    return body;
  }

  /** The `/_emulator/requests` rows. */
  inspect(filter?: { keyId?: string | undefined }): unknown[] {
    const out: unknown[] = [];
    for (const r of this.byId.values()) {
      if (filter?.keyId !== undefined && r.keyId !== filter.keyId) continue;
      out.push({
        request_id: r.id,
        key_id: r.keyId,
        model: r.model,
        model_path: r.modelPath,
        idempotency_key: r.idempotencyKey ?? null,
        body_hash: r.bodyHash,
        status: this.statusOf(r),
        created_at: new Date(r.createdAt).toISOString(),
        job_set_id: r.jobSetId ?? null,
        charged_usd: r.chargedMicros / 1e6,
        actual_usd: r.actualMicros / 1e6,
        webhook_url: r.webhook?.url ?? null,
        details: r.details,
      });
    }
    return out;
  }
}
