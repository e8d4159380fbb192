/** §4.3: the options catalog endpoint, with runtime switches to hide the model and bump the revision. */
import type { OptionsCatalog } from '../api/wire.js';
import { HttpError, type EmuResponse } from './http-util.js';
import { catalogAt, INITIAL_REVISION } from './options-catalog-data.js';

export class CatalogState {
  #revision = INITIAL_REVISION;
  #catalog: OptionsCatalog = catalogAt(INITIAL_REVISION);
  #body: string = JSON.stringify(this.#catalog);
  /** When true the model is hidden: the options endpoint answers 404 (§7). */
  hidden = false;

  get catalog(): OptionsCatalog {
    return this.#catalog;
  }

  /** Moves config_revision on; the options in RETIRED_ON_BUMP leave the catalog. Returns the new revision. */
  bumpRevision(): string | number {
    this.#revision++;
    this.#catalog = catalogAt(this.#revision);
    this.#body = JSON.stringify(this.#catalog);
    return this.#catalog.config_revision;
  }

  handle(): EmuResponse {
    if (this.hidden) throw new HttpError(404, 'the character-sheet model is hidden or unavailable in the public catalog');
    return { status: 200, bytes: Buffer.from(this.#body), headers: { 'content-type': 'application/json' } };
  }
}
