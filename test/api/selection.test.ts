import { describe, expect, it } from 'vitest';
import { buildCharacterSheetRequest } from '../../src/api/character-sheet.js';
import { InvalidInputError } from '../../src/api/errors.js';
import { CatalogCache } from '../../src/api/options-catalog.js';
import { categoryFor, checkSelection, normalizeSelection } from '../../src/api/selection.js';
import type { CatalogCategory, CatalogOption, OptionsCatalog, Tier } from '../../src/api/wire.js';
import { BASE, harness, header, invalid, rejection } from './helpers.js';

const HUMAN = ['normal', 'freak', 'total'];
const ANIMAL = ['insects', 'frogs', 'cats', 'dogs', 'capybaras', 'birds'];

const option = (key: string, extra: Partial<CatalogOption> = {}): CatalogOption => ({
  key,
  label: key.toUpperCase(),
  img: `https://cdn.test/${key}.png`,
  color: null,
  tiers: null,
  slot: null,
  exclusive: false,
  ...extra,
});
const category = (key: string, tiers: string[], max: number, options: CatalogOption[]): CatalogCategory => ({
  key,
  label: key,
  tiers,
  max,
  options,
});

/** A small hand-built catalog covering every selection rule. */
const CATALOG: OptionsCatalog = {
  config_revision: 'rev-1',
  categories: [
    category('hair', HUMAN, 2, [
      option('short'),
      option('long'),
      option('curly'),
      option('bald', { exclusive: true }),
      option('mohawk', { tiers: ['freak', 'total'] }),
    ]),
    category('eyes', HUMAN, 2, [option('blue', { slot: 'eyes' }), option('green', { slot: 'eyes' }), option('lashes')]),
    category('makeup', HUMAN, 2, [option('eye_patch', { slot: 'eyes' }), option('lipstick', { slot: 'mouth' })]),
    // Human and animal categories share the key "ears".
    category('ears', HUMAN, 1, [option('elf'), option('round')]),
    category('ears', ['cats', 'dogs'], 1, [option('pointy'), option('floppy')]),
    category('fur', ['cats', 'dogs'], 1, [option('tabby'), option('spotted')]),
    category('accessories', [...HUMAN, ...ANIMAL], 3, [option('hat', { img: null }), option('scarf'), option('collar')]),
  ],
};

const check = (tier: Tier, selection: Record<string, string[]>) => checkSelection(CATALOG, tier, selection);
const messages = (tier: Tier, selection: Record<string, string[]>): string[] => check(tier, selection).issues.map((i) => i.message);

