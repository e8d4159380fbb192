import { describe, expect, it } from 'vitest';
import { buildCharacterSheetRequest } from '../../src/api/character-sheet.js';
import { InvalidInputError } from '../../src/api/errors.js';
import { ANIMAL_TIERS, HUMAN_TIERS, TIERS, type CharacterSheetRequest } from '../../src/api/wire.js';
import { AUTHORIZATION, BASE, harness, header, invalid, issuePaths, jsonBody, rejection, submitted } from './helpers.js';

const build = (input: Record<string, unknown>): CharacterSheetRequest => buildCharacterSheetRequest(input);
const refuses = (input: Record<string, unknown>, path: string): void => {
  expect(issuePaths(invalid(() => build(input)))).toContain(path);
};

describe('§4.2 character-sheet body rules', () => {
  it('every field is optional; tier defaults to normal', () => {
    expect(build({})).toEqual({ tier: 'normal' });
  });

  it('tier: normal, freak, total, insects, frogs, cats, dogs, capybaras, birds — API values accepted, display labels refused', () => {
    for (const tier of TIERS) expect(build({ tier }).tier).toBe(tier);
    expect(TIERS).toHaveLength(9);
    refuses({ tier: 'Normal' }, 'tier');
    refuses({ tier: 'human' }, 'tier');
    refuses({ tier: 'cat' }, 'tier');
  });

  it('an unknown body field is refused, naming it', () => {
    refuses({ tier: 'normal', sed: 5 }, 'sed');
  });

  it('image_url: URL or null — accepts an https URL and null, refuses a non-URL and base64 data', () => {
    expect(build({ image_url: 'https://img.test/face.jpg' }).image_url).toBe('https://img.test/face.jpg');
    expect(build({ image_url: null }).image_url).toBeNull();
    refuses({ image_url: 'face.jpg' }, 'image_url');
    refuses({ image_url: 'data:image/png;base64,iVBORw0KGgo=' }, 'image_url');
  });

  it('item_image_urls: at most 3 — accepts 3, refuses 4', () => {
    const urls = ['https://i.test/1.png', 'https://i.test/2.png', 'https://i.test/3.png', 'https://i.test/4.png'];
    expect(build({ item_image_urls: urls.slice(0, 3) }).item_image_urls).toEqual(urls.slice(0, 3));
    refuses({ item_image_urls: urls }, 'item_image_urls');
    refuses({ item_image_urls: ['not a url'] }, 'item_image_urls[0]');
  });

  it('brief: at most 4,000 characters — accepts 4000, refuses 4001', () => {
    expect(build({ brief: 'b'.repeat(4000) }).brief).toHaveLength(4000);
    refuses({ brief: 'b'.repeat(4001) }, 'brief');
  });

  it('brief: characters are counted as the spec does, one per emoji — accepts 4000 emoji, refuses 4001', () => {
    // Each 🐈 is two UTF-16 units: a length-based check would refuse 2,001 of them.
    expect(build({ brief: '🐈'.repeat(4000) }).brief).toBe('🐈'.repeat(4000));
    refuses({ brief: '🐈'.repeat(4001) }, 'brief');
  });

  it('seed: 1 to 1,000,000 (§8) — accepts 1, 1000000 and null, refuses 0, 1000001 and 1.5', () => {
    expect(build({ seed: 1 }).seed).toBe(1);
    expect(build({ seed: 1_000_000 }).seed).toBe(1_000_000);
    expect(build({ seed: null }).seed).toBeNull();
    refuses({ seed: 0 }, 'seed');
    refuses({ seed: 1_000_001 }, 'seed');
    refuses({ seed: 1.5 }, 'seed');
  });

  it('variation_index: 0 to 2,147,483,647 (§8) — an animal tier accepts 0 and 2147483647, refuses -1 and 2147483648', () => {
    expect(build({ tier: 'cats', variation_index: 0 }).variation_index).toBe(0);
    expect(build({ tier: 'cats', variation_index: 2_147_483_647 }).variation_index).toBe(2_147_483_647);
    refuses({ tier: 'cats', variation_index: -1 }, 'variation_index');
    refuses({ tier: 'cats', variation_index: 2_147_483_648 }, 'variation_index');
  });

  it('variation_index: human tiers require 0 — accepted with 0, refused with 1 (also for the default tier)', () => {
    for (const tier of HUMAN_TIERS) {
      expect(build({ tier, variation_index: 0 }).variation_index).toBe(0);
      refuses({ tier, variation_index: 1 }, 'variation_index');
    }
    refuses({ variation_index: 1 }, 'variation_index');
  });

  it('body_color: format #RRGGBB — accepts #A1B2C3 on an animal tier, refuses #FFF, red and A1B2C3', () => {
    expect(build({ tier: 'frogs', body_color: '#A1B2C3' }).body_color).toBe('#A1B2C3');
    expect(build({ tier: 'frogs', body_color: '#a1b2c3' }).body_color).toBe('#a1b2c3');
    refuses({ tier: 'frogs', body_color: '#FFF' }, 'body_color');
    refuses({ tier: 'frogs', body_color: 'red' }, 'body_color');
    refuses({ tier: 'frogs', body_color: 'A1B2C3' }, 'body_color');
  });

  it('body_color: animal tiers only; human tiers require omission or null', () => {
    for (const tier of ANIMAL_TIERS) expect(build({ tier, body_color: '#00FF00' }).body_color).toBe('#00FF00');
    for (const tier of HUMAN_TIERS) {
      expect(build({ tier, body_color: null }).body_color).toBeNull();
      expect(build({ tier })).not.toHaveProperty('body_color');
      refuses({ tier, body_color: '#00FF00' }, 'body_color');
    }
  });

  it('pinned_species: 1 to 64 characters — accepts 1 and 64, refuses empty and 65', () => {
    expect(build({ tier: 'insects', pinned_species: 'a' }).pinned_species).toBe('a');
    expect(build({ tier: 'insects', pinned_species: 's'.repeat(64) }).pinned_species).toHaveLength(64);
    refuses({ tier: 'insects', pinned_species: '' }, 'pinned_species');
    refuses({ tier: 'insects', pinned_species: 's'.repeat(65) }, 'pinned_species');
  });

  it('pinned_species: only with tier insects — refused with cats and with normal; null allowed anywhere', () => {
    expect(build({ tier: 'insects', pinned_species: 'mantis' }).pinned_species).toBe('mantis');
    expect(build({ tier: 'cats', pinned_species: null }).pinned_species).toBeNull();
    refuses({ tier: 'cats', pinned_species: 'mantis' }, 'pinned_species');
    refuses({ tier: 'normal', pinned_species: 'mantis' }, 'pinned_species');
  });

  it('selection: at most 18 categories — accepts 18, refuses 19', () => {
    const selection = (n: number): Record<string, string[]> => Object.fromEntries(Array.from({ length: n }, (_, i) => [`c${i}`, ['o']]));
    expect(Object.keys(build({ selection: selection(18) }).selection ?? {})).toHaveLength(18);
    refuses({ selection: selection(19) }, 'selection');
  });

  it('selection: an object of category key -> array of option keys', () => {
    refuses({ selection: { hair: 'short' } }, 'selection.hair');
  });
});

