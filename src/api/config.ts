/**
 * Configuration is resolved once, at the boundary, into a fully defaulted `ClientConfig`
 * (house style 7). Each setting comes from, in order of precedence: a flag, an environment
 * variable, the config file, the default.
 */
import { readFileSync } from 'node:fs';
import * as z from 'zod';
import { Credentials, credentialsFromEnv, credentialsFromFile } from './credentials.js';
import { GenpipeError } from './errors.js';
import { DEFAULT_BACKOFF, DEFAULT_MAX_RETRY_AFTER_MS } from './retry.js';
import { loadYamlAs, YamlSyntaxError } from '../util/yaml-source.js';
import { isLoopbackHost } from '../util/loopback-host.js';

export interface ClientConfig {
  /** `{base_url}`: the main API address. */
  baseUrl: string;
  /** `{platform_url}`: legacy job sets, the webhook-enabled path, status and cancel URLs. Defaults to baseUrl. */
  platformUrl: string;
  /** `{cdn_url}`: hosted agent media. Defaults to baseUrl. */
  cdnUrl: string;
  /** `{vendor}`: the path segment in some model paths. Default `vendor`. */
  vendor: string;
  credentials: Credentials | undefined;
  timeouts: {
    /** TCP and TLS connect, in milliseconds. Default 10,000. */
    connectMs: number;
    /** Until the response headers arrive, in milliseconds. Default 30,000. */
    headersMs: number;
    /** Longest silence while reading a body, in milliseconds. Default 60,000. */
    bodyMs: number;
  };
  retry: {
    /** Attempts per call, the first included. Default 5. */
    maxAttempts: number;
    /** Backoff ceiling of the first retry, in milliseconds. Default 250. */
    baseMs: number;
    /** Largest backoff, in milliseconds. Default 20,000. */
    capMs: number;
    /** Largest honoured Retry-After, in milliseconds. Default 60,000. */
    maxRetryAfterMs: number;
  };
  /** Credits per US dollar, for reports. Default 100. */
  creditsPerUsd: number;
}

export const DEFAULT_VENDOR = 'vendor';

/** The config file, as written by users (snake_case, every field optional). */
export const ConfigFile = z.strictObject({
  base_url: z.url({ protocol: /^https?$/ }).optional(),
  platform_url: z.url({ protocol: /^https?$/ }).optional(),
  cdn_url: z.url({ protocol: /^https?$/ }).optional(),
  vendor: z
    .string()
    .regex(/^[A-Za-z0-9_-]+$/, 'must be one path segment of letters, digits, - or _')
    .optional(),
  credentials_file: z.string().min(1).optional(),
  timeouts: z
    .strictObject({
      connect_ms: z.int().positive().optional(),
      headers_ms: z.int().positive().optional(),
      body_ms: z.int().positive().optional(),
    })
    .optional(),
  retry: z
    .strictObject({
      max_attempts: z.int().min(1).max(20).optional(),
      base_ms: z.int().min(1).optional(),
      cap_ms: z.int().min(1).optional(),
      max_retry_after_ms: z.int().min(0).optional(),
    })
    .optional(),
  credits_per_usd: z.number().positive().optional(),
  allow_insecure_http: z.boolean().optional(),
  /** The fleet's Redis (genpipe run --redis, worker, queue, schedule), when no flag or GENPIPE_REDIS_URL names one. */
  redis_url: z
    .string()
    .regex(/^rediss?:\/\//, 'must be a redis:// or rediss:// URL')
    .optional(),
});
export type ConfigFile = z.infer<typeof ConfigFile>;

/** Flags that override the environment and the config file. */
export interface ConfigFlags {
  config?: string | undefined;
  baseUrl?: string | undefined;
  platformUrl?: string | undefined;
  cdnUrl?: string | undefined;
  vendor?: string | undefined;
  credentialsFile?: string | undefined;
  /** `--allow-insecure-http`: accept plain http to a host that is not loopback. */
  allowInsecureHttp?: boolean | undefined;
  /**
   * False for a command that cannot take `--emulator` (a fleet worker, a scheduled tick): its
   * messages must not suggest a flag it refuses. Default true.
   */
  offerEmulator?: boolean | undefined;
}

export interface ResolveConfigOptions {
  flags?: ConfigFlags;
  env?: NodeJS.ProcessEnv;
  /** When false, missing credentials are not an error (commands without auth). Default true. */
  requireCredentials?: boolean;
  /** Used when no address is configured at all (the embedded emulator). */
  fallbackBaseUrl?: string;
  /** Used when no credentials are configured at all (the embedded emulator). */
  fallbackCredentials?: Credentials;
}

/** Reads and validates a config file, with errors located at `file:line:col`. */
export function readConfigFile(path: string): ConfigFile {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new GenpipeError('config', `Cannot read the config file ${path}: ${(error as NodeJS.ErrnoException).code ?? 'unknown error'}.`, {
      cause: error,
    });
  }
  try {
    return loadYamlAs(text, path, ConfigFile, { maxBytes: 256 * 1024, unknownKeyMessage: 'unknown setting' });
  } catch (error) {
    if (error instanceof YamlSyntaxError) throw new GenpipeError('config', `Invalid config file: ${error.message.split('\n')[0] ?? ''}.`);
    throw error;
  }
}

/** A setting's value and where it came from, for error messages. */
interface Setting {
  value: string;
  from: string;
}

