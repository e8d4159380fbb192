/**
 * The character-sheet options catalog the emulator serves (§2.5, §4.3): 16 categories over human
 * and animal tiers, with shared keys (`eyes`, `accessories`, `expression` exist once for humans and
 * once for animals), tier-restricted options, facial slots, exclusive options, null previews and
 * swatch colors. Also the hidden trait catalog that trait_variants are checked against (§4.2), and
 * the insect species that pinned_species may name.
 */
import type { OptionsCatalog } from '../api/wire.js';

const HUMAN = ['normal', 'freak', 'total'];
const ANIMAL = ['insects', 'frogs', 'cats', 'dogs', 'capybaras', 'birds'];
const ALL = [...HUMAN, ...ANIMAL];

interface Opt {
  [extra: string]: unknown;
  key: string;
  label: string;
  img: string | null;
  color: string | null;
  tiers: string[] | null;
  slot: string | null;
  exclusive: boolean;
}

const title = (key: string): string =>
  key
    .replace(/^(pr|an)_/, '')
    .split('_')
    .map((w) => w.charAt(0).toUpperCase() + w.slice(1))
    .join(' ');
const img = (category: string, key: string): string => `https://cdn.example.invalid/catalog/${category}/${key}.webp`;

/** An option with a preview image, no color, any tier of its category, no slot, not exclusive. */
function o(category: string, key: string, extra: Partial<Opt> = {}): Opt {
  return { key, label: title(key), img: img(category, key), color: null, tiers: null, slot: null, exclusive: false, ...extra };
}

function swatches(category: string, colors: Record<string, string>): Opt[] {
  return Object.entries(colors).map(([key, color]) => o(category, key, { img: null, color }));
}

interface Cat {
  [extra: string]: unknown;
  key: string;
  label: string;
  tiers: string[];
  max: number;
  options: Opt[];
}

/** Options that disappear when the revision is bumped (so stale cached keys are refused, rule 6). */
export const RETIRED_ON_BUMP: ReadonlyMap<string, string> = new Map([
  ['hair_style', 'mullet_classic'],
  ['an_accessories', 'an_bell_collar'],
]);

