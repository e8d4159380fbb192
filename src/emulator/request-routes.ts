/** §4.1: `GET /requests/{id}/status` and `POST /requests/{id}/cancel` (202 while queued, 400 after). */
import { authKey } from './auth.js';
import { HttpError, json, type EmuResponse } from './http-util.js';
import { newUuid } from './ids.js';
import type { Ledger } from './ledger.js';
import type { EmuRequest, RequestStore } from './request-store.js';
import type { RouteInput } from './router.js';

export class RequestRoutes {
  constructor(
    private readonly ledger: Ledger,
    private readonly requests: RequestStore,
  ) {}

  #owned(input: RouteInput): EmuRequest {
    const account = authKey(this.ledger, input.headers);
    const r = this.requests.get(input.params.id ?? '');
    // Another account's request is indistinguishable from a missing one (§5).
    if (!r || r.keyId !== account.keyId) throw new HttpError(404, 'request not found');
    return r;
  }

  status(input: RouteInput): EmuResponse {
    return json(200, this.requests.statusBody(this.#owned(input)));
  }

  /**
   * The `foreign_status` fault: the status of another request of the account (the latest, of the
   * same model when there is one), or, when it has no other, this one's under an id that is not its.
   */
  foreignStatus(input: RouteInput): EmuResponse {
    const r = this.#owned(input);
    const other = this.requests.latestOtherOf(r);
    if (other) return json(200, this.requests.statusBody(other));
    const id = newUuid();
    return json(200, JSON.parse(JSON.stringify(this.requests.statusBody(r)).split(r.id).join(id)) as Record<string, unknown>);
  }

  cancel(input: RouteInput): EmuResponse {
    const r = this.#owned(input);
    if (!this.requests.cancel(r)) throw new HttpError(400, `request ${r.id} is ${this.requests.statusOf(r)} and can no longer be canceled`);
    return json(202, { request_id: r.id, status: 'canceled' });
  }
}
