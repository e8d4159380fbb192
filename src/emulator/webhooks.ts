/**
 * §6 webhooks: when a request with a webhook reaches completed, failed or nsfw, its payload (exactly
 * the fields of the §6 table) is POSTed to the target. Delivery is retried with exponential backoff
 * until a 2xx, for up to 2 hours after the first attempt (both scaled by the time scale); each
 * attempt times out after 10 s. Faults can make the first delivery late or deliver it twice.
 */
import { request as httpRequest, type ClientRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { FaultEngine } from './faults.js';
import { MODELS } from './models.js';
import type { EmuRequest, RequestStore } from './request-store.js';
import type { Scheduler } from './scheduler.js';

export interface WebhookTimings {
  /** Per-attempt timeout, wall-clock ms (§6 rule 5: 10 s). Not scaled. */
  timeoutMs: number;
  /** Retry window after the first attempt, service ms (§6 rule 2: 2 hours). Scaled. */
  windowMs: number;
  /** First retry delay and largest delay, service ms. Scaled. */
  backoffBaseMs: number;
  backoffCapMs: number;
}

export const DEFAULT_WEBHOOK_TIMINGS: WebhookTimings = {
  timeoutMs: 10_000,
  windowMs: 2 * 60 * 60 * 1000,
  backoffBaseMs: 1_000,
  backoffCapMs: 5 * 60 * 1000,
};

export interface DeliveryAttempt {
  at: string;
  /** Service time since the first attempt, ms (unscaled). */
  offset_ms: number;
  status?: number;
  error?: string;
}

export interface Delivery {
  delivery_id: number;
  request_id: string;
  url: string;
  payload: Record<string, unknown>;
  duplicate: boolean;
  late_ms: number;
  state: 'pending' | 'delivered' | 'gave_up';
  attempts: DeliveryAttempt[];
}

/** The §6 payload for a settled request. */
export function webhookPayload(requests: RequestStore, r: EmuRequest): Record<string, unknown> {
  if (r.outcome === 'failed') return { status: 'failed', request_id: r.id, error: r.error ?? 'generation failed' };
  if (r.outcome === 'nsfw') return { status: 'nsfw', request_id: r.id };
  const base = { status: 'completed', request_id: r.id, status_url: requests.statusUrl(r), cancel_url: requests.cancelUrl(r) };
  const outputs = requests.outputs(r);
  if (MODELS[r.model].output === 'image') return { ...base, images: outputs.images ?? [] };
  return { ...base, video: outputs.video };
}

export class WebhookDispatcher {
  readonly deliveries: Delivery[] = [];
  readonly #inFlight = new Set<ClientRequest>();
  #pending = 0;
  #idleWaiters: (() => void)[] = [];

  constructor(
    private readonly scheduler: Scheduler,
    private readonly faults: FaultEngine,
    private readonly requests: RequestStore,
    private readonly timings: WebhookTimings,
  ) {
    scheduler.onClose(() => {
      for (const req of this.#inFlight) req.destroy();
      this.#inFlight.clear();
      this.#pending = 0;
      this.#notifyIdle();
    });
  }

  get pending(): number {
    return this.#pending;
  }

  /** Called when a request settles; canceled requests never get here (§3.1). */
  enqueue(r: EmuRequest): void {
    if (!r.webhook || r.canceled) return;
    const payload = webhookPayload(this.requests, r);
    const { lateMs, duplicate } = this.faults.webhook();
    this.#start(r, payload, false, this.scheduler.scale(lateMs), duplicate);
  }

  #start(r: EmuRequest, payload: Record<string, unknown>, duplicate: boolean, delayMs: number, thenDuplicate: boolean): void {
    if (!r.webhook) return;
    const d: Delivery = {
      delivery_id: this.deliveries.length + 1,
      request_id: r.id,
      url: r.webhook.url,
      payload,
      duplicate,
      late_ms: delayMs,
      state: 'pending',
      attempts: [],
    };
    this.deliveries.push(d);
    this.#pending++;
    const secret = r.webhook.secret;
    // The window is measured on the service-time schedule (offsets of the attempts after the first),
    // so the number of attempts does not depend on event-loop lag or on the time scale.
    const attempt = (n: number, offsetMs: number): void => {
      const now = Date.now();
      this.#post(d.url, payload, secret, (outcome) => {
        d.attempts.push({ at: new Date(now).toISOString(), offset_ms: offsetMs, ...outcome });
        if (outcome.status !== undefined && outcome.status >= 200 && outcome.status < 300) {
          this.#finish(d, 'delivered');
          // A duplicate delivery (§6 rule 4) follows the first success.
          if (thenDuplicate) this.#start(r, payload, true, this.scheduler.scale(1_000), false);
          return;
        }
        const delay = Math.min(this.timings.backoffCapMs, this.timings.backoffBaseMs * 2 ** n);
        if (offsetMs + delay > this.timings.windowMs || this.scheduler.closed) {
          this.#finish(d, 'gave_up');
          return;
        }
        this.scheduler.after(this.scheduler.scale(delay), () => attempt(n + 1, offsetMs + delay));
      });
    };
    this.scheduler.after(delayMs, () => attempt(0, 0));
  }

  #finish(d: Delivery, state: 'delivered' | 'gave_up'): void {
    if (d.state !== 'pending') return;
    d.state = state;
    this.#pending--;
    if (this.#pending === 0) this.#notifyIdle();
  }

  #notifyIdle(): void {
    const waiters = this.#idleWaiters;
    this.#idleWaiters = [];
    for (const w of waiters) w();
  }

  /** Resolves when no delivery is pending (tests). */
  whenIdle(): Promise<void> {
    if (this.#pending === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  #post(
    target: string,
    payload: Record<string, unknown>,
    secret: string | undefined,
    done: (o: { status?: number; error?: string }) => void,
  ): void {
    const url = new URL(target);
    const body = Buffer.from(JSON.stringify(payload));
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'content-length': String(body.length),
      'user-agent': 'genpipe-emulator/0.1',
    };
    if (secret !== undefined) headers['x-webhook-secret-key'] = secret;
    let finished = false;
    const finish = (o: { status?: number; error?: string }): void => {
      if (finished) return;
      finished = true;
      this.#inFlight.delete(req);
      if (!this.scheduler.closed) done(o);
    };
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = send(url, { method: 'POST', headers, agent: false, timeout: this.timings.timeoutMs }, (res) => {
      res.resume();
      res.on('end', () => finish({ status: res.statusCode ?? 0 }));
      res.on('error', (e) => finish({ error: e.message }));
    });
    this.#inFlight.add(req);
    req.on('timeout', () => {
      req.destroy();
      finish({ error: `timeout after ${this.timings.timeoutMs} ms` });
    });
    req.on('error', (e) => finish({ error: (e as NodeJS.ErrnoException).code ?? e.message }));
    req.end(body);
  }
}

/** Service-time offsets (ms after the first) of every attempt of a delivery that never succeeds. */
export function attemptOffsets(t: Pick<WebhookTimings, 'windowMs' | 'backoffBaseMs' | 'backoffCapMs'>): number[] {
  const out = [0];
  for (let n = 0, offset = 0; out.length < 10_000; n++) {
    const delay = Math.min(t.backoffCapMs, t.backoffBaseMs * 2 ** n);
    if (offset + delay > t.windowMs) break;
    offset += delay;
    out.push(offset);
  }
  return out;
}
