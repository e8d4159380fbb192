/**
 * Redis for the fleet: the URL a user gives (`--redis`, GENPIPE_REDIS_URL, `redis_url` in the
 * config file), the connection options BullMQ takes from it, and the check made before anything
 * else: Redis unreachable at start is one sentence and exit 5, never a stack trace.
 */
import type { RedisOptions } from 'bullmq';
import { configFilePath, readConfigFile } from '../api/config.js';
import { GenpipeError } from '../api/errors.js';

export const DEFAULT_QUEUE = 'genpipe';

export interface RedisTarget {
  /** The URL without its password, for messages and logs. */
  shown: string;
  /** For connections that block (BullMQ workers, queue events): a deadline on connecting only. */
  options: RedisOptions;
}

/** Connecting to Redis: a TCP connection and its ready check must be done within this. */
export const REDIS_CONNECT_TIMEOUT_MS = 5_000;
/**
 * Each command on a connection that never blocks: a Redis that accepts and never answers fails
 * the command instead of holding the process for ever. Blocking commands (a worker's BZPOPMIN,
 * queue events' XREAD BLOCK) legitimately wait, so their connections use `options` alone.
 */
export const REDIS_COMMAND_TIMEOUT_MS = 5_000;
/**
 * How long dropping a process's Redis connections may take: after a Redis restart, a connection
 * still opening may never finish disconnecting (soak seeds 60402, 80000: a fleet command that
 * never ended). Past it they are left to the process's end (main.ts ends it soon after).
 */
export const DISCONNECT_MS = 2_000;

/** The options for a connection of plain commands (queues, admin, heartbeats): each has a deadline. */
export function commandOptions(target: RedisTarget): RedisOptions {
  return { ...target.options, commandTimeout: REDIS_COMMAND_TIMEOUT_MS };
}

/** Parses `redis://[user:password@]host[:port][/db]` (or rediss:// for TLS). */
export function parseRedisUrl(value: string): RedisTarget {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new GenpipeError(
      'invalid_input',
      `--redis takes a URL such as redis://127.0.0.1:6379, not "${value.replace(/\/\/[^@/]*@/, '//***@')}".`,
    );
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
    throw new GenpipeError('invalid_input', `--redis takes a redis:// or rediss:// URL, not ${url.protocol}//…`);
  }
  const db = url.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d+$/.test(db))
    throw new GenpipeError('invalid_input', `--redis: the path of the URL is a database number, not "${db}".`);
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const port = url.port === '' ? 6379 : Number(url.port);
  const options: RedisOptions = {
    host,
    port,
    ...(url.username ? { username: decodeURIComponent(url.username) } : {}),
    ...(url.password ? { password: decodeURIComponent(url.password) } : {}),
    ...(db === '' ? {} : { db: Number(db) }),
    ...(url.protocol === 'rediss:' ? { tls: {} } : {}),
    connectTimeout: REDIS_CONNECT_TIMEOUT_MS,
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
export function redisUrlOf(
  flag: string | undefined,
  env: NodeJS.ProcessEnv | Record<string, string | undefined>,
  configFlag?: string | undefined,
): string | undefined {
  const value = flag ?? (env.GENPIPE_REDIS_URL || undefined);
  if (value !== undefined) return value === '' ? undefined : value;
  const configPath = configFilePath({ config: configFlag }, env);
  return configPath ? readConfigFile(configPath).redis_url : undefined;
}

/**
 * Connects once and pings, without retrying: Redis unreachable at start is exit 5 with the address
 * and the reason, before a run directory or a request exists. Both steps have a deadline: a Redis
 * that accepts connections and never answers (stuck, or not Redis) is `ETIMEDOUT`, not a hang.
 */
export async function checkRedis(target: RedisTarget, timeoutMs = 3_000, signal?: AbortSignal): Promise<void> {
  const { Redis } = await import('ioredis');
  const probe = new Redis({
    ...target.options,
    lazyConnect: true,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    connectTimeout: timeoutMs,
    commandTimeout: timeoutMs,
    enableOfflineQueue: false,
    // disconnect ends the socket politely and waits this long for the peer's side to close; a
    // Redis that never answers never closes it, and the wait (2 s by default) held the exit 5.
    disconnectTimeout: 10,
  });
  let cause: Error | undefined;
  probe.on('error', (error: Error) => (cause ??= error));
  // One deadline for connecting, the ready check and the ping together.
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('timed out')), timeoutMs);
    // Ctrl-C while waiting on Redis: interrupted (exit 130), not a Redis failure.
    onAbort = () => reject(new GenpipeError('aborted', `Interrupted while connecting to Redis at ${target.shown}; nothing was changed.`));
    if (signal?.aborted) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
  });
  try {
    await Promise.race([
      (async () => {
        await probe.connect();
        await probe.ping();
      })(),
      deadline,
    ]);
  } catch (error) {
    if (error instanceof GenpipeError && error.code === 'aborted') throw error;
    const first = cause ?? (error as Error);
    const code = (first as NodeJS.ErrnoException).code;
    const reason =
      code ??
      (/timed? ?out/i.test(first.message) ? 'ETIMEDOUT: it accepted the connection but did not answer' : first.message.replace(/[.]$/, ''));
    throw new GenpipeError(
      'network',
      `Redis at ${target.shown} could not be reached (${reason}); start it, or check --redis / GENPIPE_REDIS_URL.`,
      { neverSent: true },
    );
  } finally {
    clearTimeout(timer);
    if (onAbort) signal?.removeEventListener('abort', onAbort);
    // Only a live connection is closed: disconnecting a failed one arms a reconnect timer that
    // would hold the process for seconds before its exit 5. A connection that never became ready
    // (a stuck Redis) has its socket dropped at once, without a reconnect (retryStrategy is null).
    if (probe.status === 'ready') probe.disconnect();
    else probe.disconnect(false);
  }
}

