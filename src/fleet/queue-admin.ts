/**
 * The queue's account-wide limits and what is going on in it: `genpipe queue limits` and
 * `genpipe queue status`. Limits live in Redis (BullMQ's global concurrency and rate limit), so
 * every worker and every run on the queue shares them.
 */
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import type { InstanceJobData } from './instance-job.js';
import { closeQueue, commandOptions, redisCommands, type RedisTarget } from './redis.js';

/** How long a worker's lock on a job lasts unless renewed: a heartbeat older than that is a lost worker's. */
export const LOCK_MS = 10_000;
/** How often a worker writes its heartbeat. */
export const HEARTBEAT_MS = 5_000;
/**
 * How long a worker's heartbeat record lasts after its last beat: a worker that died (kill -9, a
 * lost host) is listed as lost for this long, then its record goes (docs/guides/fleet.md).
 */
export const WORKER_RECORD_TTL_MS = 5 * 60_000;

/** A worker's heartbeat, written every few seconds with an expiry of WORKER_RECORD_TTL_MS. */
export interface WorkerHeartbeat {
  name: string;
  host: string;
  pid: number;
  /** ISO time of the beat. */
  at: string;
  active: number;
  done: number;
  concurrency: number;
}

export const workerKey = (queue: string, name: string): string => `genpipe:${queue}:worker:${name}`;

export interface QueueLimits {
  concurrency: number | null;
  /** Jobs started per second, across the fleet. */
  ratePerSecond: number | null;
}

export async function setQueueLimits(
  redis: RedisTarget,
  queueName: string,
  limits: { concurrency?: number | undefined; ratePerSecond?: number | undefined },
): Promise<QueueLimits> {
  const queue = new Queue(queueName, { connection: commandOptions(redis) });
  queue.on('error', () => {});
  let failed = true;
  try {
    return await redisCommands(redis, async () => {
      if (limits.concurrency !== undefined) await queue.setGlobalConcurrency(limits.concurrency);
      if (limits.ratePerSecond !== undefined) {
        // BullMQ counts jobs per window: R/s as a whole number of jobs per window of 1 s or more.
        const windowMs = limits.ratePerSecond >= 1 ? 1_000 : Math.round(1_000 / limits.ratePerSecond);
        await queue.setGlobalRateLimit(Math.max(1, Math.floor(limits.ratePerSecond >= 1 ? limits.ratePerSecond : 1)), windowMs);
      }
      const out = await limitsOf(queue);
      failed = false;
      return out;
    });
  } finally {
    await closeQueue(queue, failed);
  }
}

async function limitsOf(queue: Queue): Promise<QueueLimits> {
  const concurrency = await queue.getGlobalConcurrency();
  const rate = await queue.getGlobalRateLimit();
  return { concurrency: concurrency ?? null, ratePerSecond: rate ? Math.round((rate.max * 1_000 * 100) / rate.duration) / 100 : null };
}

const STATES = ['waiting', 'active', 'delayed', 'completed', 'failed'] as const;
type State = (typeof STATES)[number];
/** At most this many jobs per state are read to count them by run. */
const SCAN_PER_STATE = 10_000;

/** A worker as queue status lists it: its heartbeat, and whether it is lost. */
export interface WorkerSeen extends WorkerHeartbeat {
  /** Its heartbeat is older than the lock lease (LOCK_MS): it died or lost Redis, and its jobs go to other workers. */
  lost: boolean;
  /** Seconds since its last heartbeat, when status was read. */
  lastSeenS: number;
}

export interface QueueStatus {
  queue: string;
  limits: QueueLimits;
  /** BullMQ's counts of the queue's jobs. */
  totals: Record<State, number>;
  /** The live (not lost) workers' own counts, summed from their heartbeats (each up to HEARTBEAT_MS old). */
  liveWorkers: { count: number; active: number; concurrency: number };
  runs: { runId: string; counts: Record<State, number> }[];
  workers: WorkerSeen[];
  /** True when a state held more jobs than were read to count them by run. */
  runsTruncated: boolean;
}

/** `byRun: false` leaves `runs` empty, reading no job (metrics read only the counts and the workers, on every scrape). */
export async function queueStatus(redis: RedisTarget, queueName: string, options: { byRun?: boolean } = {}): Promise<QueueStatus> {
  const queue = new Queue<InstanceJobData>(queueName, { connection: commandOptions(redis) });
  const client = new Redis({ ...commandOptions(redis), lazyConnect: true });
  client.on('error', () => {});
  queue.on('error', () => {});
  let failed = true;
  try {
    return await redisCommands(redis, async () => {
      const totals = (await queue.getJobCounts(...STATES)) as Record<State, number>;
      const byRun = new Map<string, Record<State, number>>();
      let runsTruncated = false;
      for (const state of options.byRun === false ? [] : STATES) {
        if ((totals[state] ?? 0) > SCAN_PER_STATE) runsTruncated = true;
        for (const job of await queue.getJobs([state], 0, SCAN_PER_STATE - 1)) {
          if (!job) continue;
          const runId = job.data?.runId ?? '(other)';
          let counts = byRun.get(runId);
          if (!counts) {
            counts = { waiting: 0, active: 0, delayed: 0, completed: 0, failed: 0 };
            byRun.set(runId, counts);
          }
          counts[state]++;
        }
      }
      await client.connect();
      const workers: WorkerSeen[] = [];
      const now = Date.now();
      let cursor = '0';
      for (let rounds = 0; rounds < 1_000; rounds++) {
        const [next, keys] = await client.scan(cursor, 'MATCH', workerKey(queueName, '*'), 'COUNT', 200);
        for (const key of keys) {
          const value = await client.get(key);
          if (value) workers.push(seen(JSON.parse(value) as WorkerHeartbeat, now));
        }
        cursor = next;
        if (cursor === '0') break;
      }
      workers.sort((a, b) => a.name.localeCompare(b.name));
      failed = false;
      const live = workers.filter((w) => !w.lost);
      return {
        queue: queueName,
        limits: await limitsOf(queue),
        totals,
        liveWorkers: {
          count: live.length,
          active: live.reduce((sum, w) => sum + w.active, 0),
          concurrency: live.reduce((sum, w) => sum + w.concurrency, 0),
        },
        runs: [...byRun].map(([runId, counts]) => ({ runId, counts })).sort((a, b) => a.runId.localeCompare(b.runId)),
        workers,
        runsTruncated,
      };
    });
  } finally {
    client.disconnect();
    await closeQueue(queue, failed);
  }
}

function seen(beat: WorkerHeartbeat, now: number): WorkerSeen {
  const age = now - Date.parse(beat.at);
  return { ...beat, lost: !(age <= LOCK_MS), lastSeenS: Math.max(0, Math.round(age / 1000)) };
}
