/**
 * Fault injection, per route class (submit, status, agent, media, cdn), seeded so a run with the
 * same seed draws the same faults. Profiles: `none`, `flaky`, `hostile`, or a YAML/JSON file.
 * Latencies are wall-clock (not scaled by the time scale): they model the network, not the models.
 */
import * as z from 'zod';
import { readConfigDocument } from './config-file.js';
import type { Rng } from './prng.js';

export const ROUTE_CLASSES = ['submit', 'status', 'agent', 'media', 'cdn'] as const;
export type RouteClass = (typeof ROUTE_CLASSES)[number];

export interface RouteFaults {
  /** Added before processing, milliseconds. */
  latency_ms: number;
  /** Uniform extra latency in [0, jitter_ms]. */
  jitter_ms: number;
  error_500: number;
  error_502: number;
  error_503: number;
  /** 429 with `Retry-After: retry_after_s`. */
  rate_429: number;
  retry_after_s: number;
  /** Socket destroyed before the request is processed: nothing happened. */
  reset_before: number;
  /** Socket destroyed after processing, before the response: the request exists, the client never hears of it. */
  reset_after: number;
  /**
   * Answered 502 / 504 after processing, instead of the handler's answer: the gateway failure where
   * the request was processed and charged, and the client hears only a bad gateway or a gateway
   * timeout. A keyless retry of it pays twice.
   */
  error_502_after: number;
  error_504_after: number;
  /**
   * A status or job-set GET answered about another request: another request (or job set) of the
   * same account when it has one, else the same answer under an id that is not the one asked for.
   * What a service that mixes up ids, or hands them out again after a restart, would send; a client
   * must not take it as its own. Only `GET /requests/{id}/status` and `GET /v1/job-sets/{id}` carry
   * it: the other routes of the status class never draw it, and a forced one waits for one of them.
   */
  foreign_status: number;
  /** The body is written in 4 pieces, `slow_body_chunk_ms` apart. */
  slow_body: number;
  slow_body_chunk_ms: number;
  /**
   * A true rate limit: more than this many requests of the class per second (a sliding wall-clock
   * second) from one account are answered 429 with Retry-After, before processing. 0: no limit.
   * Only requests let through count, as a service's limiter counts what it accepts.
   */
  rate_limit_per_s: number;
}

export interface WebhookFaults {
  /** A delivered webhook is delivered once more. */
  duplicate_rate: number;
  /** The first delivery waits `late_ms` (scaled by the time scale) more. */
  late_rate: number;
  late_ms: number;
}

export interface FaultProfile {
  name: string;
  routes: Record<RouteClass, RouteFaults>;
  webhooks: WebhookFaults;
}

export const NO_ROUTE_FAULTS: RouteFaults = {
  latency_ms: 0,
  jitter_ms: 0,
  error_500: 0,
  error_502: 0,
  error_503: 0,
  rate_429: 0,
  retry_after_s: 1,
  reset_before: 0,
  reset_after: 0,
  error_502_after: 0,
  error_504_after: 0,
  foreign_status: 0,
  slow_body: 0,
  slow_body_chunk_ms: 0,
  rate_limit_per_s: 0,
};

const FLAKY_ROUTE: RouteFaults = {
  latency_ms: 5,
  jitter_ms: 20,
  error_500: 0.01,
  error_502: 0.01,
  error_503: 0.01,
  rate_429: 0.02,
  retry_after_s: 1,
  reset_before: 0.01,
  reset_after: 0.01,
  error_502_after: 0,
  error_504_after: 0,
  foreign_status: 0,
  slow_body: 0.02,
  slow_body_chunk_ms: 50,
  rate_limit_per_s: 0,
};

/** reliability.md §9: 10% 5xx, 5% resets after processing, 3% 429, slow responses. */
const HOSTILE_ROUTE: RouteFaults = {
  latency_ms: 20,
  jitter_ms: 80,
  error_500: 0.03,
  error_502: 0.04,
  error_503: 0.03,
  rate_429: 0.03,
  retry_after_s: 1,
  reset_before: 0.02,
  reset_after: 0.05,
  error_502_after: 0,
  error_504_after: 0,
  foreign_status: 0,
  slow_body: 0.05,
  slow_body_chunk_ms: 100,
  rate_limit_per_s: 0,
};

const every = (f: RouteFaults): Record<RouteClass, RouteFaults> => ({
  submit: { ...f },
  status: { ...f },
  agent: { ...f },
  media: { ...f },
  cdn: { ...f },
});

export const FAULT_PROFILES: Readonly<Record<'none' | 'flaky' | 'hostile', FaultProfile>> = {
  none: { name: 'none', routes: every(NO_ROUTE_FAULTS), webhooks: { duplicate_rate: 0, late_rate: 0, late_ms: 0 } },
  flaky: { name: 'flaky', routes: every(FLAKY_ROUTE), webhooks: { duplicate_rate: 0.1, late_rate: 0.05, late_ms: 30_000 } },
  hostile: { name: 'hostile', routes: every(HOSTILE_ROUTE), webhooks: { duplicate_rate: 0.3, late_rate: 0.2, late_ms: 60_000 } },
};
export const PROFILE_NAMES = Object.keys(FAULT_PROFILES) as (keyof typeof FAULT_PROFILES)[];

