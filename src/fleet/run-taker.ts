/**
 * A worker started with `--runs` also takes scheduled runs (one at a time) and coordinates each
 * one as `genpipe run --redis` would. A run job outlives its coordinator: if the worker dies,
 * BullMQ's stalled-job check hands the job to another worker with `--runs`, which resumes the
 * newest unfinished run of that pipeline from its directory (the runs folder is shared storage;
 * the pipeline's lock holds across hosts, so a run never has two coordinators).
 */
import { DelayedError, Worker, type Job } from 'bullmq';
import { GenpipeError } from '../api/errors.js';
import { LOCK_MS, STALLED_CHECK_MS } from './worker.js';
import { reportConnection, type RedisTarget } from './redis.js';
import { runsQueueName, type ScheduledRunData } from './schedules.js';

export interface RunTakerOptions {
  redis: RedisTarget;
  queue: string;
  name: string;
  say: (line: string) => void;
  /**
   * Coordinates one scheduled run to its end: a new run, or (`takeover`) a resume of the run the
   * job's earlier holder recorded with `remember` (a new run when it died before one existed).
   * Resolves with the run's exit code.
   */
  coordinate(
    data: ScheduledRunData,
    takeover: { runDir?: string | undefined } | undefined,
    signal: AbortSignal,
    remember: (runDir: string) => Promise<void>,
  ): Promise<number>;
}

export interface RunTaker {
  /** Stops taking runs; a run being coordinated is interrupted and handed back for another worker to resume. */
  close(): Promise<void>;
}

interface RunJobData extends ScheduledRunData {
  /** Set when a worker handed the run back on shutdown: whoever takes it resumes. */
  handedBack?: boolean | undefined;
  /** The run's directory, recorded by its coordinator as soon as it exists. */
  runDir?: string | undefined;
}

export async function startRunTaker(o: RunTakerOptions): Promise<RunTaker> {
  const stopping = new AbortController();
  const processor = async (job: Job<RunJobData, number>, token?: string): Promise<number> => {
    const takeover = job.stalledCounter > 0 || job.data.handedBack === true ? { runDir: job.data.runDir } : undefined;
    o.say(
      `worker ${o.name}: ${takeover ? `taking over the scheduled run of ${job.data.schedule}${takeover.runDir ? ` in ${takeover.runDir}` : ''}` : `starting a scheduled run of ${job.data.schedule}`}.`,
    );
    const code = await o.coordinate(job.data, takeover, stopping.signal, (runDir) => job.updateData({ ...job.data, runDir }));
    if (stopping.signal.aborted && token !== undefined) {
      // Interrupted by this worker's shutdown, not finished: another worker resumes it.
      await job.updateData({ ...job.data, handedBack: true });
      await job.moveToDelayed(Date.now(), token);
      throw new DelayedError();
    }
    o.say(`worker ${o.name}: the scheduled run of ${job.data.schedule} ended with exit ${code}.`);
    return code;
  };
  const worker = new Worker<RunJobData, number>(runsQueueName(o.queue), processor, {
    connection: o.redis.options,
    concurrency: 1,
    name: `${o.name}-runs`,
    lockDuration: LOCK_MS,
    stalledInterval: STALLED_CHECK_MS,
    maxStalledCount: 1_000,
    autorun: false,
  });
  reportConnection(worker, o.redis, o.say, `worker ${o.name}`);
  worker.on('failed', (job, error) => {
    if (job && !(error instanceof DelayedError))
      o.say(`warning: worker ${o.name}: the scheduled run of ${job.data.schedule} failed: ${error.message}`);
  });
  await worker.waitUntilReady();
  void worker.run();
  return {
    close: async () => {
      stopping.abort(new GenpipeError('aborted', 'the worker is shutting down'));
      await worker.close();
    },
  };
}
