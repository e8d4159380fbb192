/** §4.2 character-sheet rules, catalog selection rules, idempotency cases and the PNG output. */
import { crc32, inflateSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { speciesFor } from '../../src/emulator/character-sheet.js';
import { INSECT_SPECIES, SPECIES_CYCLES } from '../../src/emulator/options-catalog-data.js';
import type { Emulator } from '../../src/emulator/start-emulator.js';
import { AUTH, http, netCents, start, until } from './helpers.js';

let emu: Emulator;
beforeAll(async () => {
  emu = await start();
});
afterAll(() => emu.close());

const submit = (body: unknown, headers: Record<string, string> = {}) =>
  http(emu, 'POST', '/vendor/ai-influencer', { headers: { ...AUTH, ...headers }, json: body });

describe('character sheet: body rules (4xx naming the field)', () => {
  const cases: [string, unknown, RegExp][] = [
    ['unknown tier', { tier: 'robots' }, /^tier: /],
    [
      'variation_index on a human tier',
      { tier: 'normal', variation_index: 1 },
      /^variation_index: human tier normal requires variation_index 0/,
    ],
    ['variation_index out of range', { tier: 'cats', variation_index: 2_147_483_648 }, /^variation_index: /],
    ['seed below 1', { seed: 0 }, /^seed: /],
    ['seed above 1,000,000', { seed: 1_000_001 }, /^seed: /],
    ['brief over 4,000 characters', { brief: 'x'.repeat(4_001) }, /^brief: /],
    [
      'four item images',
      { item_image_urls: ['https://a/1.png', 'https://a/2.png', 'https://a/3.png', 'https://a/4.png'] },
      /^item_image_urls: /,
    ],
    ['body_color on a human tier', { tier: 'freak', body_color: '#112233' }, /^body_color: /],
    ['body_color not #RRGGBB', { tier: 'frogs', body_color: 'green' }, /^body_color: /],
    ['pinned_species without tier insects', { tier: 'cats', pinned_species: 'ant' }, /^pinned_species: /],
    ['unknown pinned_species', { tier: 'insects', pinned_species: 'unicorn' }, /^pinned_species: unknown insect species id/],
    ['pinned_species over 64 characters', { tier: 'insects', pinned_species: 'a'.repeat(65) }, /^pinned_species: /],
    ['an unknown field', { tier: 'normal', colour: 'red' }, /^colour: unknown field/],
    ['trait_variants without version', { trait_variants: { choices: {} } }, /^trait_variants.version: /],
    [
      'animal_choices on a human tier',
      { trait_variants: { version: 'appearance-v2', animal_choices: {} } },
      /^trait_variants.animal_choices: /,
    ],
    [
      'a variant id out of the general set',
      {
        tier: 'freak',
        selection: { transformations: ['pr_horns'] },
        trait_variants: { version: 'appearance-v2', choices: { pr_horns: 'v6' } },
      },
      /^trait_variants.choices.pr_horns: /,
    ],
    [
      'a variant the trait catalog lacks',
      {
        tier: 'freak',
        selection: { transformations: ['pr_third_eye'] },
        trait_variants: { version: 'appearance-v2', choices: { pr_third_eye: 'v4' } },
      },
      /does not exist in the current trait catalog/,
    ],
    [
      'a variant for an unselected trait',
      { tier: 'freak', trait_variants: { version: 'appearance-v2', choices: { pr_horns: 'v1' } } },
      /is not selected/,
    ],
    [
      'an animal_choices index above 4',
      { tier: 'cats', trait_variants: { version: 'appearance-v2', animal_choices: { an_tabby: 5 } } },
      /^trait_variants.animal_choices.an_tabby: /,
    ],
    ['an animated image type', { image_url: 'https://example.com/a.gif' }, /^image_url: must be a non-animated JPEG, PNG or WebP/],
    ['a non-uploaded emulator media URL', { image_url: 'EMU/cdn/media/nope.png' }, /^image_url: the image is not reachable/],
  ];
  for (const [name, body, detail] of cases) {
    it(`refuses ${name}`, async () => {
      const b = JSON.parse(JSON.stringify(body).replace('EMU', emu.url));
      const res = await submit(b);
      expect(res.status).toBe(422);
      expect(res.json.detail).toMatch(detail);
    });
  }

  it('accepts pr_centaur v10 (v1 to v10 for that trait) and charges US$0.05', async () => {
    const res = await submit({
      tier: 'total',
      selection: { transformations: ['pr_centaur'] },
      trait_variants: { version: 'appearance-v2', choices: { pr_centaur: 'v10' } },
    });
    expect(res.status).toBe(200);
    expect(netCents(emu, { requestId: res.json.request_id })).toBe(5);
  });

  it('refuses malformed JSON with 400 and no charge', async () => {
    const before = emu.requests.byId.size;
    const res = await http(emu, 'POST', '/vendor/ai-influencer', {
      headers: { ...AUTH, 'content-type': 'application/json' },
      body: Buffer.from('{oops'),
    });
    expect(res.status).toBe(400);
    expect(emu.requests.byId.size).toBe(before);
  });
});

describe('character sheet: selection rules against the catalog (§4.2 rules 1–7)', () => {
  const cases: [string, unknown, RegExp][] = [
    [
      'more than 18 categories',
      { selection: Object.fromEntries(Array.from({ length: 19 }, (_, i) => [`c${i}`, []])) },
      /^selection: at most 18/,
    ],
    [
      'a category for another tier',
      { tier: 'normal', selection: { species: ['an_tabby'] } },
      /^selection.species: category "species" does not apply to tier normal/,
    ],
    ['a stale category key', { selection: { hats: ['fedora'] } }, /^selection.hats: .*stale or unknown/],
    ['a stale option key', { selection: { hair_style: ['afro_puffs'] } }, /^selection.hair_style: option "afro_puffs".*stale or unknown/],
    ['more options than the category max', { selection: { clothing: ['tshirt', 'jeans', 'boots', 'hoodie'] } }, /allows at most 3/],
    [
      'an option restricted to other tiers',
      { tier: 'normal', selection: { hair_style: ['flame_hair'] } },
      /option "flame_hair" in category "hair_style" is only for total, not normal/,
    ],
    ['two options in one facial slot', { selection: { face_features: ['button_nose', 'roman_nose'] } }, /both fill facial slot "nose"/],
    [
      'an exclusive option with another',
      { selection: { accessories: ['no_accessories', 'hat'] } },
      /is exclusive and must be selected alone/,
    ],
  ];
  for (const [name, body, detail] of cases) {
    it(`refuses ${name}`, async () => {
      const res = await submit(body);
      expect(res.status).toBe(422);
      expect(res.json.detail).toMatch(detail);
    });
  }

  it('takes the shared key "eyes" as the animal category for an animal tier', async () => {
    expect((await submit({ tier: 'cats', selection: { eyes: ['an_big_eyes'] } })).status).toBe(200);
    expect((await submit({ tier: 'cats', selection: { eyes: ['round_eyes'] } })).json.detail).toMatch(
      /option "round_eyes" is not in category "eyes"/,
    );
  });

  it('accepts an option with a null preview', async () => {
    expect((await submit({ tier: 'normal', selection: { face_features: ['freckles'] } })).status).toBe(200);
  });

  it('refuses a key retired by a config_revision bump', async () => {
    const local = await start();
    const body = { tier: 'normal', selection: { hair_style: ['mullet_classic'] } };
    expect((await http(local, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: body })).status).toBe(200);
    const before = (await http(local, 'GET', '/models/vendor/ai-influencer/options')).json.config_revision;
    local.bumpConfigRevision();
    const after = (await http(local, 'GET', '/models/vendor/ai-influencer/options')).json.config_revision;
    expect(after).not.toBe(before);
    expect((await http(local, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: body })).status).toBe(422);
    await local.close();
  });
});

