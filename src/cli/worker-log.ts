/**
 * What `genpipe worker` prints: plain lines (the `ready` line and one line per job on stdout,
 * warnings on stderr), or with `--json-logs` one JSON event per line on stdout, as a run's are
 * (docs/reference/events.md).
 */
import type { JobLog } from '../fleet/worker.js';
import { redactingReplacer } from '../util/redact.js';
import type { CliIO } from './io.js';

export interface WorkerLog {
  /** The first line: `ready: …`, or a `worker_ready` event. */
  ready(text: string, fields: Record<string, unknown>): void;
  /** One finished job. */
  job(job: JobLog): void;
  /** Anything else the worker says (warnings, stopping). */
  say(text: string): void;
}

export function workerLog(io: CliIO, worker: string, json: boolean): WorkerLog {
  const event = (type: string, fields: Record<string, unknown>): void =>
    io.out(JSON.stringify({ time: new Date().toISOString(), type, worker, ...fields }, redactingReplacer));
  if (json)
    return {
      ready: (_text, fields) => event('worker_ready', fields),
      job: (job) => event('job_finished', { ...job }),
      say: (message) => event('worker_message', { message }),
    };
  return {
    ready: (text) => io.out(text),
    job: (j) =>
      io.out(
        `worker ${worker}: job ${j.instance} of run ${j.runId} (${j.model}): ${j.outcome} in ${(j.durationMs / 1000).toFixed(1)} s, from ${j.startedAt} to ${j.endedAt}`,
      ),
    say: (text) => io.err(text),
  };
}
