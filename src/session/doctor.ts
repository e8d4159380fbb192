/**
 * `genpipe doctor`: checks a setup before the night, spending nothing. Each check runs in parallel
 * with the others, within its own deadline, and ends in one line: ok, failed (one sentence), or a
 * note for what cannot be checked without spending (legacy-platform credentials).
 *
 * - main-API credentials: `GET /requests/<random uuid>/status`. 404 means the key was accepted (no
 *   such request), 401 that it was refused (spec §4.1, §5);
 * - each service address (base, platform, CDN): any HTTP answer means reachable;
 * - the catalogs the manifest needs (options catalog, presets), read as a run would read them;
 * - Redis (`--redis`): a connection and a PING;
 * - each storage sink: its preflight, which writes a small probe object under the prefix and removes it;
 * - each notify target: its URL and its host's name resolve; with `--send-test`, one test message.
 */
import { randomUUID } from 'node:crypto';
import { lookup } from 'node:dns/promises';
import { request } from 'undici';
import { GenerationClient } from '../api/client.js';
import { resolveConfig, type ClientConfig, type ConfigFlags } from '../api/config.js';
import { GenpipeError } from '../api/errors.js';
import type { RedisTarget } from '../fleet/redis.js';
import type { LoadedManifest } from '../manifest/load.js';
import { catalogFieldSet } from '../models/registry.js';
import { resolveNotifyTargets, type ResolvedTarget } from '../notify/notify-targets.js';
import { emptyCounts } from '../run/events.js';

export type CheckStatus = 'ok' | 'failed' | 'note';

export interface CheckResult {
  name: string;
  status: CheckStatus;
  /** One sentence. */
  message: string;
  durationMs: number;
}

export interface DoctorInput {
  flags: ConfigFlags;
  env: NodeJS.ProcessEnv;
  /** The manifest, loaded; or why it could not be (one failed check). */
  manifest?: { loaded: LoadedManifest } | { problem: string } | undefined;
  redis?: RedisTarget | undefined;
  /** Extra notify URLs (`--notify`), with the manifest's. */
  notify: readonly string[];
  sendTest: boolean;
  /** Each check's deadline. */
  timeoutMs: number;
  signal: AbortSignal;
}

/** What one check does; it throws (a GenpipeError, best) to fail with that sentence. */
type Probe = (signal: AbortSignal) => Promise<{ status?: CheckStatus; message: string }>;

interface Planned {
  name: string;
  probe: Probe;
}

/** Every check of the setup, run at once; in the order they are listed. */
export async function runDoctor(input: DoctorInput): Promise<CheckResult[]> {
  const planned: Planned[] = [];
  let config: ClientConfig | undefined;
  try {
    config = resolveConfig({ flags: input.flags, env: input.env, requireCredentials: false });
  } catch (error) {
    planned.push({ name: 'configuration', probe: () => Promise.reject(error) });
  }
  if (config) planned.push(...serviceChecks(config, input));
  const loaded = input.manifest && 'loaded' in input.manifest ? input.manifest.loaded : undefined;
  if (input.manifest && 'problem' in input.manifest) {
    const problem = input.manifest.problem;
    planned.push({ name: 'manifest', probe: () => Promise.reject(new Error(problem)) });
  }
  if (loaded && config) planned.push(...catalogChecks(loaded, config, input));
  if (input.redis) planned.push(redisCheck(input.redis, input.timeoutMs));
  if (loaded) planned.push(...(await sinkChecks(loaded, input)));
  planned.push(...notifyChecks(loaded, input));
  planned.push({
    name: 'legacy platform credentials',
    probe: async () => ({
      status: 'note',
      message: 'not checked: the legacy platform has no request that checks them without starting a job set, which spends credits',
    }),
  });
  return Promise.all(planned.map((p) => runCheck(p, input.timeoutMs, input.signal)));
}

/** One check within its deadline: a probe that does not end in time fails with that sentence. */
async function runCheck(planned: Planned, timeoutMs: number, outer: AbortSignal): Promise<CheckResult> {
  const started = Date.now();
  const controller = new AbortController();
  const signal = AbortSignal.any([controller.signal, outer]);
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      controller.abort();
      reject(new Error(`no answer within ${Math.round(timeoutMs / 100) / 10} s`));
    }, timeoutMs);
  });
  try {
    const { status = 'ok', message } = await Promise.race([planned.probe(signal), deadline]);
    return { name: planned.name, status, message, durationMs: Date.now() - started };
  } catch (error) {
    return { name: planned.name, status: 'failed', message: sentenceOf(error), durationMs: Date.now() - started };
  } finally {
    clearTimeout(timer);
  }
}

