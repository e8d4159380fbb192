/**
 * Accounts of the emulator (§5): a key id and secret, a credit balance, whether the agent API
 * is enabled, and the models it may use. The default account is always present unless an accounts file replaces it.
 */
import * as z from 'zod';
import { GenpipeError } from '../api/errors.js';
import { readConfigDocument } from './config-file.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET } from './default-credentials.js';
import { MODEL_IDS, type ModelId } from './models.js';

export { DEFAULT_KEY_ID, DEFAULT_SECRET };

/** "Generous": 1,000,000 credits, US$10,000 at the default rate. */
export const DEFAULT_CREDITS = 1_000_000;

export interface AccountSpec {
  keyId: string;
  secret: string;
  /** Starting balance in credits. */
  credits: number;
  agentEnabled: boolean;
  /** The models the account may use (§5 "model access"); undefined: every model. */
  models?: readonly ModelId[] | undefined;
}

export const DEFAULT_ACCOUNT: AccountSpec = { keyId: DEFAULT_KEY_ID, secret: DEFAULT_SECRET, credits: DEFAULT_CREDITS, agentEnabled: true };

const keyId = z.string().regex(/^[^\s:]+$/, 'must be non-empty, without colons or white space');

/** `--accounts FILE`: YAML or JSON. */
export const AccountsFile = z.strictObject({
  accounts: z
    .array(
      z.strictObject({
        key_id: keyId,
        secret: z
          .string()
          .min(1)
          .regex(/^[^\r\n]+$/, 'must be one line'),
        credits: z.number().min(0).optional(),
        agent_enabled: z.boolean().optional(),
        models: z.array(z.enum(MODEL_IDS as [ModelId, ...ModelId[]])).optional(),
      }),
    )
    .min(1),
});
export type AccountsFile = z.infer<typeof AccountsFile>;

export function accountsFromFile(path: string): AccountSpec[] {
  const doc = readConfigDocument(path, AccountsFile, 'accounts file');
  const seen = new Set<string>();
  return doc.accounts.map((a, i) => {
    if (seen.has(a.key_id))
      throw new GenpipeError('invalid_input', `Invalid accounts file: ${path}: accounts[${i}].key_id: ${a.key_id} appears twice.`);
    seen.add(a.key_id);
    return {
      keyId: a.key_id,
      secret: a.secret,
      credits: a.credits ?? DEFAULT_CREDITS,
      agentEnabled: a.agent_enabled ?? true,
      models: a.models,
    };
  });
}

/** `--account ID:SECRET`: an account with the default balance and the agent enabled. */
export function accountFromPair(pair: string): AccountSpec {
  const colon = pair.indexOf(':');
  const id = pair.slice(0, colon);
  const secret = pair.slice(colon + 1);
  if (colon <= 0 || secret === '' || !keyId.safeParse(id).success) {
    throw new GenpipeError('invalid_input', '--account must have the form KEY_ID:SECRET.');
  }
  return { keyId: id, secret, credits: DEFAULT_CREDITS, agentEnabled: true };
}