describe('character sheet: Idempotency-Key', () => {
  it('same key and same body: the same request, no new charge', async () => {
    const body = { tier: 'dogs', seed: 5, variation_index: 1 };
    const a = await submit(body, { 'idempotency-key': 'idem-same' });
    const b = await submit({ variation_index: 1, seed: 5, tier: 'dogs' }, { 'idempotency-key': 'idem-same' });
    expect(b.status).toBe(200);
    expect(b.json.request_id).toBe(a.json.request_id);
    expect(emu.ledger.entries.filter((e) => e.request_id === a.json.request_id && e.kind === 'charge')).toHaveLength(1);
    expect(emu.requests.inspect().filter((r: any) => r.idempotency_key === 'idem-same')).toHaveLength(1);
  });

  it('same key and a different body: 422 naming the Idempotency-Key', async () => {
    await submit({ tier: 'dogs' }, { 'idempotency-key': 'idem-diff' });
    const res = await submit({ tier: 'cats' }, { 'idempotency-key': 'idem-diff' });
    expect(res.status).toBe(422);
    expect(res.json.detail).toContain('Idempotency-Key');
  });

  it('a key still being processed: 409, then the first submission finishes normally', async () => {
    const release = emu.holdSubmits();
    const first = submit({ tier: 'birds' }, { 'idempotency-key': 'idem-busy' });
    await until(() => (emu.stats.inFlight >= 1 ? true : undefined));
    const second = await submit({ tier: 'birds' }, { 'idempotency-key': 'idem-busy' });
    expect(second.status).toBe(409);
    expect(second.json.detail).toContain('Idempotency-Key');
    release();
    const done = await first;
    expect(done.status).toBe(200);
    expect((await submit({ tier: 'birds' }, { 'idempotency-key': 'idem-busy' })).json.request_id).toBe(done.json.request_id);
  });

  it('keys are forgotten after the retention window: a new request is created', async () => {
    const local = await start({ idempotencyRetentionMs: 1 });
    const send = () => http(local, 'POST', '/vendor/ai-influencer', { headers: { ...AUTH, 'idempotency-key': 'k' }, json: {} });
    const a = await send();
    await new Promise((r) => setTimeout(r, 5));
    const b = await send();
    expect(b.json.request_id).not.toBe(a.json.request_id);
    expect(local.ledger.entries.filter((e) => e.kind === 'charge')).toHaveLength(2);
    await local.close();
  });

  it('keys are scoped per account', async () => {
    const local = await start({
      accounts: [
        { keyId: 'a1', secret: 's1-secret', credits: 100, agentEnabled: true },
        { keyId: 'a2', secret: 's2-secret', credits: 100, agentEnabled: true },
      ],
    });
    const send = (k: string) =>
      http(local, 'POST', '/vendor/ai-influencer', { headers: { authorization: `Key ${k}`, 'idempotency-key': 'shared' }, json: {} });
    const a = await send('a1:s1-secret');
    const b = await send('a2:s2-secret');
    expect(b.status).toBe(200);
    expect(b.json.request_id).not.toBe(a.json.request_id);
    await local.close();
  });
});