const sentenceOf = (error: unknown): string => {
  const text = error instanceof Error ? error.message : String(error);
  return text.replace(/\s+/g, ' ').trim().replace(/[.]$/, '');
};

/** A client that tries once, with the check's deadline on every phase: a doctor reports, it does not wait out retries. */
function quickClient(config: ClientConfig, timeoutMs: number): GenerationClient {
  return new GenerationClient({
    ...config,
    timeouts: { connectMs: timeoutMs, headersMs: timeoutMs, bodyMs: timeoutMs },
    retry: { ...config.retry, maxAttempts: 1 },
  });
}

/** The credentials, then each distinct service address. */
function serviceChecks(config: ClientConfig, input: DoctorInput): Planned[] {
  const checks: Planned[] = [
    {
      name: `main API credentials (${config.baseUrl})`,
      probe: async (signal) => {
        if (!config.credentials) throw new Error('no credentials are set: set HF_KEY=key_id:key_secret, or pass --credentials FILE');
        const client = quickClient(config, input.timeoutMs);
        try {
          await client.requests.status(randomUUID(), { signal });
          return { message: 'accepted' };
        } catch (error) {
          if (error instanceof GenpipeError && error.code === 'not_found')
            return { message: 'accepted: the status of a random request id answered 404 (not found), not 401' };
          if (error instanceof GenpipeError && error.code === 'unauthorized')
            throw new Error('refused: the main API answered 401; check the key id and secret (HF_KEY or --credentials)');
          throw error;
        } finally {
          await client.close();
        }
      },
    },
  ];
  const addresses = new Map<string, string[]>();
  for (const [what, url] of [
    ['main API', config.baseUrl],
    ['platform', config.platformUrl],
    ['agent media', config.cdnUrl],
  ] as const) {
    const origin = new URL(url).origin;
    addresses.set(origin, [...(addresses.get(origin) ?? []), what]);
  }
  for (const [origin, names] of addresses) {
    checks.push({ name: `reachable: ${names.join(', ')} (${origin})`, probe: (signal) => reach(origin, signal) });
  }
  return checks;
}

/** Any HTTP answer from the address's root: the address is reachable (no credential is sent). */
async function reach(origin: string, signal: AbortSignal): Promise<{ message: string }> {
  try {
    const answer = await request(origin, { method: 'GET', signal });
    await answer.body.dump();
    return { message: `answered (HTTP ${answer.statusCode})` };
  } catch (error) {
    if (signal.aborted) throw error;
    const code = (error as NodeJS.ErrnoException).code ?? (error as { cause?: NodeJS.ErrnoException }).cause?.code;
    throw new Error(`cannot be reached (${code ?? sentenceOf(error)})`);
  }
}

/** The options catalog and the preset catalog, when a step of the manifest reads them. */
function catalogChecks(loaded: LoadedManifest, config: ClientConfig, input: DoctorInput): Planned[] {
  const steps = Object.values(loaded.manifest.steps);
  const checks: Planned[] = [];
  if (steps.some((s) => catalogFieldSet(s.model, s.input) !== undefined)) {
    checks.push({
      name: 'catalog: character-sheet options',
      probe: async (signal) => {
        const client = quickClient(config, input.timeoutMs);
        try {
          const catalog = await client.options.fetch({ signal });
          return { message: `read: revision ${String(catalog.config_revision)}, ${catalog.categories.length} categories` };
        } finally {
          await client.close();
        }
      },
    });
  }
  const readsPresets = steps.some((s) => Object.values(s.matrix ?? {}).some((a) => !Array.isArray(a) && 'presets' in a));
  if (readsPresets) {
    checks.push({
      name: 'catalog: marketing presets',
      probe: async (signal) => {
        if (!config.credentials) throw new Error('reading the preset catalog needs credentials, and none are set');
        const client = quickClient(config, input.timeoutMs);
        try {
          let count = 0;
          for await (const _ of client.marketingImage.presets({ signal })) count++;
          return { message: `read: ${count} visible preset${count === 1 ? '' : 's'}` };
        } finally {
          await client.close();
        }
      },
    });
  }
  return checks;
}

