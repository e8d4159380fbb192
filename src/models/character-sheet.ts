/** The character-sheet model (§4.2): keyed submits, so a resend can never pay twice. */
import { buildCharacterSheetRequest } from '../api/character-sheet.js';
import { CHARACTER_SHEET_PRICE_USD, CharacterSheetRequest } from '../api/wire.js';
import { imageOutputs, type ModelDefinition } from './model.js';
import { requestAdapter } from './request-adapter.js';

export const characterSheet: ModelDefinition<'character-sheet'> = {
  name: 'character-sheet',
  summary: 'a character reference sheet (US$0.05)',
  inputSchema: CharacterSheetRequest,
  build: (input, { catalog }) => buildCharacterSheetRequest(input, catalog),
  imageFields: [['image_url'], ['item_image_urls', '*']],
  listPriceUsd: CHARACTER_SHEET_PRICE_USD,
  placeholderOutputs: imageOutputs,
  needsCatalog: (input) => {
    const selection = (input as { selection?: unknown } | null)?.selection;
    return selection !== null && typeof selection === 'object' && Object.keys(selection).length > 0;
  },
  adapter: requestAdapter({
    idempotentSubmit: true,
    submit: (body, idempotencyKey, ctx) => ctx.client.characterSheet.submit(body as CharacterSheetRequest, { idempotencyKey, webhookUrl: ctx.webhookUrl, signal: ctx.signal }),
  }),
  seeded: true,
};
