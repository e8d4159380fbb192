/**
 * `startEmulator(options)`: the whole Generation Service on one loopback origin. Base API, platform
 * API, agent API and CDN share it; `/_emulator/*` holds the ledger and inspection endpoints.
 */
import type { AddressInfo } from 'node:net';
import { DEFAULT_ACCOUNT, type AccountSpec } from './accounts.js';
import { AgentService, DEFAULT_AGENT_OPTIONS, type AgentOptions } from './agent.js';
import { Cdn } from './cdn.js';
import { CharacterSheetModel } from './character-sheet.js';
import { FAULT_PROFILES, FaultEngine, loadFaultProfile, type FaultProfile, type ForcedFault, type RouteClass } from './faults.js';
import { IdempotencyStore } from './idempotency.js';
import { ImageInputs } from './image-inputs.js';
import { inspectionRoutes } from './inspection.js';
import { LegacyPlatform } from './legacy.js';
import { Ledger } from './ledger.js';
import { MarketingImageModel } from './marketing-image.js';
import { MAX_UPLOAD_BYTES, MediaStore } from './media.js';
import type { ModelId } from './models.js';
import { CatalogState } from './options-catalog.js';
import { PresetCatalog } from './presets.js';
import { Rng } from './prng.js';
import { RequestRoutes } from './request-routes.js';
import { RequestStore, type OutcomeRates } from './request-store.js';
import { Router, type Route } from './router.js';
import { Scheduler } from './scheduler.js';
import { createEmulatorServer } from './server.js';
import { SoulStandardModel } from './soul-standard.js';
import { StateJournal, type StateEvent } from './state-journal.js';
import { Stats } from './stats.js';
import { SubmitGate, type WebhookPolicy } from './submit.js';
import type { Urls } from './urls.js';
import { DEFAULT_WEBHOOK_TIMINGS, WebhookDispatcher, type WebhookTimings } from './webhooks.js';

/** A true-size video's bytes by default: over the sink's multipart threshold. */
export const DEFAULT_VIDEO_BYTES = 20 * 1024 * 1024;

export interface EmulatorOptions {
  /** Default 0 (any free port). */
  port?: number;
  /** Default 127.0.0.1; anything else must be asked for explicitly. */
  host?: string;
  /** Multiplies every service duration (queue, run, agent steps, webhook backoff and window). 0 = instant. Default 1. */
  timeScale?: number;
  /** Seed of every random choice. Default 1. */
  seed?: number;
  /** A profile name, a fault file path, or a profile. Default none. */
  faults?: string | FaultProfile;
  /** Accounts; default the one default account. */
  accounts?: readonly AccountSpec[];
  /** Credits per US$. Default 100. */
  creditsPerUsd?: number;
  /** The `{vendor}` path segment. Default `vendor`. */
  vendor?: string;
  /** Sent as X-Webhook-Secret-Key on hf_webhook deliveries. */
  webhookSecret?: string;
  /** Allow webhook URLs that are not loopback. Default false. */
  allowExternalWebhooks?: boolean;
  /** Address put into status_url, cancel_url and output URLs instead of the listening one. */
  publicUrl?: string;
  /** How long Idempotency-Keys are remembered, ms (not scaled). Default 24 hours. */
  idempotencyRetentionMs?: number;
  /** Share of requests that fail / end nsfw. Default 0 each. */
  failureRate?: number;
  nsfwRate?: number;
  modelRates?: Partial<Record<ModelId, Partial<OutcomeRates>>>;
  /** Override the per-model duration distributions (service ms, before scaling). */
  durations?: Partial<Record<ModelId, { queuedMs?: readonly [number, number]; runMs?: readonly [number, number] }>>;
  agent?: Partial<AgentOptions>;
  webhookTimings?: Partial<WebhookTimings>;
  /**
   * Image URLs the emulator cannot reach (neither loopback nor its own): refused as unreachable when
   * true; when false (the default) accepted as an offline stand-in, checked by extension only.
   */
  strictImageUrls?: boolean;
  /**
   * Serve outputs at their true sizes: sheets 2048 × 1152 (2K, 16:9), marketing images 1024, 2048 or
   * 4096 on the long side by resolution and aspect ratio, Soul at width_and_height, videos of
   * `videoBytes`. Default false: small drawings (160 px on the long side), tiny video placeholders.
   */
  trueSizes?: boolean;
  /** Bytes of a video output with true sizes on. Default 20 MB (20 × 1024 × 1024). */
  videoBytes?: number;
  /** Where internal errors are logged. Default stderr. */
  log?: (line: string) => void;
  /**
   * `--state DIR`: requests, job sets, the ledger and Idempotency-Key records are kept in this
   * directory and restored at start, so the emulator can restart (as a service does on a deploy)
   * under a run that is still following its requests. Default none (memory only).
   */
  stateDir?: string;
}