describe('§4.2 trait_variants', () => {
  it('version: the value appearance-v2 (required when supplying the object) — accepted; another version or none refused', () => {
    expect(build({ trait_variants: { version: 'appearance-v2' } }).trait_variants).toEqual({ version: 'appearance-v2' });
    expect(build({ trait_variants: null }).trait_variants).toBeNull();
    refuses({ trait_variants: { version: 'appearance-v1' } }, 'trait_variants.version');
    refuses({ trait_variants: { choices: { hair_long: 'v1' } } }, 'trait_variants.version');
  });

  it('choices: general variant ids original, v1 to v5 — accepted; v0, v6 and V1 refused', () => {
    for (const variant of ['original', 'v1', 'v2', 'v3', 'v4', 'v5']) {
      expect(build({ trait_variants: { version: 'appearance-v2', choices: { hair_long: variant } } }).trait_variants?.choices).toEqual({
        hair_long: variant,
      });
    }
    for (const variant of ['v0', 'v6', 'V1', 'v10']) {
      refuses({ trait_variants: { version: 'appearance-v2', choices: { hair_long: variant } } }, 'trait_variants.choices.hair_long');
    }
  });

  it('choices: the trait pr_centaur also permits v1 to v10 — v6 and v10 accepted, v11 refused', () => {
    for (const variant of ['original', 'v6', 'v10']) {
      expect(build({ trait_variants: { version: 'appearance-v2', choices: { pr_centaur: variant } } }).trait_variants?.choices).toEqual({
        pr_centaur: variant,
      });
    }
    refuses({ trait_variants: { version: 'appearance-v2', choices: { pr_centaur: 'v11' } } }, 'trait_variants.choices.pr_centaur');
  });

  it('animal_choices: integers 0 to 4 — 0 and 4 accepted on an animal tier; -1, 5 and 1.5 refused', () => {
    const tv = (n: number): Record<string, unknown> => ({
      tier: 'dogs',
      trait_variants: { version: 'appearance-v2', animal_choices: { ears_floppy: n } },
    });
    expect(build(tv(0)).trait_variants?.animal_choices).toEqual({ ears_floppy: 0 });
    expect(build(tv(4)).trait_variants?.animal_choices).toEqual({ ears_floppy: 4 });
    refuses(tv(-1), 'trait_variants.animal_choices.ears_floppy');
    refuses(tv(5), 'trait_variants.animal_choices.ears_floppy');
    refuses(tv(1.5), 'trait_variants.animal_choices.ears_floppy');
  });

  it('animal_choices: omitted or null for human tiers — null and omission accepted, an object refused', () => {
    expect(
      build({ tier: 'normal', trait_variants: { version: 'appearance-v2', animal_choices: null } }).trait_variants?.animal_choices,
    ).toBeNull();
    expect(build({ tier: 'total', trait_variants: { version: 'appearance-v2' } }).trait_variants).toEqual({ version: 'appearance-v2' });
    refuses(
      { tier: 'freak', trait_variants: { version: 'appearance-v2', animal_choices: { ears_floppy: 1 } } },
      'trait_variants.animal_choices',
    );
  });

  it('an unknown member of trait_variants is refused', () => {
    refuses({ trait_variants: { version: 'appearance-v2', variants: {} } }, 'trait_variants.variants');
  });
});