const rate = z.number().min(0).max(1);
const ms = z.number().min(0).max(600_000);
export const RouteFaultsInput = z.strictObject({
  latency_ms: ms.optional(),
  jitter_ms: ms.optional(),
  error_500: rate.optional(),
  error_502: rate.optional(),
  error_503: rate.optional(),
  rate_429: rate.optional(),
  retry_after_s: z.int().min(0).max(3600).optional(),
  reset_before: rate.optional(),
  reset_after: rate.optional(),
  error_502_after: rate.optional(),
  error_504_after: rate.optional(),
  foreign_status: rate.optional(),
  slow_body: rate.optional(),
  slow_body_chunk_ms: ms.optional(),
  rate_limit_per_s: z.number().min(0).max(1_000_000).optional(),
});
export type RouteFaultsInput = z.infer<typeof RouteFaultsInput>;

/** The fault file format (YAML or JSON); every member optional. */
export const FaultFile = z.strictObject({
  extends: z.enum(['none', 'flaky', 'hostile']).optional(),
  all: RouteFaultsInput.optional(),
  submit: RouteFaultsInput.optional(),
  status: RouteFaultsInput.optional(),
  agent: RouteFaultsInput.optional(),
  media: RouteFaultsInput.optional(),
  cdn: RouteFaultsInput.optional(),
  webhooks: z.strictObject({ duplicate_rate: rate.optional(), late_rate: rate.optional(), late_ms: ms.optional() }).optional(),
});
export type FaultFile = z.infer<typeof FaultFile>;

/** Drops undefined members, so a spread keeps the base value (exactOptionalPropertyTypes). */
const defined = <T extends object>(o: T): { [K in keyof T]?: Exclude<T[K], undefined> } =>
  Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as { [K in keyof T]?: Exclude<T[K], undefined> };

/** Builds a profile from the file format: `extends` (default none), then `all`, then each class. */
export function profileFromSpec(spec: FaultFile, name = 'custom'): FaultProfile {
  const base = FAULT_PROFILES[spec.extends ?? 'none'];
  const routes = {} as Record<RouteClass, RouteFaults>;
  for (const cls of ROUTE_CLASSES) {
    routes[cls] = { ...base.routes[cls], ...defined(spec.all ?? {}), ...defined(spec[cls] ?? {}) };
  }
  return { name, routes, webhooks: { ...base.webhooks, ...defined(spec.webhooks ?? {}) } };
}

/** `--faults PROFILE|FILE`. */
export function loadFaultProfile(nameOrFile: string): FaultProfile {
  if (nameOrFile in FAULT_PROFILES) return FAULT_PROFILES[nameOrFile as keyof typeof FAULT_PROFILES];
  return profileFromSpec(readConfigDocument(nameOrFile, FaultFile, 'fault file'), nameOrFile);
}

export type ForcedFault =
  | 'reset_before'
  | 'reset_after'
  | 'error_500'
  | 'error_502'
  | 'error_503'
  | 'error_502_after'
  | 'error_504_after'
  | 'rate_429'
  | 'slow_body'
  | 'foreign_status';

/** What happens to one request. */
export interface FaultDecision {
  resetBefore: boolean;
  latencyMs: number;
  /** Answer this instead of processing (429 or 5xx). */
  status: 429 | 500 | 502 | 503 | undefined;
  retryAfterS: number;
  resetAfter: boolean;
  /** Answer this after processing, instead of the handler's answer (a gateway failure). */
  statusAfter: 502 | 504 | undefined;
  slowChunkMs: number;
  /** Answer about another request (`foreign_status`); only a route that echoes an id is given it. */
  foreign: boolean;
}

export const NO_FAULT: FaultDecision = {
  resetBefore: false,
  latencyMs: 0,
  status: undefined,
  retryAfterS: 0,
  resetAfter: false,
  statusAfter: undefined,
  slowChunkMs: 0,
  foreign: false,
};

export class FaultEngine {
  #profile: FaultProfile;
  readonly #rng: Rng;
  readonly #forced: Record<RouteClass, ForcedFault[]> = { submit: [], status: [], agent: [], media: [], cdn: [] };
  /** Faults injected so far, by class and kind (for /_emulator/stats). */
  readonly injected: Record<string, number> = {};

  /** Per class and account: the times (ms) of the requests let through in the last second. */
  readonly #windows = new Map<string, number[]>();
  readonly #now: () => number;

  constructor(profile: FaultProfile, rng: Rng, now: () => number = Date.now) {
    this.#profile = profile;
    this.#rng = rng;
    this.#now = now;
  }

