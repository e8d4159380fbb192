/** §4.2: the character-sheet model. */
import { baseUrl, segment, withWebhook, type ApiContext, type CallContext } from './context.js';
import { InvalidInputError } from './errors.js';
import { checkSelection } from './selection.js';
import { validateBody } from './validate.js';
import { CharacterSheetRequest, SubmitResponse, type OptionsCatalog, type Tier } from './wire.js';

export const characterSheetPath = (vendor: string): string => `/${segment(vendor)}/ai-influencer`;

/**
 * Validates a character-sheet body against every rule of §4.2 and §8, and, when a catalog is
 * given, the selection rules against it. Returns the body with `tier` defaulted and the selection
 * in catalog order. Throws InvalidInputError naming each offending field.
 */
export function buildCharacterSheetRequest(input: unknown, catalog?: OptionsCatalog): CharacterSheetRequest {
  const body = validateBody(CharacterSheetRequest, input, 'character-sheet request');
  const tier: Tier = body.tier ?? 'normal';
  const out: CharacterSheetRequest = { ...body, tier };
  if (catalog && body.selection) {
    const check = checkSelection(catalog, tier, body.selection);
    if (check.issues.length > 0) throw new InvalidInputError('character-sheet selection', check.issues);
    out.selection = check.normalized;
  }
  return out;
}

export interface CharacterSheetSubmitOptions extends CallContext {
  /** Deduplicates retries; use a new key for each new variation (§4.2). */
  idempotencyKey?: string | undefined;
  /** Sent as `?hf_webhook=` (§6 names it for §4.8; the official v2 client sends it on every model path). */
  webhookUrl?: string | undefined;
}

export class CharacterSheetApi {
  constructor(private readonly ctx: ApiContext) {}

  /** `POST {base_url}/{vendor}/ai-influencer`. Spends US$0.05 (§8 billing rule 1). */
  async submit(body: CharacterSheetRequest, options: CharacterSheetSubmitOptions = {}): Promise<SubmitResponse> {
    const checked = validateBody(CharacterSheetRequest, body, 'character-sheet request');
    const result = await this.ctx.transport.call({
      method: 'POST',
      url: withWebhook(baseUrl(this.ctx, characterSheetPath(this.ctx.config.vendor)), options.webhookUrl),
      auth: 'key',
      json: checked,
      schema: SubmitResponse,
      safety: { kind: 'spends', idempotencyKey: options.idempotencyKey },
      endpoint: 'idempotent-submit',
      signal: options.signal,
    });
    return result.data;
  }
}