export function buildCatalogCategories(): Cat[] {
  return [
    {
      key: 'body_type',
      label: 'Body type',
      tiers: HUMAN,
      max: 1,
      options: ['slim', 'average', 'athletic', 'curvy', 'muscular', 'heavy'].map((k) => o('body_type', k)),
    },
    {
      key: 'skin_tone',
      label: 'Skin tone',
      tiers: HUMAN,
      max: 1,
      options: [
        ...swatches('skin_tone', {
          porcelain: '#F6E0D2',
          fair: '#EBC8B0',
          olive: '#C69C72',
          tan: '#A87B51',
          brown: '#7B5236',
          deep: '#4A2F1F',
        }),
        o('skin_tone', 'green_alien', { img: null, color: '#6FBF5A', tiers: ['freak', 'total'] }),
        o('skin_tone', 'chrome', { img: null, color: '#C0C6CC', tiers: ['total'] }),
      ],
    },
    {
      key: 'hair_style',
      label: 'Hair style',
      tiers: HUMAN,
      max: 1,
      options: [
        o('hair_style', 'bald', { exclusive: true }),
        ...['buzz_cut', 'bob', 'long_straight', 'long_wavy', 'curly', 'braids', 'bun', 'mohawk', 'mullet_classic'].map((k) =>
          o('hair_style', k),
        ),
        o('hair_style', 'tentacle_hair', { tiers: ['freak', 'total'] }),
        o('hair_style', 'flame_hair', { tiers: ['total'], img: null }),
      ],
    },
    {
      key: 'hair_color',
      label: 'Hair color',
      tiers: HUMAN,
      max: 2,
      options: [
        ...swatches('hair_color', {
          black: '#1C1C1C',
          dark_brown: '#3B2A20',
          auburn: '#7A3B1E',
          blonde: '#E3C16F',
          red: '#B5391F',
          grey: '#9B9B9B',
          white: '#F2F2F2',
        }),
        o('hair_color', 'neon_pink', { img: null, color: '#FF3FA4', tiers: ['freak', 'total'] }),
      ],
    },
    {
      key: 'eyes',
      label: 'Eyes',
      tiers: HUMAN,
      max: 2,
      options: [
        ...['round_eyes', 'almond_eyes', 'hooded_eyes', 'monolid_eyes'].map((k) => o('eyes', k, { slot: 'eye_shape' })),
        ...swatches('eyes', { brown_iris: '#5A3A22', blue_iris: '#3A6FB0', green_iris: '#4E8A4B', grey_iris: '#8A949C' }).map((x) => ({
          ...x,
          slot: 'iris',
        })),
        o('eyes', 'cyclops_eye', { tiers: ['freak', 'total'], slot: 'eye_shape' }),
        o('eyes', 'glowing_eyes', { tiers: ['total'], slot: 'iris', color: '#F5F57A' }),
      ],
    },
    {
      key: 'face_features',
      label: 'Face features',
      tiers: HUMAN,
      max: 4,
      options: [
        o('face_features', 'button_nose', { slot: 'nose' }),
        o('face_features', 'roman_nose', { slot: 'nose' }),
        o('face_features', 'wide_nose', { slot: 'nose' }),
        o('face_features', 'full_lips', { slot: 'mouth' }),
        o('face_features', 'thin_lips', { slot: 'mouth' }),
        o('face_features', 'freckles', { img: null }),
        o('face_features', 'dimples'),
        o('face_features', 'beard', { slot: 'chin' }),
        o('face_features', 'goatee', { slot: 'chin' }),
        o('face_features', 'tusks', { tiers: ['freak', 'total'], slot: 'mouth' }),
      ],
    },
    {
      key: 'expression',
      label: 'Expression',
      tiers: HUMAN,
      max: 1,
      options: ['neutral', 'smile', 'grin', 'serious', 'surprised', 'smirk'].map((k) => o('expression', k, { slot: 'mouth' })),
    },
    {
      key: 'transformations',
      label: 'Transformations',
      tiers: ['freak', 'total'],
      max: 3,
      options: [
        o('transformations', 'pr_horns', { slot: 'forehead' }),
        o('transformations', 'pr_third_eye', { slot: 'forehead' }),
        o('transformations', 'pr_elf_ears'),
        o('transformations', 'pr_scales', { img: null }),
        o('transformations', 'pr_wings'),
        o('transformations', 'pr_tail'),
        o('transformations', 'pr_centaur', { tiers: ['total'] }),
        o('transformations', 'pr_robot_arm', { tiers: ['total'] }),
      ],
    },
    {
      key: 'clothing',
      label: 'Clothing',
      tiers: HUMAN,
      max: 3,
      options: [
        ...['tshirt', 'hoodie', 'suit', 'dress', 'jeans', 'leather_jacket', 'sneakers', 'boots', 'armor'].map((k) => o('clothing', k)),
        o('clothing', 'swimsuit_only', { exclusive: true }),
        o('clothing', 'spacesuit', { exclusive: true, tiers: ['total'] }),
      ],
    },
    {
      key: 'accessories',
      label: 'Accessories',
      tiers: HUMAN,
      max: 3,
      options: [
        o('accessories', 'no_accessories', { exclusive: true, img: null }),
        ...['glasses', 'sunglasses', 'earrings', 'necklace', 'hat', 'watch', 'backpack'].map((k) => o('accessories', k)),
        o('accessories', 'halo', { tiers: ['freak', 'total'] }),
      ],
    },
    {
      key: 'species',
      label: 'Species',
      tiers: ANIMAL,
      max: 1,
      options: [
        ...['an_beetle', 'an_mantis', 'an_moth', 'an_bee'].map((k) => o('species', k, { tiers: ['insects'] })),
        ...['an_tree_frog', 'an_bullfrog', 'an_poison_dart_frog'].map((k) => o('species', k, { tiers: ['frogs'] })),
        ...['an_tabby', 'an_siamese', 'an_maine_coon', 'an_sphynx'].map((k) => o('species', k, { tiers: ['cats'] })),
        ...['an_shiba', 'an_corgi', 'an_husky', 'an_poodle'].map((k) => o('species', k, { tiers: ['dogs'] })),
        ...['an_capybara', 'an_baby_capybara'].map((k) => o('species', k, { tiers: ['capybaras'] })),
        ...['an_parrot', 'an_owl', 'an_penguin', 'an_flamingo'].map((k) => o('species', k, { tiers: ['birds'] })),
      ],
    },
    {
      key: 'pattern',
      label: 'Pattern',
      tiers: ANIMAL,
      max: 2,
      options: [
        o('pattern', 'an_plain', { exclusive: true, img: null }),
        ...['an_stripes', 'an_spots', 'an_patches', 'an_gradient'].map((k) => o('pattern', k)),
        o('pattern', 'an_iridescent', { tiers: ['insects', 'birds'] }),
      ],
    },
    {
      key: 'eyes',
      label: 'Eyes',
      tiers: ANIMAL,
      max: 1,
      options: [
        ...['an_big_eyes', 'an_sleepy_eyes', 'an_sharp_eyes'].map((k) => o('eyes', k, { slot: 'eye_shape' })),
        o('eyes', 'an_compound_eyes', { tiers: ['insects'], slot: 'eye_shape' }),
      ],
    },
    {
      key: 'accessories',
      label: 'Accessories',
      tiers: ANIMAL,
      max: 2,
      options: [
        o('accessories', 'an_no_accessories', { exclusive: true, img: null }),
        ...['an_bow_tie', 'an_bandana', 'an_tiny_hat', 'an_scarf', 'an_bell_collar'].map((k) => o('accessories', k)),
        o('accessories', 'an_saddle', { tiers: ['dogs', 'capybaras'] }),
      ],
    },
    {
      key: 'expression',
      label: 'Expression',
      tiers: ANIMAL,
      max: 1,
      options: ['an_calm', 'an_happy', 'an_grumpy', 'an_curious'].map((k) => o('expression', k, { slot: 'mouth' })),
    },
    {
      key: 'background',
      label: 'Background',
      tiers: ALL,
      max: 1,
      options: [
        ...swatches('background', { studio_white: '#FFFFFF', studio_grey: '#8C8C8C', pastel_pink: '#F7C6D9' }),
        ...['city_street', 'forest', 'beach'].map((k) => o('background', k)),
        o('background', 'pond', { tiers: ['frogs', 'insects', 'capybaras'] }),
      ],
    },
    {
      key: 'pose',
      label: 'Pose',
      tiers: ALL,
      max: 1,
      options: [
        ...['standing', 'walking', 'sitting', 'arms_crossed'].map((k) => o('pose', k)),
        o('pose', 'flying', { tiers: ['birds', 'insects'] }),
        o('pose', 'hands_on_hips', { tiers: HUMAN }),
      ],
    },
  ];
}

