/**
 * A watch on Redis for long-lived fleet processes (a worker, a run's coordinator): a PING on a
 * connection of its own every WATCH_EVERY_MS, each with a deadline. A Redis that goes away is
 * waited for (BullMQ reconnects by itself, and the process says so on one line); a Redis that
 * stops answering altogether for the stall period (a paused or wedged server: the connection stays
 * open, nothing comes back) ends the process's work with exit 5 and one sentence, within 15 s, as
 * a run always ends, instead of a process that hangs with no output.
 */
import { Redis } from 'ioredis';
import { GenpipeError } from '../api/errors.js';
import type { RedisTarget } from './redis.js';

const WATCH_EVERY_MS = 1_000;
/** How long Redis may give no answer at all before the watch gives up on it (GENPIPE_REDIS_STALL_MS: tests). */
export const redisStallMs = (env: NodeJS.ProcessEnv | Record<string, string | undefined> = process.env): number => {
  const value = Number(env.GENPIPE_REDIS_STALL_MS);
  return Number.isFinite(value) && value >= 1_000 ? value : 10_000;
};

export interface RedisWatch {
  /** Resolves with the sentence to exit 5 with, once Redis has not answered for the stall period. */
  readonly stalled: Promise<GenpipeError>;
  close(): void;
}

/**
 * Watches `target`. A refused connection (Redis restarting) is not a stall: only silence on a
 * connection that is up counts, so a Redis restart with its data is ridden out as before.
 */
export function watchRedis(target: RedisTarget, what: string, stallMs = redisStallMs()): RedisWatch {
  const connection = new Redis({
    ...target.options,
    commandTimeout: Math.min(stallMs, 5_000),
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
  });
  // Why the connection last failed: a refusal (Redis down, restarting) is waited for; a connection
  // that times out or a command with no answer is silence.
  let refused = false;
  connection.on(
    'error',
    (error: NodeJS.ErrnoException) => (refused = ['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN'].includes(error.code ?? '')),
  );
  connection.on('ready', () => (refused = false));
  let lastAnswer = Date.now();
  let report!: (error: GenpipeError) => void;
  const stalled = new Promise<GenpipeError>((resolve) => (report = resolve));
  let pinging = false;
  const timer = setInterval(() => {
    if (pinging) return;
    pinging = true;
    void (async () => {
      try {
        await connection.ping();
        lastAnswer = Date.now();
      } catch {
        // Down and refusing (a restart) is waited for; silence is a stall.
        if (refused) lastAnswer = Math.max(lastAnswer, Date.now() - stallMs / 2);
      } finally {
        pinging = false;
      }
      if (Date.now() - lastAnswer >= stallMs) {
        clearInterval(timer);
        report(
          new GenpipeError(
            'network',
            `Redis at ${target.shown} stopped answering (nothing for ${Math.round(stallMs / 1000)} s), so the ${what} stopped; what was done is kept: start it again once Redis answers.`,
          ),
        );
      }
    })();
  }, WATCH_EVERY_MS);
  timer.unref();
  return {
    stalled,
    close: () => {
      clearInterval(timer);
      connection.disconnect();
    },
  };
}