describe('§2.5 / §4.2 selection rules against the options catalog', () => {
  it('rule 1: at most 18 categories — 18 accepted, 19 refused', () => {
    const many: OptionsCatalog = {
      config_revision: 1,
      categories: Array.from({ length: 19 }, (_, i) => category(`c${i}`, HUMAN, 1, [option('o')])),
    };
    const pick = (n: number): Record<string, string[]> => Object.fromEntries(Array.from({ length: n }, (_, i) => [`c${i}`, ['o']]));
    expect(checkSelection(many, 'normal', pick(18)).issues).toEqual([]);
    const refused = checkSelection(many, 'normal', pick(19));
    expect(refused.issues.map((i) => i.path)).toContain('selection');
    expect(refused.issues[0]?.message).toMatch(/at most 18 categories/);
  });

  it('rule 1: each category has its own maximum (max) — 2 accepted in hair (max 2), 3 refused', () => {
    expect(check('normal', { hair: ['short', 'long'] }).issues).toEqual([]);
    const issues = check('normal', { hair: ['short', 'long', 'curly'] }).issues;
    expect(issues).toHaveLength(1);
    expect(issues[0]).toMatchObject({ path: 'selection.hair' });
    expect(issues[0]?.message).toMatch(/at most 2/);
  });

  it('rule 2: use only categories whose tiers include the chosen tier — fur accepted for cats, refused for normal', () => {
    expect(check('cats', { fur: ['tabby'] }).issues).toEqual([]);
    const refused = messages('normal', { fur: ['tabby'] });
    expect(refused).toHaveLength(1);
    expect(refused[0]).toMatch(/"fur".*does not apply to tier normal/);
  });

  it('rule 2: human and animal categories can share a key; the one for the tier is used', () => {
    expect(categoryFor(CATALOG, 'ears', 'cats')?.options.map((o) => o.key)).toEqual(['pointy', 'floppy']);
    expect(categoryFor(CATALOG, 'ears', 'normal')?.options.map((o) => o.key)).toEqual(['elf', 'round']);
    expect(check('cats', { ears: ['pointy'] }).issues).toEqual([]);
    expect(check('normal', { ears: ['elf'] }).issues).toEqual([]);
    expect(messages('cats', { ears: ['elf'] })[0]).toMatch(/"elf".*"ears"/);
    expect(messages('normal', { ears: ['pointy'] })[0]).toMatch(/"pointy".*"ears"/);
    // A tier that neither "ears" category covers.
    expect(messages('birds', { ears: ['pointy'] })[0]).toMatch(/"ears".*does not apply to tier birds/);
  });

  it('rule 3: an option with a non-null tiers list is valid only for those tiers — mohawk accepted for freak, refused for normal', () => {
    expect(check('freak', { hair: ['mohawk'] }).issues).toEqual([]);
    expect(check('total', { hair: ['mohawk'] }).issues).toEqual([]);
    const refused = messages('normal', { hair: ['mohawk'] });
    expect(refused).toHaveLength(1);
    expect(refused[0]).toMatch(/"mohawk".*"hair".*only for freak, total/);
  });

  it('rule 4: at most one option per non-null facial slot — one accepted, two refused (same and different categories)', () => {
    expect(check('normal', { eyes: ['blue', 'lashes'] }).issues).toEqual([]);
    expect(check('normal', { eyes: ['blue'], makeup: ['lipstick'] }).issues).toEqual([]);
    expect(messages('normal', { eyes: ['blue', 'green'] })[0]).toMatch(/slot "eyes"/);
    expect(messages('normal', { eyes: ['blue'], makeup: ['eye_patch'] })[0]).toMatch(/slot "eyes"/);
  });

  it('rule 4: options without a slot (null) are not limited by it', () => {
    expect(check('normal', { accessories: ['hat', 'scarf', 'collar'] }).issues).toEqual([]);
  });

  it('rule 5: an exclusive option is selected alone in its category — bald alone accepted, bald with short refused', () => {
    expect(check('normal', { hair: ['bald'] }).issues).toEqual([]);
    const refused = messages('normal', { hair: ['bald', 'short'] });
    expect(refused).toHaveLength(1);
    expect(refused[0]).toMatch(/"bald".*exclusive/);
  });

  it('rule 6: stale or unknown keys are rejected, with a message naming the key and the category', () => {
    const unknownOption = check('normal', { hair: ['purple'] }).issues;
    expect(unknownOption).toHaveLength(1);
    expect(unknownOption[0]?.path).toBe('selection.hair');
    expect(unknownOption[0]?.message).toContain('"purple"');
    expect(unknownOption[0]?.message).toContain('"hair"');
    const unknownCategory = check('normal', { wings: ['feathered'] }).issues;
    expect(unknownCategory[0]?.path).toBe('selection.wings');
    expect(unknownCategory[0]?.message).toContain('"wings"');
    expect(unknownCategory[0]?.message).toMatch(/stale or unknown/);
  });

  it('an option selected twice is refused', () => {
    expect(messages('normal', { hair: ['short', 'short'] })[0]).toMatch(/twice/);
  });

  it('rule 7: a null preview does not make an option invalid', () => {
    expect(CATALOG.categories.find((c) => c.key === 'accessories')?.options[0]?.img).toBeNull();
    expect(check('dogs', { accessories: ['hat'] }).issues).toEqual([]);
  });

  it('rule 7: catalog order is preserved, for categories and options', () => {
    const result = check('normal', { accessories: ['scarf', 'hat'], hair: ['long', 'short'], eyes: ['lashes', 'blue'] });
    expect(result.issues).toEqual([]);
    expect(Object.keys(result.normalized)).toEqual(['hair', 'eyes', 'accessories']);
    expect(result.normalized).toEqual({ hair: ['short', 'long'], eyes: ['blue', 'lashes'], accessories: ['hat', 'scarf'] });
    expect(normalizeSelection(CATALOG, 'cats', { fur: ['tabby'], ears: ['floppy', 'pointy'] })).toEqual({
      ears: ['pointy', 'floppy'],
      fur: ['tabby'],
    });
  });

  it('buildCharacterSheetRequest with a catalog returns the selection in catalog order, or refuses naming key and category', () => {
    const body = buildCharacterSheetRequest({ tier: 'cats', selection: { fur: ['spotted'], ears: ['floppy'] } }, CATALOG);
    expect(Object.keys(body.selection ?? {})).toEqual(['ears', 'fur']);
    const error = invalid(() => buildCharacterSheetRequest({ tier: 'cats', selection: { fur: ['calico'] } }, CATALOG));
    expect(error.message).toContain('"calico"');
    expect(error.message).toContain('"fur"');
  });
});

