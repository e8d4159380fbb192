/** The typed client for the whole Generation Service API: one object, one transport. */
import type { Dispatcher } from 'undici';
import { AgentApi } from './agent.js';
import { CharacterSheetApi } from './character-sheet.js';
import type { ClientConfig } from './config.js';
import type { ApiContext } from './context.js';
import { LegacyApi } from './legacy.js';
import { MarketingImageApi } from './marketing-image.js';
import { MediaApi } from './media.js';
import { CatalogCache, OptionsCatalogApi } from './options-catalog.js';
import { RequestsApi } from './requests.js';
import { recordServiceOrigins } from './service-origins.js';
import { SoulStandardApi } from './soul-standard.js';
import { Transport, type ExchangeEvent } from './transport.js';

export interface GenerationClientOptions {
  /**
   * Injected undici dispatcher; a keep-alive Agent is created (and closed) when omitted. The created
   * one refuses connections to local or private addresses other than the service's origins, by
   * name too (connect-guard.ts); an injected one does so only when made by `createGuardedAgent`.
   */
  dispatcher?: Dispatcher;
  random?: () => number;
  onExchange?: (event: ExchangeEvent) => void;
}

export class GenerationClient {
  readonly config: ClientConfig;
  readonly transport: Transport;
  readonly requests: RequestsApi;
  readonly characterSheet: CharacterSheetApi;
  readonly options: OptionsCatalogApi;
  readonly catalog: CatalogCache;
  readonly marketingImage: MarketingImageApi;
  readonly agent: AgentApi;
  readonly media: MediaApi;
  readonly legacy: LegacyApi;
  readonly soulStandard: SoulStandardApi;

  constructor(config: ClientConfig, options: GenerationClientOptions = {}) {
    this.config = config;
    this.transport = new Transport({
      config,
      ...(options.dispatcher ? { dispatcher: options.dispatcher } : {}),
      ...(options.random ? { random: options.random } : {}),
      ...(options.onExchange ? { onExchange: options.onExchange } : {}),
    });
    // Downloads handed this dispatcher may reach these origins even on a local address (download.ts).
    recordServiceOrigins(this.transport.dispatcher, [config.baseUrl, config.platformUrl, config.cdnUrl]);
    const ctx: ApiContext = { config, transport: this.transport };
    this.requests = new RequestsApi(ctx);
    this.characterSheet = new CharacterSheetApi(ctx);
    this.options = new OptionsCatalogApi(ctx);
    this.catalog = new CatalogCache((o) => this.options.fetch(o));
    this.marketingImage = new MarketingImageApi(ctx);
    this.agent = new AgentApi(ctx);
    this.media = new MediaApi(ctx);
    this.legacy = new LegacyApi(ctx);
    this.soulStandard = new SoulStandardApi(ctx);
  }

  async close(): Promise<void> {
    await this.transport.close();
  }
}
