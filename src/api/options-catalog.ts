/** §4.3: the character-sheet options catalog, and a cache that follows `config_revision` (§9). */
import { baseUrl, segment, type ApiContext, type CallContext } from './context.js';
import { checkSelection, type SelectionCheck } from './selection.js';
import { OptionsCatalog, type Tier } from './wire.js';

export class OptionsCatalogApi {
  constructor(private readonly ctx: ApiContext) {}

  /**
   * `GET {base_url}/models/{vendor}/ai-influencer/options`, without auth. A 404 means the model is
   * hidden or unavailable and is raised with code `model_unavailable`.
   */
  async fetch(options: CallContext = {}): Promise<OptionsCatalog> {
    const result = await this.ctx.transport.call({
      method: 'GET',
      url: baseUrl(this.ctx, `/models/${segment(this.ctx.config.vendor)}/ai-influencer/options`),
      auth: 'none',
      schema: OptionsCatalog,
      safety: { kind: 'safe' },
      endpoint: 'options-catalog',
      signal: options.signal,
    });
    return result.data;
  }
}

export interface CatalogCacheOptions {
  /** How long a fetched catalog is trusted before it is fetched again, in milliseconds. Default 5 minutes. */
  maxAgeMs?: number;
  now?: () => number;
}

/**
 * Keeps one catalog and the selection checks made against it. When a refetch shows a new
 * `config_revision`, every cached check is dropped, so stale choices are re-validated (§4.2 rule 7).
 */
export class CatalogCache {
  #catalog: OptionsCatalog | undefined;
  #fetchedAt = 0;
  #checks = new Map<string, SelectionCheck>();
  readonly #maxAgeMs: number;
  readonly #now: () => number;

  constructor(
    private readonly fetcher: (options: CallContext) => Promise<OptionsCatalog>,
    options: CatalogCacheOptions = {},
  ) {
    this.#maxAgeMs = options.maxAgeMs ?? 5 * 60_000;
    this.#now = options.now ?? Date.now;
  }

  get revision(): string | number | undefined {
    return this.#catalog?.config_revision;
  }

  /** The cached catalog, fetched again when older than maxAge. */
  async get(options: CallContext = {}): Promise<OptionsCatalog> {
    if (this.#catalog && this.#now() - this.#fetchedAt < this.#maxAgeMs) return this.#catalog;
    return (await this.refresh(options)).catalog;
  }

  /** Fetches the catalog now; `changed` tells whether config_revision moved. */
  async refresh(options: CallContext = {}): Promise<{ catalog: OptionsCatalog; changed: boolean }> {
    const catalog = await this.fetcher(options);
    const changed = this.#catalog !== undefined && this.#catalog.config_revision !== catalog.config_revision;
    if (changed || this.#catalog === undefined) this.#checks.clear();
    this.#catalog = catalog;
    this.#fetchedAt = this.#now();
    return { catalog, changed };
  }

  /** Checks a selection against the current catalog, remembering the answer for this revision. */
  async check(tier: Tier, selection: Record<string, readonly string[]>, options: CallContext = {}): Promise<SelectionCheck> {
    const catalog = await this.get(options);
    const key = `${tier}\u0000${JSON.stringify(selection)}`;
    let check = this.#checks.get(key);
    if (!check) {
      check = checkSelection(catalog, tier, selection);
      this.#checks.set(key, check);
    }
    return check;
  }
}