describe('CatalogCache: refresh cached choices when config_revision changes (§4.2 rule 7, §9)', () => {
  const revision2: OptionsCatalog = {
    config_revision: 'rev-2',
    categories: CATALOG.categories.map((c) => (c.key === 'hair' ? { ...c, options: c.options.filter((o) => o.key !== 'long') } : c)),
  };

  function cache(catalogs: OptionsCatalog[]) {
    let time = 0;
    let fetches = 0;
    const cacheObject = new CatalogCache(
      async () => {
        const next = catalogs[Math.min(fetches, catalogs.length - 1)];
        fetches++;
        if (!next) throw new Error('no catalog');
        return next;
      },
      { maxAgeMs: 1_000, now: () => time },
    );
    return { cache: cacheObject, advance: (ms: number) => (time += ms), fetches: () => fetches };
  }

  it('a check is made once per revision and reused while the catalog is fresh', async () => {
    const { cache: c, fetches } = cache([CATALOG]);
    const first = await c.check('normal', { hair: ['long'] });
    const second = await c.check('normal', { hair: ['long'] });
    expect(first.issues).toEqual([]);
    expect(second).toBe(first);
    expect(fetches()).toBe(1);
    expect(c.revision).toBe('rev-1');
  });

  it('when a refetch shows a new config_revision, cached checks are dropped and stale keys are refused', async () => {
    const { cache: c, advance, fetches } = cache([CATALOG, revision2]);
    expect((await c.check('normal', { hair: ['long'] })).issues).toEqual([]);
    advance(1_001);
    const after = await c.check('normal', { hair: ['long'] });
    expect(fetches()).toBe(2);
    expect(c.revision).toBe('rev-2');
    expect(after.issues[0]?.message).toContain('"long"');
  });

  it('refresh() tells whether config_revision moved; an unchanged revision keeps the cached checks', async () => {
    const { cache: c } = cache([CATALOG, CATALOG, revision2]);
    const first = await c.check('normal', { hair: ['short'] });
    expect((await c.refresh()).changed).toBe(false);
    expect(await c.check('normal', { hair: ['short'] })).toBe(first);
    expect((await c.refresh()).changed).toBe(true);
    expect(await c.check('normal', { hair: ['short'] })).not.toBe(first);
  });
});

describe('§4.3 options catalog: GET {base_url}/models/{vendor}/ai-influencer/options', () => {
  it('is fetched without authentication and parsed', async () => {
    const { agent, client, calls } = harness();
    agent.get(BASE).intercept({ path: '/models/vendor/ai-influencer/options', method: 'GET' }).reply(200, CATALOG);
    expect(await client.options.fetch()).toEqual(CATALOG);
    expect(calls()).toHaveLength(1);
    expect(header(calls()[0], 'authorization')).toBeUndefined();
    expect(header(calls()[0], 'hf-secret')).toBeUndefined();
  });

  it('works without any credentials configured', async () => {
    const { agent, client } = harness({ credentials: undefined });
    agent.get(BASE).intercept({ path: '/models/vendor/ai-influencer/options' }).reply(200, CATALOG);
    expect((await client.options.fetch()).config_revision).toBe('rev-1');
  });

  it('a 404 means the model is hidden or unavailable: model_unavailable', async () => {
    const { agent, client } = harness();
    agent.get(BASE).intercept({ path: '/models/vendor/ai-influencer/options' }).reply(404, { detail: 'Not Found' });
    const error = await rejection(client.options.fetch());
    expect(error.code).toBe('model_unavailable');
    expect(error.message).toMatch(/hidden or unavailable/);
  });

  it('the client cache uses the endpoint', async () => {
    const { agent, client } = harness({ vendor: 'acme' });
    agent.get(BASE).intercept({ path: '/models/acme/ai-influencer/options' }).reply(200, CATALOG);
    const result = await client.catalog.check('normal', { hair: ['curly', 'short'] });
    expect(result.normalized).toEqual({ hair: ['short', 'curly'] });
  });

  it('a malformed catalog is a protocol error', async () => {
    const { agent, client } = harness();
    agent
      .get(BASE)
      .intercept({ path: '/models/vendor/ai-influencer/options' })
      .reply(200, { config_revision: 'x', categories: [{ key: 'hair' }] });
    expect((await rejection(client.options.fetch())).code).toBe('protocol');
  });

  it('InvalidInputError is the shape used for selection refusals', () => {
    const error = new InvalidInputError('character-sheet selection', check('normal', { wings: ['x'] }).issues);
    expect(error.code).toBe('invalid_input');
  });
});
