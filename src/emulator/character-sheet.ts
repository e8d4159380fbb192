/**
 * §4.2: the character-sheet model. Every rule of the body (the shared wire schema), the selection
 * rules against the catalog (§4.2 rules 1–7, `checkSelection`), pinned_species against the insect
 * species list, trait_variants against the hidden trait catalog, and Idempotency-Key semantics.
 * Price US$0.05 (§8 rule 1). The output is one 16:9 PNG sheet whose pixels depend on tier, seed and
 * variation_index.
 */
import { checkSelection } from '../api/selection.js';
import { CharacterSheetRequest, isHumanTier, SEED_MAX, SEED_MIN, type Tier } from '../api/wire.js';
import { authKey, requireModel } from './auth.js';
import { canonicalJson, HttpError, parseJson, validate, type EmuResponse } from './http-util.js';
import type { IdempotencyStore } from './idempotency.js';
import { usdToMicros, type Ledger } from './ledger.js';
import type { ImageInputs } from './image-inputs.js';
import { MODELS } from './models.js';
import type { CatalogState } from './options-catalog.js';
import { INSECT_SPECIES, SPECIES_CYCLES, TRAIT_VARIANT_COUNTS } from './options-catalog-data.js';
import { hash32, type Rng } from './prng.js';
import type { RequestStore } from './request-store.js';
import type { RouteInput } from './router.js';
import { bodyHash, rawBodyHash, ensureBalance, submitAnswer, webhookFromQuery, type SubmitGate, type WebhookPolicy } from './submit.js';
import type { Urls } from './urls.js';

export interface CharacterSheetDeps {
  ledger: Ledger;
  requests: RequestStore;
  catalog: CatalogState;
  idempotency: IdempotencyStore;
  images: ImageInputs;
  rng: Rng;
  gate: SubmitGate;
  urls: Urls;
  webhooks: WebhookPolicy;
}

/** Sheet size: small, but 16:9 like the real 2K output (§4.2 Output). */
export const SHEET_WIDTH = 160;
export const SHEET_HEIGHT = 90;
/** §4.2 "Output: one image, 2K, aspect ratio 16:9": 2048 × 1152 with true sizes on. */
export const SHEET_TRUE_WIDTH = 2048;

export class CharacterSheetModel {
  constructor(private readonly d: CharacterSheetDeps) {}

  /** `POST {base_url}/{vendor}/ai-influencer`. */
  async submit(input: RouteInput): Promise<EmuResponse> {
    const d = this.d;
    const account = authKey(d.ledger, input.headers);
    requireModel(account, 'character-sheet');
    const raw = parseJson(input.body) ?? {};
    const body = validate(CharacterSheetRequest, raw);
    const tier: Tier = body.tier ?? 'normal';
    this.#checkSelection(tier, body.selection ?? {});
    this.#checkPinnedSpecies(tier, body.pinned_species);
    this.#checkTraitVariants(tier, body);
    // Checked before anything is claimed or charged; in order, so the first bad URL is the one named.
    await d.images.check(body.image_url, 'image_url');
    for (const [i, u] of (body.item_image_urls ?? []).entries()) await d.images.check(u, `item_image_urls[${i}]`);
    const webhook = webhookFromQuery(input.url, d.webhooks);

    const hash = bodyHash(raw);
    const key = headerValue(input.headers['idempotency-key']);
    if (key !== undefined && (key.length === 0 || key.length > 255))
      throw new HttpError(400, 'Idempotency-Key must be 1 to 255 characters');
    const path = input.url.pathname;
    const begun = key === undefined ? undefined : d.idempotency.begin(`${account.keyId} ${path}`, key, hash);
    if (begun?.kind === 'replay') {
      const existing = d.requests.get(begun.requestId);
      if (existing) return submitAnswer(d.requests, existing, true);
    }
    const record = begun?.kind === 'new' ? begun.record : undefined;
    try {
      await d.gate.pass();
      const price = usdToMicros(MODELS['character-sheet'].priceUsd);
      ensureBalance(account, price);
      const seed = body.seed ?? d.rng.int(SEED_MIN, SEED_MAX);
      const variation = body.variation_index ?? 0;
      const species = isHumanTier(tier)
        ? undefined
        : (body.pinned_species ?? selectedSpecies(tier, body.selection ?? {}) ?? speciesFor(tier, seed, variation));
      // One line of the state file (`--state`): the request, its charge and its key.
      const r = d.requests.transaction(() => {
        const created = d.requests.create({
          keyId: account.keyId,
          model: 'character-sheet',
          modelPath: path,
          idempotencyKey: key,
          bodyHash: rawBodyHash(input.body),
          chargedMicros: price,
          art: {
            width: SHEET_WIDTH,
            height: SHEET_HEIGHT,
            longSide: SHEET_TRUE_WIDTH,
            layout: 'sheet',
            tier,
            variationIndex: variation,
            seedText: `${tier}|${seed}|${variation}|${species ?? ''}|${body.body_color ?? ''}|${JSON.stringify(body.selection ?? {})}${traitSeed(body.trait_variants)}`,
          },
          webhook,
          text: body.brief,
          details: { tier, seed_given: body.seed ?? null, variation_index: variation, species: species ?? null },
        });
        if (record) d.idempotency.finish(record, created.id);
        return created;
      });
      return submitAnswer(d.requests, r);
    } catch (error) {
      if (record) d.idempotency.abandon(record);
      throw error;
    }
  }

