/**
 * Authentication (§5): `Authorization: Key {key_id}:{key_secret}` on the main, agent and webhook
 * paths; `hf-api-key` (a uuid) plus `hf-secret` on the legacy endpoints. Missing or wrong
 * credentials are 401; the agent API needs the account's agent switch (403).
 */
import type { IncomingHttpHeaders } from 'node:http';
import { HttpError } from './http-util.js';
import type { AccountState, Ledger } from './ledger.js';
import type { ModelId } from './models.js';

const header = (headers: IncomingHttpHeaders, name: string): string | undefined => {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
};

export function authKey(ledger: Ledger, headers: IncomingHttpHeaders): AccountState {
  const value = header(headers, 'authorization');
  if (!value) throw new HttpError(401, 'missing credentials: send Authorization: Key {key_id}:{key_secret}');
  const match = /^Key\s+([^:\s]+):(.+)$/.exec(value.trim());
  if (!match) throw new HttpError(401, 'invalid credentials: the Authorization header must be Key {key_id}:{key_secret}');
  return check(ledger, match[1] ?? '', match[2] ?? '');
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function authLegacy(ledger: Ledger, headers: IncomingHttpHeaders): AccountState {
  const id = header(headers, 'hf-api-key');
  const secret = header(headers, 'hf-secret');
  if (!id || !secret) throw new HttpError(401, 'missing credentials: send the hf-api-key and hf-secret headers');
  if (!UUID.test(id)) throw new HttpError(401, 'invalid credentials: hf-api-key must be a uuid');
  return check(ledger, id, secret);
}

function check(ledger: Ledger, id: string, secret: string): AccountState {
  const account = ledger.accounts.get(id);
  // One message for an unknown id and a wrong secret, so ids cannot be probed.
  if (!account || account.secret !== secret) throw new HttpError(401, 'invalid credentials: unknown key id or wrong secret');
  return account;
}

/**
 * "Generation always requires authentication and model access" (service spec §5); the spec gives
 * no status for the refusal, so the emulator answers 403, as for the agent switch.
 */
export function requireModel(account: AccountState, model: ModelId): void {
  if (account.models !== undefined && !account.models.has(model))
    throw new HttpError(403, `no model access: this account may not use the ${model} model`);
}

export function requireAgent(account: AccountState): void {
  if (!account.agentEnabled) throw new HttpError(403, 'the agent API is not enabled for this account');
}