describe('character-sheet submit: POST {base_url}/{vendor}/ai-influencer', () => {
  it('sends the body as JSON with Authorization and the Idempotency-Key header, and returns request_id, status, status_url, cancel_url', async () => {
    const { agent, client, calls } = harness();
    const body: CharacterSheetRequest = {
      tier: 'cats',
      seed: 42,
      variation_index: 7,
      body_color: '#112233',
      selection: { fur: ['tabby'] },
    };
    agent
      .get(BASE)
      .intercept({
        path: '/vendor/ai-influencer',
        method: 'POST',
        headers: { authorization: AUTHORIZATION, 'idempotency-key': 'inst-1-v7', 'content-type': 'application/json' },
      })
      .reply(200, submitted());
    const result = await client.characterSheet.submit(body, { idempotencyKey: 'inst-1-v7' });
    expect(result).toEqual(submitted());
    expect(calls()).toHaveLength(1);
    expect(jsonBody(calls()[0])).toEqual(body);
  });

  it('without a key, no Idempotency-Key header is sent', async () => {
    const { agent, client, calls } = harness();
    agent.get(BASE).intercept({ path: '/vendor/ai-influencer', method: 'POST' }).reply(200, submitted());
    await client.characterSheet.submit({});
    expect(header(calls()[0], 'idempotency-key')).toBeUndefined();
    expect(jsonBody(calls()[0])).toEqual({});
  });

  it('with a webhook URL, sends it as ?hf_webhook= (as the official v2 client does), and none without', async () => {
    const { agent, client, calls } = harness();
    const hook = 'https://hooks.example.test/run/abc123';
    agent
      .get(BASE)
      .intercept({ path: '/vendor/ai-influencer', method: 'POST', query: { hf_webhook: hook } })
      .reply(200, submitted());
    agent.get(BASE).intercept({ path: '/vendor/ai-influencer', method: 'POST' }).reply(200, submitted());
    await client.characterSheet.submit({ tier: 'cats' }, { idempotencyKey: 'k', webhookUrl: hook });
    await client.characterSheet.submit({ tier: 'cats' }, { idempotencyKey: 'k2' });
    expect(calls().map((c) => c.searchParams)).toEqual([{ hf_webhook: hook }, {}]);
  });

  it('uses the configured vendor segment', async () => {
    const { agent, client } = harness({ vendor: 'acme' });
    agent.get(BASE).intercept({ path: '/acme/ai-influencer', method: 'POST' }).reply(200, submitted());
    expect((await client.characterSheet.submit({ tier: 'normal' })).request_id).toBe(submitted().request_id);
  });

  it('a refused body sends zero requests and raises invalid_input naming the field', async () => {
    const { client, calls } = harness();
    const error = await rejection(client.characterSheet.submit({ tier: 'normal', seed: 0 }, { idempotencyKey: 'k' }));
    expect(error).toBeInstanceOf(InvalidInputError);
    expect(error.code).toBe('invalid_input');
    expect(issuePaths(error as InvalidInputError)).toContain('seed');
    expect(error.message).toContain('seed');
    expect(calls()).toHaveLength(0);
  });

  it('a 422 naming the reused Idempotency-Key is idempotency_mismatch and is not retried', async () => {
    const { agent, client, calls } = harness();
    agent
      .get(BASE)
      .intercept({ path: '/vendor/ai-influencer', method: 'POST' })
      .reply(422, { detail: 'Idempotency-Key already used with a different body' })
      .persist();
    const error = await rejection(client.characterSheet.submit({ tier: 'normal' }, { idempotencyKey: 'k' }));
    expect(error.code).toBe('idempotency_mismatch');
    expect(calls()).toHaveLength(1);
  });
});