/**
 * Says on one line when a connection is lost and when it is back, instead of an error per retry:
 * BullMQ's clients reconnect by themselves and pick up where they were.
 */
export function reportConnection(
  emitter: { on(event: 'error', fn: (error: Error) => void): unknown },
  target: RedisTarget,
  say: (line: string) => void,
  what: string,
): { ready(): void } {
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

/**
 * Runs a few Redis commands (an admin command's): a command that fails after the start-up check,
 * its deadline past (REDIS_COMMAND_TIMEOUT_MS) or its connection lost, is exit 5 and one sentence,
 * as at start, instead of an internal error.
 */
export async function redisCommands<T>(target: RedisTarget, body: () => Promise<T>): Promise<T> {
  try {
    return await body();
  } catch (error) {
    if (error instanceof GenpipeError) throw error;
    const e = error as NodeJS.ErrnoException;
    const reason =
      e.code ??
      (/timed? ?out/i.test(String(e.message)) ? 'ETIMEDOUT: it stopped answering' : String(e.message ?? error).replace(/[.]$/, ''));
    throw new GenpipeError('network', `Redis at ${target.shown} failed a command (${reason}); check it, then run the command again.`, {
      cause: error,
    });
  }
}

/**
 * Closes a BullMQ queue, or drops its connection when Redis does not answer the close within
 * REDIS_COMMAND_TIMEOUT_MS (or `failed`: a command already found it not answering): a stuck Redis
 * must not hold the process after its answer is printed.
 */
export async function closeQueue(queue: { close(): Promise<void>; disconnect(): Promise<void> }, failed = false): Promise<void> {
  // After a failed command, Redis is known not to answer: the connection is dropped at once.
  if (failed) return void (await queue.disconnect().catch(() => undefined));
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), REDIS_COMMAND_TIMEOUT_MS);
    timer.unref();
  });
  try {
    if (
      (await Promise.race([
        queue.close().then(
          () => 'closed' as const,
          () => 'late' as const,
        ),
        late,
      ])) === 'late'
    )
      await queue.disconnect().catch(() => undefined);
  } finally {
    clearTimeout(timer);
  }
}