export interface Emulator {
  /** `http://HOST:PORT`, the base, platform and CDN address alike. */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  readonly seed: number;
  readonly timeScale: number;
  readonly ledger: Ledger;
  readonly requests: RequestStore;
  readonly stats: Stats;
  readonly faults: FaultEngine;
  readonly catalog: CatalogState;
  readonly presets: PresetCatalog;
  readonly agent: AgentService;
  readonly media: MediaStore;
  readonly legacy: LegacyPlatform;
  readonly webhooks: WebhookDispatcher;
  /** `--state`: the directory, and what was restored from it at start. */
  readonly state: { dir: string; requests: number; ledgerEntries: number } | undefined;
  /** Replaces the fault profile at runtime. */
  setFaults(profile: string | FaultProfile): void;
  /** The next requests of a class get these faults, in order. */
  forceFaults(cls: RouteClass, ...faults: ForcedFault[]): void;
  /** Hides (404) or shows the character-sheet model's options. */
  hideOptionsModel(hidden?: boolean): void;
  /** Moves config_revision on; returns the new one. */
  bumpConfigRevision(): string | number;
  setPresetVisibility(id: string, visible: boolean): boolean;
  /** Holds every generation submit after its checks (and its Idempotency-Key claim) until released. */
  holdSubmits(): () => void;
  /** Stops every timer, webhook delivery and socket. */
  close(): Promise<void>;
}

export async function startEmulator(options: EmulatorOptions = {}): Promise<Emulator> {
  const host = options.host ?? '127.0.0.1';
  const seed = options.seed ?? 1;
  const timeScale = options.timeScale ?? 1;
  if (!(timeScale >= 0) || !Number.isFinite(timeScale)) throw new RangeError('timeScale must be a finite number >= 0');
  const vendor = options.vendor ?? 'vendor';
  if (!/^[A-Za-z0-9_-]+$/.test(vendor)) throw new RangeError('vendor must be one path segment of letters, digits, - or _');
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));

  const opened = options.stateDir !== undefined ? StateJournal.open(options.stateDir) : undefined;
  try {
    return await assemble(options, { host, seed, timeScale, vendor, log }, opened);
  } catch (error) {
    opened?.journal.close();
    throw error;
  }
}

