/** The character-sheet model (§4.2): keyed submits, so a resend can never pay twice. */
import { buildCharacterSheetRequest } from '../api/character-sheet.js';
import { CHARACTER_SHEET_PRICE_USD, CharacterSheetRequest } from '../api/wire.js';
import { imageOutputs, seedMovedOn, type ModelDefinition } from './model.js';
import { requestAdapter } from './request-adapter.js';

export const characterSheet: ModelDefinition<'character-sheet'> = {
  name: 'character-sheet',
  summary: 'a character reference sheet (US$0.05)',
  inputSchema: CharacterSheetRequest,
  build: (input, { catalog }) => buildCharacterSheetRequest(input, catalog),
  imageFields: [['image_url'], ['item_image_urls', '*']],
  listPriceUsd: CHARACTER_SHEET_PRICE_USD,
  placeholderOutputs: imageOutputs,
  catalogField: 'selection',
  adapter: requestAdapter({
    idempotentSubmit: true,
    submit: (body, idempotencyKey, ctx) =>
      ctx.client.characterSheet.submit(body as CharacterSheetRequest, { idempotencyKey, webhookUrl: ctx.webhookUrl, signal: ctx.signal }),
  }),
  seeded: true,
  // An older genpipe re-rolled an animal tier by its variation_index, a human tier by its seed.
  rerolledBefore: (body, times) => {
    const human = HUMAN_TIERS.has(String(body.tier ?? 'normal'));
    return !human && typeof body.variation_index === 'number'
      ? { ...body, variation_index: body.variation_index + times }
      : seedMovedOn(body, times);
  },
};

/** The human tiers (§4.2); the others are animal tiers, whose variations are numbered. */
const HUMAN_TIERS: ReadonlySet<string> = new Set(['normal', 'freak', 'total']);
