/**
 * Idempotency-Key semantics of the character-sheet model (§4.2), per account and path:
 * - same key, same body: the same request again, no new charge;
 * - same key, another body: 422;
 * - same key while the first submission is still being processed: 409;
 * - keys are forgotten after the retention window (default 24 hours).
 */
import { HttpError } from './http-util.js';
import type { StateEvent, StateJournal } from './state-journal.js';

export interface IdempotencyRecord {
  scope: string;
  key: string;
  bodyHash: string;
  createdAt: number;
  requestId: string | undefined;
}

export type Begin = { kind: 'new'; record: IdempotencyRecord } | { kind: 'replay'; requestId: string };

export class IdempotencyStore {
  readonly #records = new Map<string, IdempotencyRecord>();
  readonly retentionMs: number;
  readonly #now: () => number;
  /** `--state`: finished records are written there too. */
  journal: StateJournal | undefined;

  constructor(retentionMs: number, now: () => number = Date.now) {
    this.retentionMs = retentionMs;
    this.#now = now;
  }

  begin(scope: string, key: string, bodyHash: string): Begin {
    const id = `${scope}\u0000${key}`;
    const now = this.#now();
    const existing = this.#records.get(id);
    if (existing && now - existing.createdAt <= this.retentionMs) {
      if (existing.bodyHash !== bodyHash) {
        throw new HttpError(422, 'Idempotency-Key was already used with a different request body; use a new key for a new request');
      }
      if (existing.requestId === undefined) {
        throw new HttpError(409, 'a request with this Idempotency-Key is still being processed; retry later with the same key');
      }
      return { kind: 'replay', requestId: existing.requestId };
    }
    const record: IdempotencyRecord = { scope, key, bodyHash, createdAt: now, requestId: undefined };
    this.#records.set(id, record);
    if (this.#records.size % 1024 === 0) this.#prune(now);
    return { kind: 'new', record };
  }

  finish(record: IdempotencyRecord, requestId: string): void {
    record.requestId = requestId;
    this.journal?.write({
      t: 'idempotency',
      scope: record.scope,
      key: record.key,
      body_hash: record.bodyHash,
      created_at: record.createdAt,
      request_id: requestId,
    });
  }

  /** Replays a finished record from the state file (`--state`). */
  restore(event: StateEvent): void {
    const record: IdempotencyRecord = {
      scope: String(event.scope),
      key: String(event.key),
      bodyHash: String(event.body_hash),
      createdAt: Number(event.created_at),
      requestId: String(event.request_id),
    };
    this.#records.set(`${record.scope}\u0000${record.key}`, record);
  }

  /** The submission failed before a request existed: forget the key so a retry can proceed. */
  abandon(record: IdempotencyRecord): void {
    const id = `${record.scope}\u0000${record.key}`;
    if (this.#records.get(id) === record) this.#records.delete(id);
  }

  #prune(now: number): void {
    for (const [id, r] of this.#records) if (r.requestId !== undefined && now - r.createdAt > this.retentionMs) this.#records.delete(id);
  }
}
