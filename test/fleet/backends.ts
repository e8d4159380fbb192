// The conformance suites' backends: every scenario that runs `genpipe run` runs it locally and on
// the fleet (BullMQ on a redis-server of the suite's own, a `genpipe worker` process of the
// scenario's own, the coordinator with --no-local-worker so the worker does all the service work).
import { startWorkerProcess, type WorkerProcess } from './fleet-helpers.js';

export const BACKENDS = ['local', 'bullmq'] as const;
export type Backend = (typeof BACKENDS)[number];

export interface BackendRun {
  /** Flags to add to `genpipe run` / `genpipe resume`. */
  flags: string[];
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
  if (backend === 'local') return { flags: [], stop: async () => {} };
  const queue = `conformance-${process.pid}-${++queues}`;
  const worker: WorkerProcess = await startWorkerProcess(redisUrl, serviceUrl, queue, ['--queue', queue, ...workerFlags]);
  return {
    flags: ['--redis', redisUrl, '--queue', queue, '--no-local-worker'],
    stop: async () => {
      worker.child.kill('SIGKILL');
      await worker.exited;
    },
  };
}
