/**
 * Configuration is resolved once, at the boundary, into a fully defaulted `ClientConfig`
 * (house style 7). Each setting comes from, in order of precedence: a flag, an environment
 * variable, the config file, the default.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
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

/** The defaults of the numeric settings, shared by resolveConfig and `genpipe config`. */
const NUMERIC_DEFAULTS = {
  'timeouts.connect_ms': 10_000,
  'timeouts.headers_ms': 30_000,
  'timeouts.body_ms': 60_000,
  'retry.max_attempts': 5,
  'retry.base_ms': DEFAULT_BACKOFF.baseMs,
  'retry.cap_ms': DEFAULT_BACKOFF.capMs,
  'retry.max_retry_after_ms': DEFAULT_MAX_RETRY_AFTER_MS,
  credits_per_usd: 100,
} as const;

/** The numeric settings of a config file, by their dotted names. */
function numericSettings(file: ConfigFile): Record<keyof typeof NUMERIC_DEFAULTS, number | undefined> {
  return {
    'timeouts.connect_ms': file.timeouts?.connect_ms,
    'timeouts.headers_ms': file.timeouts?.headers_ms,
    'timeouts.body_ms': file.timeouts?.body_ms,
    'retry.max_attempts': file.retry?.max_attempts,
    'retry.base_ms': file.retry?.base_ms,
    'retry.cap_ms': file.retry?.cap_ms,
    'retry.max_retry_after_ms': file.retry?.max_retry_after_ms,
    credits_per_usd: file.credits_per_usd,
  };
}

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
  /** The folders of run directories `genpipe ui` shows when no --out names one. */
  runs_dirs: z.array(z.string().min(1)).min(1).optional(),
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

/** The config file every user of a machine shares, used when no other is found. */
export const SYSTEM_CONFIG_FILE = '/etc/genpipe/config.yaml';

/** A config file and how it was found: `--config`, `GENPIPE_CONFIG`, the user's or the system's. */
export interface FoundConfigFile {
  path: string;
  from: '--config' | 'GENPIPE_CONFIG' | 'user' | 'system';
}

/**
 * The files looked for when neither --config nor GENPIPE_CONFIG names one, in order: the user's
 * (`${XDG_CONFIG_HOME:-~/.config}/genpipe/config.yaml`), then the system's. Cron and systemd give
 * a job HOME but none of a shell's exports, so a job finds its address where a person put it.
 */
export function configFileCandidates(env: NodeJS.ProcessEnv): FoundConfigFile[] {
  const base = env.XDG_CONFIG_HOME || (env.HOME ? join(env.HOME, '.config') : undefined);
  return [
    ...(base === undefined ? [] : [{ path: join(base, 'genpipe', 'config.yaml'), from: 'user' as const }]),
    { path: SYSTEM_CONFIG_FILE, from: 'system' },
  ];
}

/**
 * The config file in force: `--config`, else GENPIPE_CONFIG (either must be readable: naming a
 * file that is not there is an error), else the first candidate that exists; undefined when none does.
 */
export function findConfigFile(
  flags: ConfigFlags,
  env: NodeJS.ProcessEnv,
  exists: (path: string) => boolean = existsSync,
): FoundConfigFile | undefined {
  if (flags.config !== undefined) return { path: flags.config, from: '--config' };
  if (env.GENPIPE_CONFIG) return { path: env.GENPIPE_CONFIG, from: 'GENPIPE_CONFIG' };
  return configFileCandidates(env).find((candidate) => exists(candidate.path));
}

/** The path of the config file in force (findConfigFile), or undefined. */
export function configFilePath(flags: ConfigFlags, env: NodeJS.ProcessEnv): string | undefined {
  return findConfigFile(flags, env)?.path;
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
  const configPath = configFilePath(flags, env);
  if (!configPath) return undefined;
  const url = readConfigFile(configPath).base_url;
  return url === undefined ? undefined : { url, from: `base_url in the config file ${configPath}` };
}

/** Resolves flags, environment and config file into a complete configuration. */
export function resolveConfig(options: ResolveConfigOptions = {}): ClientConfig {
  const flags = options.flags ?? {};
  const env = options.env ?? process.env;
  const configPath = configFilePath(flags, env);
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

  const given = numericSettings(file);
  const n = (name: keyof typeof NUMERIC_DEFAULTS): number => given[name] ?? NUMERIC_DEFAULTS[name];
  return {
    baseUrl,
    platformUrl,
    cdnUrl,
    vendor,
    credentials,
    timeouts: { connectMs: n('timeouts.connect_ms'), headersMs: n('timeouts.headers_ms'), bodyMs: n('timeouts.body_ms') },
    retry: {
      maxAttempts: n('retry.max_attempts'),
      baseMs: n('retry.base_ms'),
      capMs: n('retry.cap_ms'),
      maxRetryAfterMs: n('retry.max_retry_after_ms'),
    },
    creditsPerUsd: n('credits_per_usd'),
  };
}