  /**
   * The true rate limit (`rate_limit_per_s`): undefined when this request of `account` is let
   * through (and counted), else the seconds to put in Retry-After (when the oldest request of the
   * window leaves it, at least 1).
   */
  rateLimit(cls: RouteClass, account: string): number | undefined {
    const limit = this.#profile.routes[cls].rate_limit_per_s;
    if (!(limit > 0)) return undefined;
    const now = this.#now();
    const key = `${cls} ${account}`;
    const window = (this.#windows.get(key) ?? []).filter((t) => t > now - 1_000);
    if (window.length >= limit) {
      this.#windows.set(key, window);
      this.#count(cls, 'rate_limit');
      return Math.max(1, Math.ceil(((window[0] ?? now) + 1_000 - now) / 1_000));
    }
    window.push(now);
    this.#windows.set(key, window);
    return undefined;
  }

  get profile(): FaultProfile {
    return this.#profile;
  }

  set(profile: FaultProfile): void {
    this.#profile = profile;
  }

  /** Queues faults that hit the next requests of a class, in order, whatever the rates say. */
  force(cls: RouteClass, ...faults: ForcedFault[]): void {
    this.#forced[cls].push(...faults);
  }

  /**
   * What happens to the next request of `cls`. `echoesId`: the route answers with the id it was
   * asked about (a status or job-set GET), so it can answer about another one (`foreign_status`).
   */
  decide(cls: RouteClass, options: { echoesId?: boolean } = {}): FaultDecision {
    const queue = this.#forced[cls];
    // A forced foreign answer waits for the next request that can carry it (not a cancel or a catalog read).
    const forced = queue[0] === 'foreign_status' && options.echoesId !== true ? undefined : queue.shift();
    const f = this.#profile.routes[cls];
    if (forced === undefined && this.#profile.name === 'none') return NO_FAULT;
    const rng = this.#rng;
    const d: FaultDecision = { ...NO_FAULT, retryAfterS: f.retry_after_s };
    if (forced !== undefined) {
      // A foreign answer is counted where it is applied (noteApplied): a request refused with 404 gets none.
      if (forced === 'foreign_status') {
        d.foreign = true;
        return d;
      }
      this.#count(cls, forced);
      if (forced === 'reset_before') d.resetBefore = true;
      else if (forced === 'reset_after') d.resetAfter = true;
      else if (forced === 'slow_body') d.slowChunkMs = Math.max(1, f.slow_body_chunk_ms);
      else if (forced === 'rate_429') d.status = 429;
      else if (forced === 'error_502_after') d.statusAfter = 502;
      else if (forced === 'error_504_after') d.statusAfter = 504;
      else d.status = Number(forced.slice(6)) as 500 | 502 | 503;
      return d;
    }
    if (rng.chance(f.reset_before)) {
      this.#count(cls, 'reset_before');
      d.resetBefore = true;
      return d;
    }
    d.latencyMs = f.latency_ms + (f.jitter_ms > 0 ? rng.next() * f.jitter_ms : 0);
    if (rng.chance(f.rate_429)) d.status = 429;
    else if (rng.chance(f.error_500)) d.status = 500;
    else if (rng.chance(f.error_502)) d.status = 502;
    else if (rng.chance(f.error_503)) d.status = 503;
    if (d.status !== undefined) {
      this.#count(cls, d.status === 429 ? 'rate_429' : `error_${d.status}`);
      return d;
    }
    if (rng.chance(f.reset_after)) {
      this.#count(cls, 'reset_after');
      d.resetAfter = true;
    } else if (rng.chance(f.error_502_after)) {
      this.#count(cls, 'error_502_after');
      d.statusAfter = 502;
    } else if (rng.chance(f.error_504_after)) {
      this.#count(cls, 'error_504_after');
      d.statusAfter = 504;
    } else if (rng.chance(f.slow_body)) {
      this.#count(cls, 'slow_body');
      d.slowChunkMs = f.slow_body_chunk_ms;
    }
    // Drawn last, and only at a rate above 0, so the other faults of a seed stay where they were.
    if (options.echoesId === true && f.foreign_status > 0 && !d.resetAfter && d.statusAfter === undefined)
      d.foreign = rng.chance(f.foreign_status);
    return d;
  }

  /** Counts a fault the server applied itself (`foreign_status`, once the route answered about another request). */
  noteApplied(cls: RouteClass, kind: ForcedFault): void {
    this.#count(cls, kind);
  }

  #count(cls: RouteClass, kind: string): void {
    const key = `${cls}.${kind}`;
    this.injected[key] = (this.injected[key] ?? 0) + 1;
  }

  /** Draws webhook faults for one request: a late first delivery, and whether to deliver twice. */
  webhook(): { lateMs: number; duplicate: boolean } {
    const w = this.#profile.webhooks;
    const late = this.#rng.chance(w.late_rate);
    const duplicate = this.#rng.chance(w.duplicate_rate);
    if (late) this.injected['webhook.late'] = (this.injected['webhook.late'] ?? 0) + 1;
    if (duplicate) this.injected['webhook.duplicate'] = (this.injected['webhook.duplicate'] ?? 0) + 1;
    return { lateMs: late ? w.late_ms : 0, duplicate };
  }
}
