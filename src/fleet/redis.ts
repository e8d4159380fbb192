/**
 * Redis for the fleet: the URL a user gives (`--redis`, GENPIPE_REDIS_URL, `redis_url` in the
 * config file), the connection options BullMQ takes from it, and the check made before anything
 * else: Redis unreachable at start is one sentence and exit 5, never a stack trace.
 */
import type { RedisOptions } from 'bullmq';
import { readConfigFile } from '../api/config.js';
import { GenpipeError } from '../api/errors.js';

export const DEFAULT_QUEUE = 'genpipe';

export interface RedisTarget {
  /** The URL without its password, for messages and logs. */
  shown: string;
  options: RedisOptions;
}

/** Parses `redis://[user:password@]host[:port][/db]` (or rediss:// for TLS). */
export function parseRedisUrl(value: string): RedisTarget {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new GenpipeError('invalid_input', `--redis takes a URL such as redis://127.0.0.1:6379, not "${value.replace(/\/\/[^@/]*@/, '//***@')}".`);
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
    throw new GenpipeError('invalid_input', `--redis takes a redis:// or rediss:// URL, not ${url.protocol}//…`);
  }
  const db = url.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d+$/.test(db)) throw new GenpipeError('invalid_input', `--redis: the path of the URL is a database number, not "${db}".`);
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const port = url.port === '' ? 6379 : Number(url.port);
  const options: RedisOptions = {
    host,
    port,
    ...(url.username ? { username: decodeURIComponent(url.username) } : {}),
    ...(url.password ? { password: decodeURIComponent(url.password) } : {}),
    ...(db === '' ? {} : { db: Number(db) }),
    ...(url.protocol === 'rediss:' ? { tls: {} } : {}),
    // BullMQ's workers block on Redis: a command must wait for a reconnect, not fail after N tries.
    maxRetriesPerRequest: null,
    // Lost mid-run: reconnect with backoff, at most every 5 s, for ever (each loss said on one line).
    retryStrategy: (times: number) => Math.min(250 * 2 ** Math.min(times, 5), 5_000),
  };
  return { shown: `${url.protocol}//${url.host}${db === '' ? '' : `/${db}`}`, options };
}

/**
 * The URL from the flag, else GENPIPE_REDIS_URL, else `redis_url` in the config file (--config or
 * GENPIPE_CONFIG); undefined when none is set (a local run).
 */
export function redisUrlOf(flag: string | undefined, env: NodeJS.ProcessEnv | Record<string, string | undefined>, configFlag?: string | undefined): string | undefined {
  const value = flag ?? (env.GENPIPE_REDIS_URL || undefined);
  if (value !== undefined) return value === '' ? undefined : value;
  const configPath = configFlag ?? env.GENPIPE_CONFIG;
  return configPath ? readConfigFile(configPath).redis_url : undefined;
}

/**
 * Connects once and pings, without retrying: Redis unreachable at start is exit 5 with the address
 * and the reason, before a run directory or a request exists.
 */
export async function checkRedis(target: RedisTarget, timeoutMs = 3_000): Promise<void> {
  const { Redis } = await import('ioredis');
  const probe = new Redis({ ...target.options, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0, connectTimeout: timeoutMs, enableOfflineQueue: false });
  let cause: Error | undefined;
  probe.on('error', (error: Error) => (cause ??= error));
  try {
    await probe.connect();
    await probe.ping();
  } catch (error) {
    const first = cause ?? (error as Error);
    const reason = (first as NodeJS.ErrnoException).code ?? first.message.replace(/[.]$/, '');
    throw new GenpipeError('network', `Redis at ${target.shown} could not be reached (${reason}); start it, or check --redis / GENPIPE_REDIS_URL.`, { neverSent: true });
  } finally {
    // Only a live connection is closed: disconnecting a failed one arms a reconnect timer that
    // would hold the process for seconds before its exit 5.
    if (probe.status === 'ready') probe.disconnect();
  }
}

/**
 * Says on one line when a connection is lost and when it is back, instead of an error per retry:
 * BullMQ's clients reconnect by themselves and pick up where they were.
 */
export function reportConnection(emitter: { on(event: 'error', fn: (error: Error) => void): unknown }, target: RedisTarget, say: (line: string) => void, what: string): { ready(): void } {
  let down = false;
  emitter.on('error', (error) => {
    if (down) return;
    down = true;
    const reason = (error as NodeJS.ErrnoException).code ?? error.message;
    say(`warning: ${what} lost Redis at ${target.shown} (${reason}); retrying with backoff.`);
  });
  return {
    ready: () => {
      if (!down) return;
      down = false;
      say(`${what}: Redis at ${target.shown} is back.`);
    },
  };
}