function checkUrl(setting: Setting, name: string, allowInsecureHttp: boolean): string {
  const { value, from } = setting;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new GenpipeError('config', `${name} is not a valid URL: ${JSON.stringify(value)}.`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new GenpipeError('config', `${name} must be an http or https URL.`);
  if (url.username || url.password) throw new GenpipeError('config', `${name} must not carry credentials.`);
  // Reliability rule 24: the Authorization header never crosses a network in clear text unasked.
  if (url.protocol === 'http:' && !allowInsecureHttp && !isLoopbackHost(url.hostname)) {
    throw new GenpipeError(
      'config',
      `${name} (${from}) is plain http to ${url.host}, which would send your credentials unencrypted: use https, or pass --allow-insecure-http (GENPIPE_ALLOW_INSECURE_HTTP=1, or allow_insecure_http: true in the config file) to accept that.`,
    );
  }
  return value.replace(/\/+$/, '');
}

/**
 * The main service address flags, environment and config file give, and where it came from
 * (`--base-url`, `GENPIPE_BASE_URL`, `the config file F`), by the precedence resolveConfig uses;
 * undefined when none sets one. For messages: an unreachable service names both.
 */
export function baseUrlOrigin(flags: ConfigFlags, env: NodeJS.ProcessEnv): { url: string; from: string } | undefined {
  if (flags.baseUrl !== undefined) return { url: flags.baseUrl, from: '--base-url' };
  if (env.GENPIPE_BASE_URL) return { url: env.GENPIPE_BASE_URL, from: 'GENPIPE_BASE_URL' };
  const configPath = flags.config ?? env.GENPIPE_CONFIG;
  if (!configPath) return undefined;
  const url = readConfigFile(configPath).base_url;
  return url === undefined ? undefined : { url, from: `base_url in the config file ${configPath}` };
}

/** Resolves flags, environment and config file into a complete configuration. */
export function resolveConfig(options: ResolveConfigOptions = {}): ClientConfig {
  const flags = options.flags ?? {};
  const env = options.env ?? process.env;
  const configPath = flags.config ?? env.GENPIPE_CONFIG;
  const file: ConfigFile = configPath ? readConfigFile(configPath) : {};

  const pick = (flag: string | undefined, envName: string, fileValue: string | undefined): string | undefined =>
    flag ?? (env[envName] || undefined) ?? fileValue;
  /** Like pick, remembering the source: `from --base-url`, `from GENPIPE_BASE_URL`, `from the config file`. */
  const setting = (flag: string | undefined, flagName: string, envName: string, fileValue: string | undefined): Setting | undefined => {
    if (flag !== undefined) return { value: flag, from: `from ${flagName}` };
    if (env[envName]) return { value: env[envName], from: `from ${envName}` };
    if (fileValue !== undefined) return { value: fileValue, from: `from the config file ${configPath}` };
    return undefined;
  };
  const allowInsecureHttp =
    flags.allowInsecureHttp === true || env.GENPIPE_ALLOW_INSECURE_HTTP === '1' || file.allow_insecure_http === true;
  const baseSetting =
    setting(flags.baseUrl, '--base-url', 'GENPIPE_BASE_URL', file.base_url) ??
    (options.fallbackBaseUrl === undefined ? undefined : { value: options.fallbackBaseUrl, from: 'the fallback address' });
  if (!baseSetting) {
    throw new GenpipeError(
      'config',
      `No service address is set: use --base-url, GENPIPE_BASE_URL or base_url in the config file${flags.offerEmulator === false ? '' : ' (or --emulator)'}.`,
    );
  }
  const baseUrl = checkUrl(baseSetting, 'base_url', allowInsecureHttp);
  const inherited = { value: baseUrl, from: 'as base_url' };
  const platformUrl = checkUrl(
    setting(flags.platformUrl, '--platform-url', 'GENPIPE_PLATFORM_URL', file.platform_url) ?? inherited,
    'platform_url',
    allowInsecureHttp,
  );
  const cdnUrl = checkUrl(setting(flags.cdnUrl, '--cdn-url', 'GENPIPE_CDN_URL', file.cdn_url) ?? inherited, 'cdn_url', allowInsecureHttp);
  const vendor = pick(flags.vendor, 'GENPIPE_VENDOR', file.vendor) ?? DEFAULT_VENDOR;
  if (!/^[A-Za-z0-9_-]+$/.test(vendor)) throw new GenpipeError('config', 'vendor must be one path segment of letters, digits, - or _.');

  const credentialsFile = flags.credentialsFile;
  let credentials: Credentials | undefined;
  if (credentialsFile) credentials = credentialsFromFile(credentialsFile);
  else credentials = credentialsFromEnv(env);
  if (!credentials) {
    const fallbackFile = env.GENPIPE_CREDENTIALS_FILE || file.credentials_file;
    if (fallbackFile) credentials = credentialsFromFile(fallbackFile);
  }
  credentials ??= options.fallbackCredentials;
  if (!credentials && options.requireCredentials !== false) {
    throw new GenpipeError(
      'credentials',
      'No credentials: set HF_KEY=key_id:key_secret (or HF_API_KEY and HF_API_SECRET), or pass --credentials FILE.',
    );
  }

  return {
    baseUrl,
    platformUrl,
    cdnUrl,
    vendor,
    credentials,
    timeouts: {
      connectMs: file.timeouts?.connect_ms ?? 10_000,
      headersMs: file.timeouts?.headers_ms ?? 30_000,
      bodyMs: file.timeouts?.body_ms ?? 60_000,
    },
    retry: {
      maxAttempts: file.retry?.max_attempts ?? 5,
      baseMs: file.retry?.base_ms ?? DEFAULT_BACKOFF.baseMs,
      capMs: file.retry?.cap_ms ?? DEFAULT_BACKOFF.capMs,
      maxRetryAfterMs: file.retry?.max_retry_after_ms ?? DEFAULT_MAX_RETRY_AFTER_MS,
    },
    creditsPerUsd: file.credits_per_usd ?? 100,
  };
}
