/**
 * Cron schedules of whole runs, on BullMQ's job schedulers: a schedule lives in Redis, so it fires
 * once per tick however many hosts run workers, and the run job each tick makes is taken by one
 * worker started with `--runs`, which coordinates that run (see run-taker.ts).
 */
import { Queue } from 'bullmq';
import { GenpipeError } from '../api/errors.js';
import { closeQueue, commandOptions, redisCommands, type RedisTarget } from './redis.js';

export const RUN_JOB = 'scheduled-run';

/** The queue of scheduled runs beside a fleet queue of instance jobs. */
export const runsQueueName = (queue: string): string => `${queue}-runs`;

export interface ScheduledRunData {
  v: 1;
  schedule: string;
  /** Absolute path of the manifest, as the hosts with `--runs` see it. */
  manifest: string;
  /** Absolute path of the runs folder: shared storage, so another host can resume a run. */
  out: string;
  /**
   * The spend guard decided when the schedule was added: each tick's run has this
   * budget (`--budget`), or, with none, may spend up to the estimate that was accepted (`--yes`) or
   * `confirmOverUsd`; a tick whose estimate has grown past it spends nothing.
   */
  budgetUsd?: number | undefined;
  approvedUsd?: number | undefined;
  confirmOverUsd?: number | undefined;
}

export interface ScheduleSpec extends Pick<ScheduledRunData, 'budgetUsd' | 'approvedUsd' | 'confirmOverUsd'> {
  name: string;
  cron: string;
  tz?: string | undefined;
  manifest: string;
  out: string;
}

export interface ScheduleListing {
  name: string;
  cron: string;
  tz: string | null;
  manifest: string;
  out: string;
  /** ISO time of the next tick, when known. */
  next: string | null;
}

async function withRunsQueue<T>(redis: RedisTarget, queue: string, body: (q: Queue<ScheduledRunData>) => Promise<T>): Promise<T> {
  const q = new Queue<ScheduledRunData>(runsQueueName(queue), { connection: commandOptions(redis) });
  q.on('error', () => {});
  let failed = true;
  try {
    const out = await redisCommands(redis, () => body(q));
    failed = false;
    return out;
  } finally {
    await closeQueue(q, failed);
  }
}

export function addSchedule(redis: RedisTarget, queue: string, spec: ScheduleSpec): Promise<ScheduleListing> {
  return withRunsQueue(redis, queue, async (q) => {
    const data: ScheduledRunData = {
      v: 1,
      schedule: spec.name,
      manifest: spec.manifest,
      out: spec.out,
      budgetUsd: spec.budgetUsd,
      approvedUsd: spec.approvedUsd,
      confirmOverUsd: spec.confirmOverUsd,
    };
    try {
      await q.upsertJobScheduler(
        spec.name,
        { pattern: spec.cron, ...(spec.tz ? { tz: spec.tz } : {}) },
        { name: RUN_JOB, data, opts: { removeOnComplete: 100, removeOnFail: 100 } },
      );
    } catch (error) {
      throw new GenpipeError(
        'invalid_input',
        `--cron "${spec.cron}"${spec.tz ? ` with --tz ${spec.tz}` : ''} is not a schedule: ${(error as Error).message.replace(/[.]$/, '')}. Five fields (minute hour day month weekday), or six with seconds first.`,
      );
    }
    const listed = (await listSchedules(redis, queue)).find((s) => s.name === spec.name);
    if (!listed) throw new GenpipeError('internal', `The schedule ${spec.name} was not found right after it was added.`);
    return listed;
  });
}

export function listSchedules(redis: RedisTarget, queue: string): Promise<ScheduleListing[]> {
  return withRunsQueue(redis, queue, async (q) => {
    const schedulers = await q.getJobSchedulers(0, -1, true);
    return schedulers
      .map((s) => {
        const data = s.template?.data as ScheduledRunData | undefined;
        return {
          name: s.key,
          cron: s.pattern ?? '',
          tz: s.tz ?? null,
          manifest: data?.manifest ?? '',
          out: data?.out ?? '',
          next: s.next === undefined ? null : new Date(s.next).toISOString(),
        };
      })
      .sort((a, b) => a.name.localeCompare(b.name));
  });
}

export function removeSchedule(redis: RedisTarget, queue: string, name: string): Promise<boolean> {
  return withRunsQueue(redis, queue, (q) => q.removeJobScheduler(name));
}
