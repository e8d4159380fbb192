// The conformance suites' backends: every scenario that runs `genpipe run` runs it locally and on
// the fleet (BullMQ on a redis-server of the suite's own, a `genpipe worker` process of the
// scenario's own, the coordinator with --no-local-worker so the worker does all the service work).
import { queueStatus } from '../../src/fleet/queue-admin.js';
import { parseRedisUrl } from '../../src/fleet/redis.js';
import { startWorkerProcess, type WorkerProcess } from './fleet-helpers.js';

export const BACKENDS = ['local', 'bullmq'] as const;
export type Backend = (typeof BACKENDS)[number];

export interface BackendRun {
  /** Flags to add to `genpipe run` / `genpipe resume`. */
  flags: string[];
  /**
   * Resolves once the scenario's worker has no job waiting, delayed or running. The worker goes on
   * while a coordinator is down, so what it sent is only counted once it has settled (the job a
   * killed coordinator enqueued is sent by the worker after the kill). Local: at once.
   */
  settle(timeoutMs?: number): Promise<void>;
  /** Kills the scenario's worker, if any. */
  stop(): Promise<void>;
}

let queues = 0;

/** A backend for one scenario against the service at `serviceUrl`; `workerFlags` go to its worker. */
export async function backendFor(
  backend: Backend,
  serviceUrl: string,
  redisUrl: string,
  workerFlags: readonly string[] = [],
): Promise<BackendRun> {
  if (backend === 'local') return { flags: [], settle: async () => {}, stop: async () => {} };
  const queue = `conformance-${process.pid}-${++queues}`;
  const worker: WorkerProcess = await startWorkerProcess(redisUrl, serviceUrl, queue, ['--queue', queue, ...workerFlags]);
  return {
    flags: ['--redis', redisUrl, '--queue', queue, '--no-local-worker'],
    settle: async (timeoutMs = 30_000) => {
      const target = parseRedisUrl(redisUrl);
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const { waiting, active, delayed } = (await queueStatus(target, queue)).totals;
        if (waiting + active + delayed === 0) return;
        if (Date.now() > deadline)
          throw new Error(`the worker on ${queue} still had ${waiting + active + delayed} job(s) after ${timeoutMs} ms`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    stop: async () => {
      worker.child.kill('SIGKILL');
      await worker.exited;
    },
  };
}