  #checkSelection(tier: Tier, selection: Record<string, string[]>): void {
    const check = checkSelection(this.d.catalog.catalog, tier, selection);
    const first = check.issues[0];
    if (first) throw new HttpError(422, check.issues.map((i) => `${i.path}: ${i.message}`).join('; '));
  }

  #checkPinnedSpecies(tier: Tier, pinned: string | null | undefined): void {
    if (pinned == null) return;
    if (tier !== 'insects') throw new HttpError(422, `pinned_species: only allowed with tier insects, not ${tier}`);
    if (!INSECT_SPECIES.includes(pinned)) throw new HttpError(422, `pinned_species: unknown insect species id ${JSON.stringify(pinned)}`);
  }

  /** Choices must name selected options that have variants, and only variants the trait catalog has. */
  #checkTraitVariants(tier: Tier, body: CharacterSheetRequest): void {
    const tv = body.trait_variants;
    if (!tv) return;
    const selected = new Set(Object.values(body.selection ?? {}).flat());
    for (const [trait, variant] of Object.entries(tv.choices ?? {})) {
      const path = `trait_variants.choices.${trait}`;
      if (!selected.has(trait)) throw new HttpError(422, `${path}: trait ${trait} is not selected`);
      const count = TRAIT_VARIANT_COUNTS.get(trait);
      if (count === undefined) throw new HttpError(422, `${path}: trait ${trait} has no variants`);
      const n = variant === 'original' ? 0 : Number(variant.slice(1));
      if (n > count)
        throw new HttpError(
          422,
          `${path}: variant ${variant} does not exist in the current trait catalog (${trait} has original and v1 to v${count})`,
        );
    }
    if (tv.animal_choices != null) {
      if (isHumanTier(tier)) throw new HttpError(422, `trait_variants.animal_choices: must be omitted or null for human tier ${tier}`);
      for (const key of Object.keys(tv.animal_choices)) {
        if (!selected.has(key)) throw new HttpError(422, `trait_variants.animal_choices.${key}: option ${key} is not selected`);
      }
    }
  }
}

/**
 * "Explicit selections and overrides can constrain variation" (service spec §4.2): a species option
 * selected in the `species` category fixes the species, as pinned_species does; the other
 * appearance components still vary with variation_index.
 */
export function selectedSpecies(tier: string, selection: Record<string, string[]>): string | undefined {
  const key = selection.species?.[0];
  if (key === undefined) return undefined;
  const name = key.replace(/^an_/, '');
  return (SPECIES_CYCLES[tier] ?? []).includes(name) ? name : undefined;
}

/**
 * The overrides' part of the art seed: a variant other than `original`, or an animal choice,
 * changes the sheet. `original` is dropped, since an unspecified trait uses it (§4.2), so naming
 * it draws the same sheet as leaving it out; without overrides the seed text is unchanged.
 */
function traitSeed(tv: CharacterSheetRequest['trait_variants']): string {
  if (!tv) return '';
  const choices = Object.fromEntries(Object.entries(tv.choices ?? {}).filter(([, v]) => v !== 'original'));
  const animal = tv.animal_choices ?? {};
  if (Object.keys(choices).length === 0 && Object.keys(animal).length === 0) return '';
  return `|${canonicalJson({ choices, animal })}`;
}

function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/**
 * Animal variation rule (§4.2): with seed and tier fixed, successive variation_index values cycle
 * through the tier's species without repeats within a cycle (a seeded permutation per cycle).
 */
export function speciesFor(tier: string, seed: number, variationIndex: number): string {
  const list = SPECIES_CYCLES[tier] ?? ['unknown'];
  const cycle = Math.floor(variationIndex / list.length);
  const order = [...list];
  let h = hash32(`${tier}|${seed}|${cycle}`);
  for (let i = order.length - 1; i > 0; i--) {
    h = Math.imul(h ^ (h >>> 13), 0x5bd1e995) >>> 0;
    const j = h % (i + 1);
    [order[i], order[j]] = [order[j] as string, order[i] as string];
  }
  return order[variationIndex % list.length] ?? 'unknown';
}
