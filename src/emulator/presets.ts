/**
 * §2.6 and §4.5: the marketing preset catalog. Pages of `size` items; `cursor` (the parameter name
 * the spec does not show) is the id of the last item of the previous page, so a preset that changes
 * visibility between two pages neither shifts nor repeats the others. Only visible presets are
 * listed and usable; visibility changes at runtime.
 */
import { authKey } from './auth.js';
import { HttpError, json, type EmuResponse } from './http-util.js';
import type { Ledger } from './ledger.js';
import { Rng } from './prng.js';
import type { RouteInput } from './router.js';

export interface PresetEntry {
  id: string;
  name: string;
  /** Used when an enhanced request asks for aspect_ratio auto (§4.4). */
  aspectRatio: string;
  visible: boolean;
}

const NAMES = [
  'Summer Beach Campaign',
  'Minimal Studio White',
  'Urban Streetwear',
  'Luxury Marble',
  'Cozy Autumn Cafe',
  'Neon Night Market',
  'Fresh Kitchen Counter',
  'Mountain Adventure',
  'Pastel Flat Lay',
  'Festive Holiday Table',
  'Poolside Lifestyle',
  'Scandinavian Living Room',
  'Desert Golden Hour',
  'Tech Desk Setup',
  'Botanical Greenhouse',
  'Retro 80s Arcade',
  'Rainy City Window',
  'Spa Wellness',
  'Sports Stadium',
  'Garden Picnic',
  'Bold Color Block',
  'Moody Dark Product',
  'Kids Playroom',
  'Office Meeting',
  'Snowy Cabin',
  'Boutique Shelf',
  'Farmers Market',
  'Yoga Studio',
  'Rooftop Party',
  'Vintage Library',
];
const RATIOS = ['1:1', '4:3', '3:4', '16:9', '9:16', '3:2', '2:3', '21:9'];
/** These start hidden (not usable until made visible). */
const INITIALLY_HIDDEN = new Set([3, 11, 27]);

export const PRESET_PAGE_DEFAULT = 20;
export const PRESET_PAGE_MAX = 100;

export class PresetCatalog {
  readonly presets: PresetEntry[];

  constructor(seed: number) {
    // Its own generator: preset ids depend on the seed only, not on what else the run did.
    const rng = new Rng(seed ^ 0x5eed);
    this.presets = NAMES.map((name, i) => ({
      id: rng.uuid(),
      name,
      aspectRatio: RATIOS[i % RATIOS.length] ?? '1:1',
      visible: !INITIALLY_HIDDEN.has(i),
    }));
  }

  visible(): PresetEntry[] {
    return this.presets.filter((p) => p.visible);
  }

  /** The preset if it exists and is visible (usable). */
  usable(id: string): PresetEntry | undefined {
    return this.presets.find((p) => p.id === id && p.visible);
  }

  setVisible(id: string, visible: boolean): boolean {
    const p = this.presets.find((x) => x.id === id);
    if (!p) return false;
    p.visible = visible;
    return true;
  }

  page(size: number, cursor: string | null): { total: number; cursor: string | null; items: { id: string; type: 'ads'; name: string }[] } {
    let start = 0;
    if (cursor !== null) {
      const at = this.presets.findIndex((p) => p.id === cursor);
      if (at < 0) throw new HttpError(400, 'cursor: unknown cursor; start again without one');
      start = at + 1;
    }
    const items: PresetEntry[] = [];
    let i = start;
    for (; i < this.presets.length && items.length < size; i++) {
      const p = this.presets[i];
      if (p?.visible) items.push(p);
    }
    const more = this.presets.slice(i).some((p) => p.visible);
    const last = items[items.length - 1];
    return {
      total: this.visible().length,
      cursor: more && last ? last.id : null,
      items: items.map((p) => ({ id: p.id, type: 'ads', name: p.name })),
    };
  }

  /** `GET {base_url}/marketing-studio/image/presets?size=N[&cursor=C]`, authenticated. */
  handle(ledger: Ledger, input: RouteInput): EmuResponse {
    authKey(ledger, input.headers);
    const sizeText = input.url.searchParams.get('size');
    let size = PRESET_PAGE_DEFAULT;
    if (sizeText !== null) {
      size = Number(sizeText);
      if (!/^\d+$/.test(sizeText) || size < 1 || size > PRESET_PAGE_MAX)
        throw new HttpError(422, `size: must be an integer from 1 to ${PRESET_PAGE_MAX}`);
    }
    return json(200, this.page(size, input.url.searchParams.get('cursor')));
  }
}