async function assemble(
  options: EmulatorOptions,
  { host, seed, timeScale, vendor, log }: { host: string; seed: number; timeScale: number; vendor: string; log: (line: string) => void },
  opened: { journal: StateJournal; events: StateEvent[] } | undefined,
): Promise<Emulator> {
  const root = new Rng(seed);
  const scheduler = new Scheduler(timeScale);
  const ledger = new Ledger(options.accounts ?? [DEFAULT_ACCOUNT], options.creditsPerUsd ?? 100);
  const profile = typeof options.faults === 'object' ? options.faults : loadFaultProfile(options.faults ?? 'none');
  const faults = new FaultEngine(profile, root.fork());
  let origin = '';
  const publicUrl = options.publicUrl?.replace(/\/+$/, '');
  const urls: Urls = { base: () => publicUrl ?? origin, platform: () => publicUrl ?? origin, cdn: () => publicUrl ?? origin, vendor };
  const requests = new RequestStore({
    scheduler,
    rng: root.fork(),
    ledger,
    rates: { failureRate: options.failureRate ?? 0, nsfwRate: options.nsfwRate ?? 0 },
    modelRates: options.modelRates ?? {},
    durations: options.durations ?? {},
    platformUrl: urls.platform,
    cdnUrl: urls.cdn,
    trueSizes: options.trueSizes ?? false,
  });
  const stats = new Stats();
  const catalog = new CatalogState();
  const presets = new PresetCatalog(seed);
  const media = new MediaStore(ledger, urls);
  const cdn = new Cdn(requests, options.trueSizes === true ? (options.videoBytes ?? DEFAULT_VIDEO_BYTES) : 0);
  const images = new ImageInputs({
    strict: options.strictImageUrls ?? false,
    own: (url) => {
      if (url.origin !== new URL(urls.cdn()).origin && url.origin !== origin) return undefined;
      const m = /^\/cdn\/media\/([^/]+)$/.exec(url.pathname);
      if (m) return media.imageAt(decodeURIComponent(m[1] ?? ''));
      const o = /^\/cdn\/outputs\/([^/]+)\/([^/]+)$/.exec(url.pathname);
      const bytes = o ? cdn.bytesOf(decodeURIComponent(o[1] ?? ''), decodeURIComponent(o[2] ?? '')) : undefined;
      return bytes ? { bytes } : { problem: 'the image is not reachable (HTTP 404 at this URL)' };
    },
  });
  const gate = new SubmitGate();
  const webhookPolicy: WebhookPolicy = { allowExternal: options.allowExternalWebhooks ?? false, secret: options.webhookSecret };
  const webhooks = new WebhookDispatcher(scheduler, faults, requests, { ...DEFAULT_WEBHOOK_TIMINGS, ...options.webhookTimings });
  requests.onSettled((r) => webhooks.enqueue(r));
  const idempotency = new IdempotencyStore(options.idempotencyRetentionMs ?? 24 * 60 * 60 * 1000);
  const agent = new AgentService({
    ledger,
    requests,
    scheduler,
    rng: root.fork(),
    options: { ...DEFAULT_AGENT_OPTIONS, ...options.agent },
  });
  const characterSheet = new CharacterSheetModel({
    ledger,
    requests,
    catalog,
    idempotency,
    images,
    rng: root.fork(),
    gate,
    urls,
    webhooks: webhookPolicy,
  });
  const marketing = new MarketingImageModel({ ledger, requests, presets, images, rng: root.fork(), gate, webhooks: webhookPolicy });
  const legacy = new LegacyPlatform({ ledger, requests, gate, webhooks: webhookPolicy });
  const soulStandard = new SoulStandardModel({ ledger, requests, gate, webhooks: webhookPolicy });
  const requestRoutes = new RequestRoutes(ledger, requests);
  const state = opened ? restoreState(opened, { ledger, requests, idempotency, legacy }) : undefined;

  const agentMessages = '/v1/agent/sessions/:id/messages';
  const routes: Route[] = [
    // §4.1 first: it is the hot path.
    {
      method: 'GET',
      pattern: '/requests/:id/status',
      cls: 'status',
      handler: (i) => requestRoutes.status(i),
      foreign: (i) => requestRoutes.foreignStatus(i),
    },
    { method: 'POST', pattern: '/requests/:id/cancel', cls: 'status', handler: (i) => requestRoutes.cancel(i) },
    { method: 'POST', pattern: `/${vendor}/ai-influencer`, cls: 'submit', handler: (i) => characterSheet.submit(i) },
    { method: 'GET', pattern: `/models/${vendor}/ai-influencer/options`, cls: 'status', handler: () => catalog.handle() },
    { method: 'POST', pattern: '/marketing-studio/image/sunburst', cls: 'submit', handler: (i) => marketing.submit(i) },
    { method: 'GET', pattern: '/marketing-studio/image/presets', cls: 'status', handler: (i) => presets.handle(ledger, i) },
    { method: 'POST', pattern: '/v1/agent/sessions', cls: 'agent', handler: (i) => agent.createSession(i) },
    { method: 'POST', pattern: agentMessages, cls: 'agent', handler: (i) => agent.sendMessage(i) },
    { method: 'GET', pattern: agentMessages, cls: 'agent', handler: (i) => agent.listMessages(i) },
    { method: 'POST', pattern: '/v1/agent/sessions/:id/interrupt', cls: 'agent', handler: (i) => agent.interrupt(i) },
    { method: 'POST', pattern: '/v1/agent/media', cls: 'media', handler: (i) => media.create(i) },
    { method: 'POST', pattern: '/v1/agent/media/:id/confirm', cls: 'media', handler: (i) => media.confirm(i) },
    { method: 'PUT', pattern: '/cdn/upload/:id', cls: 'media', handler: (i) => media.put(i), maxBody: MAX_UPLOAD_BYTES },
    { method: 'GET', pattern: '/cdn/media/:id', cls: 'cdn', handler: (i) => media.serve(i) },
    { method: 'GET', pattern: '/cdn/outputs/:id/:file', cls: 'cdn', handler: (i) => cdn.serve(i) },
    { method: 'POST', pattern: '/v1/image2video/dop', cls: 'submit', handler: (i) => legacy.dop(i) },
    { method: 'POST', pattern: '/v1/text2image/soul', cls: 'submit', handler: (i) => legacy.soul(i) },
    { method: 'POST', pattern: `/v1/speak/${vendor}`, cls: 'submit', handler: (i) => legacy.speak(i) },
    { method: 'GET', pattern: '/v1/job-sets/:id', cls: 'status', handler: (i) => legacy.get(i), foreign: (i) => legacy.foreignGet(i) },
    { method: 'POST', pattern: `/${vendor}-ai/soul/standard`, cls: 'submit', handler: (i) => soulStandard.submit(i) },
    ...inspectionRoutes({ ledger, requests, stats, faults, webhooks, catalog, presets, agent }),
  ];
  const router = new Router(routes);
  const server = createEmulatorServer({ router, faults, stats, scheduler, backendFaultRoutes: new Set([`POST ${agentMessages}`]), log });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const urlHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  origin = `http://${urlHost}:${address.port}`;
  // Restored requests settle (and send their webhooks) once the addresses in their payloads are known.
  if (opened) requests.resumeTimers();

  let closing: Promise<void> | undefined;
  return {
    url: origin,
    host: address.address,
    port: address.port,
    seed,
    timeScale,
    ledger,
    requests,
    stats,
    faults,
    catalog,
    presets,
    agent,
    media,
    legacy,
    webhooks,
    state,
    setFaults: (p) =>
      faults.set(typeof p === 'object' ? p : p in FAULT_PROFILES ? FAULT_PROFILES[p as keyof typeof FAULT_PROFILES] : loadFaultProfile(p)),
    forceFaults: (cls, ...f) => faults.force(cls, ...f),
    hideOptionsModel: (hidden = true) => {
      catalog.hidden = hidden;
    },
    bumpConfigRevision: () => catalog.bumpRevision(),
    setPresetVisibility: (id, visible) => presets.setVisible(id, visible),
    holdSubmits: () => gate.hold(),
    close() {
      closing ??= new Promise<void>((resolve) => {
        scheduler.close();
        opened?.journal.close();
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closing;
    },
  };
}

/**
 * Replays the state file into the stores (nothing is written back while replaying), then lets
 * them write to it. An agent turn cut by the restart keeps no session here, so its reserve is
 * refunded in full, as a turn that errors is (§3.2).
 */
function restoreState(
  opened: { journal: StateJournal; events: StateEvent[] },
  stores: { ledger: Ledger; requests: RequestStore; idempotency: IdempotencyStore; legacy: LegacyPlatform },
): { dir: string; requests: number; ledgerEntries: number } {
  const { ledger, requests, idempotency, legacy } = stores;
  for (const event of opened.events) {
    if (event.t === 'ledger') ledger.restore(event);
    else if (event.t === 'request' || event.t === 'settle' || event.t === 'cancel') requests.restore(event);
    else if (event.t === 'idempotency') idempotency.restore(event);
    else if (event.t === 'job_set') legacy.restore(event);
  }
  const restored = { dir: opened.journal.dir, requests: requests.byId.size, ledgerEntries: ledger.entries.length };
  ledger.journal = opened.journal;
  requests.journal = opened.journal;
  idempotency.journal = opened.journal;
  const open = new Map<string, { keyId: string; micros: number }>();
  for (const e of ledger.entries) {
    if (e.message_id === undefined) continue;
    if (e.kind === 'reserve') open.set(e.message_id, { keyId: e.key_id, micros: Math.round(e.usd * 1_000_000) });
    else if (e.kind === 'refund') open.delete(e.message_id);
  }
  for (const [messageId, { keyId, micros }] of open)
    ledger.record(keyId, 'refund', micros, { messageId }, 'agent turn lost in an emulator restart: reserve refunded in full');
  return restored;
}