function redisCheck(target: RedisTarget, timeoutMs: number): Planned {
  return {
    name: `Redis (${target.shown})`,
    probe: async (signal) => {
      const { checkRedis } = await import('../fleet/redis.js');
      await checkRedis(target, timeoutMs, signal);
      return { message: 'answered PING' };
    },
  };
}

/** One check per distinct sink of the manifest: its preflight writes a probe object under the prefix and removes it. */
async function sinkChecks(loaded: LoadedManifest, input: DoctorInput): Promise<Planned[]> {
  const { manifestHasSink, resolveStepSinks, sinkUri } = await import('../sink/sink-config.js');
  if (!manifestHasSink(loaded)) return [];
  let configs: Awaited<ReturnType<typeof resolveStepSinks>>;
  try {
    configs = resolveStepSinks(loaded, { id: 'doctor', startedAt: new Date() }, input.env);
  } catch (error) {
    return [{ name: 'storage sinks', probe: () => Promise.reject(error) }];
  }
  const steps = new Map<typeof configs extends Map<string, infer C> ? C : never, string[]>();
  for (const [step, config] of configs) steps.set(config, [...(steps.get(config) ?? []), step]);
  return [...steps].map(([config, ids]) => ({
    name: `storage sink ${sinkUri(config, config.prefix)} (step${ids.length === 1 ? '' : 's'} ${ids.join(', ')})`,
    probe: async (signal) => {
      const { S3Store } = await import('../sink/s3-store.js');
      const store = await S3Store.open(config);
      try {
        const problem = await store.preflight(signal);
        if (problem) throw problem;
        return { message: 'writable: a probe object was written under the prefix and removed' };
      } finally {
        store.close();
      }
    },
  }));
}

/** Each notify target: its URL is valid and its host resolves; with `--send-test`, one test message is delivered. */
function notifyChecks(loaded: LoadedManifest | undefined, input: DoctorInput): Planned[] {
  let targets: ResolvedTarget[];
  try {
    targets = resolveTargets(loaded, input);
  } catch (error) {
    return [{ name: 'notify targets', probe: () => Promise.reject(error) }];
  }
  return targets.map((target) => ({
    name: `notify ${target.label}`,
    probe: async (signal) => {
      const host = new URL(target.url).hostname.replace(/^\[|\]$/g, '');
      try {
        await lookup(host);
      } catch (error) {
        throw new Error(`the host ${host} does not resolve (${(error as NodeJS.ErrnoException).code ?? 'unknown error'})`);
      }
      if (signal.aborted) throw new Error('stopped');
      if (!input.sendTest) return { message: `a valid URL; ${host} resolves; nothing was sent (--send-test sends a test message)` };
      return { message: await sendTest(target, loaded?.manifest.name ?? 'genpipe', input.timeoutMs) };
    },
  }));
}

function resolveTargets(loaded: LoadedManifest | undefined, input: DoctorInput): ResolvedTarget[] {
  // Resolved as a run resolves them (an http:// URL to another host, a url_env unset: refused alike).
  const none = { manifest: { notify: [] }, source: undefined } as unknown as Pick<LoadedManifest, 'manifest' | 'source'>;
  return resolveNotifyTargets(loaded ?? none, input.notify, input.env);
}

/** One test message, marked as one, to one target: delivered or the sentence why not. */
async function sendTest(target: ResolvedTarget, pipeline: string, timeoutMs: number): Promise<string> {
  const { deliverNotifications } = await import('../notify/deliver.js');
  const [result] = await deliverNotifications(
    [{ ...target, events: new Set(['finish']) }],
    {
      event: 'finish',
      pipeline,
      run_id: 'doctor-test',
      outcome: 'test',
      exit_code: 0,
      message: 'genpipe doctor: a test message; no run happened and nothing was spent.',
      counts: emptyCounts(),
      spend_usd: { estimated: 0, refunded: 0, net: 0, unknown: 0, unpriced_instances: 0 },
      duration_s: 0,
      run_dir: '',
      host: '',
      gallery: '',
      report: '',
    },
    { retryDelaysMs: [], deadlineMs: timeoutMs },
  );
  if (!result?.delivered) throw new Error(`the test message was not delivered: ${result?.error ?? 'no answer'}`);
  return `a test message was delivered (HTTP ${result.status ?? '?'})`;
}

/** `ok      name: message`: one line per check. */
export function checkLine(check: CheckResult): string {
  return `${check.status.padEnd(7)}${check.name}: ${check.message}.`;
}