describe('character sheet: output', () => {
  async function sheet(body: unknown): Promise<Buffer> {
    const r = await submit(body);
    const status = await until(async () => {
      const s = await http(emu, 'GET', `/requests/${r.json.request_id}/status`, { headers: AUTH });
      return s.json.status === 'completed' ? s.json : undefined;
    });
    return (await http(emu, 'GET', new URL(status.images[0].url).pathname)).bytes;
  }

  /** Decodes the emulator's PNG (8-bit palette, filter 0 rows) to RGB pixels, checking every chunk CRC and index. */
  function decode(png: Buffer): { width: number; height: number; pixels: Buffer } {
    expect(png.subarray(0, 8).toString('hex')).toBe('89504e470d0a1a0a');
    let offset = 8;
    let width = 0;
    let height = 0;
    let palette: Buffer = Buffer.alloc(0);
    const idat: Buffer[] = [];
    while (offset < png.length) {
      const length = png.readUInt32BE(offset);
      const type = png.toString('ascii', offset + 4, offset + 8);
      const data = png.subarray(offset + 8, offset + 8 + length);
      expect(png.readUInt32BE(offset + 8 + length)).toBe(crc32(png.subarray(offset + 4, offset + 8 + length)));
      if (type === 'IHDR') {
        width = data.readUInt32BE(0);
        height = data.readUInt32BE(4);
        expect([data[8], data[9]]).toEqual([8, 3]); // 8-bit palette indices
      }
      if (type === 'PLTE') palette = data;
      if (type === 'IDAT') idat.push(data);
      offset += 12 + length;
    }
    const rows = inflateSync(Buffer.concat(idat));
    expect(rows.length).toBe((width + 1) * height);
    expect(palette.length % 3).toBe(0);
    const pixels = Buffer.alloc(width * height * 3);
    for (let y = 0; y < height; y++) {
      expect(rows[y * (width + 1)]).toBe(0); // filter: none
      for (let x = 0; x < width; x++) {
        const index = rows[y * (width + 1) + 1 + x]!;
        expect(index * 3 < palette.length).toBe(true);
        palette.copy(pixels, (y * width + x) * 3, index * 3, index * 3 + 3);
      }
    }
    return { width, height, pixels };
  }

  it('is a valid 16:9 PNG whose pixels change with variation_index, seed and tier', async () => {
    const base = decode(await sheet({ tier: 'cats', seed: 10, variation_index: 0 }));
    expect(base.width * 9).toBe(base.height * 16);
    const variation = decode(await sheet({ tier: 'cats', seed: 10, variation_index: 1 }));
    const seed = decode(await sheet({ tier: 'cats', seed: 11, variation_index: 0 }));
    const tier = decode(await sheet({ tier: 'dogs', seed: 10, variation_index: 0 }));
    expect(variation.pixels.equals(base.pixels)).toBe(false);
    expect(seed.pixels.equals(base.pixels)).toBe(false);
    expect(tier.pixels.equals(base.pixels)).toBe(false);
    const again = decode(await sheet({ tier: 'cats', seed: 10, variation_index: 0 }));
    expect(again.pixels.equals(base.pixels)).toBe(true);
  });

  it('cycles species without repeats within a cycle, and keeps a pinned species', async () => {
    const cats = SPECIES_CYCLES.cats!;
    const cycle = cats.map((_, i) => speciesFor('cats', 99, i));
    expect(new Set(cycle).size).toBe(cats.length);
    const r = await submit({ tier: 'insects', seed: 3, variation_index: 4, pinned_species: 'mantis' });
    expect(emu.requests.get(r.json.request_id)?.details.species).toBe('mantis');
    expect(INSECT_SPECIES).toContain('mantis');
  });
});