/** Where a setting's value came from, as `genpipe config` prints it. */
export type SettingSource = 'flag' | 'environment' | 'file' | 'default';

export interface SettingOrigin {
  /** The setting's name in the config file: base_url, timeouts.connect_ms. */
  name: string;
  /** What is printed: the value, or `set` / `not set` for a secret. */
  value: string;
  source: SettingSource;
  /** Which flag, variable or file: `--base-url`, `GENPIPE_BASE_URL`, the file's path. */
  detail: string;
}

/** A Redis URL without its password, for printing. */
function withoutPassword(url: string): string {
  return url.replace(
    /^(rediss?:\/\/)([^@/]*)@/,
    (_m, scheme: string, auth: string) => `${scheme}${auth.includes(':') ? `${auth.split(':')[0]}:***` : '***'}@`,
  );
}

/**
 * Every setting with its value and where it came from, by the precedence resolveConfig uses (a
 * flag, the environment, the config file, the default). Secrets are only `set` or `not set`.
 */
export function describeConfig(
  flags: ConfigFlags & { redis?: string | undefined },
  env: NodeJS.ProcessEnv,
  exists: (path: string) => boolean = existsSync,
): { file: FoundConfigFile | undefined; settings: SettingOrigin[] } {
  const found = findConfigFile(flags, env, exists);
  const file: ConfigFile = found ? readConfigFile(found.path) : {};
  const inFile = found?.path ?? '';
  const settings: SettingOrigin[] = [];
  const add = (name: string, value: string, source: SettingSource, detail: string): void =>
    void settings.push({ name, value, source, detail });
  const layered = (
    name: string,
    flag: string | undefined,
    flagName: string,
    envName: string,
    fileValue: string | undefined,
    fallback: string,
    fallbackDetail = '',
  ) => {
    if (flag !== undefined) add(name, flag, 'flag', flagName);
    else if (env[envName]) add(name, env[envName], 'environment', envName);
    else if (fileValue !== undefined) add(name, fileValue, 'file', inFile);
    else add(name, fallback, 'default', fallbackDetail);
  };
  layered('base_url', flags.baseUrl, '--base-url', 'GENPIPE_BASE_URL', file.base_url, 'not set');
  const base = settings[0]?.value ?? 'not set';
  layered('platform_url', flags.platformUrl, '--platform-url', 'GENPIPE_PLATFORM_URL', file.platform_url, base, 'as base_url');
  layered('cdn_url', flags.cdnUrl, '--cdn-url', 'GENPIPE_CDN_URL', file.cdn_url, base, 'as base_url');
  layered('vendor', flags.vendor, '--vendor', 'GENPIPE_VENDOR', file.vendor, DEFAULT_VENDOR);
  // The credentials' own precedence (resolveConfig): the flag's file, the variables, then a file named by a variable or the config.
  const credentialEnv = ['HF_KEY', 'HF_CREDENTIALS', 'HF_API_KEY'].find((name) => env[name]);
  if (flags.credentialsFile !== undefined) add('credentials', 'set', 'flag', `--credentials ${flags.credentialsFile}`);
  else if (credentialEnv !== undefined)
    add('credentials', 'set', 'environment', credentialEnv === 'HF_API_KEY' ? 'HF_API_KEY, HF_API_SECRET' : credentialEnv);
  else if (env.GENPIPE_CREDENTIALS_FILE)
    add('credentials', 'set', 'environment', `GENPIPE_CREDENTIALS_FILE ${env.GENPIPE_CREDENTIALS_FILE}`);
  else if (file.credentials_file !== undefined) add('credentials', 'set', 'file', `credentials_file ${file.credentials_file} in ${inFile}`);
  else add('credentials', 'not set', 'default', '');
  if (flags.allowInsecureHttp === true) add('allow_insecure_http', 'true', 'flag', '--allow-insecure-http');
  else if (env.GENPIPE_ALLOW_INSECURE_HTTP === '1') add('allow_insecure_http', 'true', 'environment', 'GENPIPE_ALLOW_INSECURE_HTTP');
  else if (file.allow_insecure_http !== undefined) add('allow_insecure_http', String(file.allow_insecure_http), 'file', inFile);
  else add('allow_insecure_http', 'false', 'default', '');
  layered('redis_url', flags.redis, '--redis', 'GENPIPE_REDIS_URL', file.redis_url, 'not set');
  const redis = settings.at(-1);
  if (redis && redis.value !== 'not set') redis.value = withoutPassword(redis.value);
  const numbers = numericSettings(file);
  for (const name of Object.keys(NUMERIC_DEFAULTS) as (keyof typeof NUMERIC_DEFAULTS)[]) {
    const value = numbers[name];
    if (value === undefined) add(name, String(NUMERIC_DEFAULTS[name]), 'default', '');
    else add(name, String(value), 'file', inFile);
  }
  return { file: found, settings };
}