/**
 * The hidden trait catalog (§4.2 trait_variants): which selected option keys accept a variant, and
 * how many variants each really has. General ids are original and v1..v5 (pr_centaur v1..v10), but
 * the current catalog does not have all of them for every trait.
 */
export const TRAIT_VARIANT_COUNTS: ReadonlyMap<string, number> = new Map([
  ['pr_horns', 5],
  ['pr_third_eye', 3],
  ['pr_elf_ears', 5],
  ['pr_scales', 4],
  ['pr_wings', 5],
  ['pr_tail', 2],
  ['pr_centaur', 10],
  ['pr_robot_arm', 5],
  ['tentacle_hair', 3],
  ['tusks', 2],
]);

/** Insect species ids accepted by pinned_species (tier insects only). */
export const INSECT_SPECIES: readonly string[] = [
  'ant',
  'bee',
  'beetle',
  'butterfly',
  'dragonfly',
  'firefly',
  'grasshopper',
  'ladybug',
  'mantis',
  'moth',
  'stick_insect',
  'wasp',
];

/** Animal species the variation cycle runs through, per animal tier (§4.2 animal variation rules). */
export const SPECIES_CYCLES: Readonly<Record<string, readonly string[]>> = {
  insects: INSECT_SPECIES,
  frogs: ['tree_frog', 'bullfrog', 'poison_dart_frog', 'glass_frog'],
  cats: ['tabby', 'siamese', 'maine_coon', 'sphynx', 'bengal'],
  dogs: ['shiba', 'corgi', 'husky', 'poodle', 'beagle'],
  capybaras: ['capybara', 'baby_capybara', 'spa_capybara'],
  birds: ['parrot', 'owl', 'penguin', 'flamingo', 'toucan'],
};

export const INITIAL_REVISION = 7;

/** The catalog at a revision: from INITIAL_REVISION on, each bump retires the RETIRED_ON_BUMP options. */
export function catalogAt(revision: number): OptionsCatalog {
  const categories = buildCatalogCategories();
  if (revision > INITIAL_REVISION) {
    for (const c of categories) {
      const retired = RETIRED_ON_BUMP.get(c.key) ?? RETIRED_ON_BUMP.get(`an_${c.key}`);
      c.options = c.options.filter((opt) => opt.key !== retired);
    }
  }
  return { config_revision: `appearance-2025.${revision}`, categories };
}
