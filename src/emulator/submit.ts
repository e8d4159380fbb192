/** Pieces every generation submit shares: body hash, balance check, hf_webhook, the submit answer. */
import { createHash } from 'node:crypto';
import { canonicalJson, HttpError, json, type EmuResponse } from './http-util.js';
import type { AccountState } from './ledger.js';
import { isLoopbackUrl } from './loopback.js';
import type { EmuRequest, RequestStore, WebhookTarget } from './request-store.js';

/** sha256 of the canonical JSON (sorted keys): two bodies equal as JSON compare equal (Idempotency-Key). */
export const bodyHash = (value: unknown): string => createHash('sha256').update(canonicalJson(value)).digest('hex');
/** sha256 of the bytes as sent: what the client's IndeterminateSubmissionError.bodyHash holds, for reconciliation. */
export const rawBodyHash = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex');

/** Generation is refused with 402 when the balance cannot cover its charge (beyond §7, which lists 402 for agent messages only). */
export function ensureBalance(account: AccountState, micros: number): void {
  if (account.balanceMicros < micros) {
    throw new HttpError(
      402,
      `insufficient credit balance: this request costs ${micros / 1e6} US$ and the balance is ${Math.max(0, account.balanceMicros) / 1e6} US$`,
    );
  }
}

export interface WebhookPolicy {
  /** When false (the default), webhook URLs must be loopback addresses. */
  allowExternal: boolean;
  /** `--webhook-secret`: sent as X-Webhook-Secret-Key on hf_webhook deliveries. */
  secret: string | undefined;
}

/** Checks a webhook URL: http(s), and loopback unless external delivery is allowed. */
export function checkWebhookUrl(value: string, field: string, policy: WebhookPolicy): URL {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new HttpError(422, `${field}: not a valid URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new HttpError(422, `${field}: must be an http or https URL`);
  if (!policy.allowExternal && !isLoopbackUrl(url))
    throw new HttpError(422, `${field}: the emulator delivers webhooks only to loopback addresses`);
  return url;
}

/** `?hf_webhook=<url>` (§4.8, §6), accepted on every model path. */
export function webhookFromQuery(url: URL, policy: WebhookPolicy): WebhookTarget | undefined {
  const value = url.searchParams.get('hf_webhook');
  if (value === null) return undefined;
  return { url: checkWebhookUrl(value, 'hf_webhook', policy).toString(), secret: policy.secret };
}

/**
 * The submit answer (§4.2): request_id, status, status_url, cancel_url. A new request is reported
 * `queued` even at time scale 0 (as a real service answers before its queue runs); a replayed
 * Idempotency-Key reports the request's current status.
 */
export function submitAnswer(requests: RequestStore, r: EmuRequest, replay = false): EmuResponse {
  const status = replay ? requests.statusOf(r) : r.canceled ? 'canceled' : 'queued';
  return json(200, { request_id: r.id, status, status_url: requests.statusUrl(r), cancel_url: requests.cancelUrl(r) });
}

/** Lets tests hold submissions mid-processing (to see the 409 of a key still being processed). */
export class SubmitGate {
  #held: Promise<void> | undefined;

  hold(): () => void {
    let release = (): void => {};
    this.#held = new Promise<void>((resolve) => {
      release = () => {
        this.#held = undefined;
        resolve();
      };
    });
    return release;
  }

  async pass(): Promise<void> {
    if (this.#held) await this.#held;
  }
}
