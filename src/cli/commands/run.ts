import { GenpipeError } from '../../api/errors.js';
import { RETRY_STATUSES, type RetryStatus } from '../../run/runner.js';
import { parseAdoption } from '../../run/attempt/adopt.js';
import { webhookFlags } from '../../run/polling/webhook-receiver.js';
import { parseRedisUrl, redisUrlOf } from '../../fleet/redis.js';
import { resumeRun, startRun, type SessionOptions } from '../../session/run-session.js';
import { connectionFlags, noExtraPositionals, parse, positional } from '../args.js';
import { defineCommand, tableOf, type OptionTable } from '../options.js';
import { CONNECTION, EMULATOR, REDIS } from '../shared-options.js';
import { confirmSpend } from '../../session/confirm-spend.js';
import { numberFlag } from '../number-flag.js';
import type { CliIO } from '../io.js';
import { EXIT, exitCodeFor } from '../../session/exit-codes.js';
import { diskRefusal } from '../../session/disk-refusal.js';

const RUN_OPTIONS = {
  out: { type: 'string', value: 'DIR', defaultText: 'runs/', help: 'where run directories go: DIR/<pipeline>/<run-id>/' },
  concurrency: { type: 'string', value: 'N', defaultText: "the manifest's, else 8", help: 'instances in flight at once' },
  rate: {
    type: 'string',
    value: 'R[/s]',
    unit: 'submits per second',
    defaultText: '20',
    help: 'submits per second; a 429 slows the whole run down',
  },
  budget: {
    type: 'string',
    value: 'USD',
    unit: 'US dollars',
    help: 'stop submitting before the estimate goes over USD (exit 3)',
  },
  'confirm-over': {
    type: 'string',
    value: 'USD',
    unit: 'US dollars',
    defaultText: '100',
    help: 'with no budget, a run estimated over USD asks first on a terminal and is refused elsewhere (exit 2); a resume never asks',
  },
  yes: { type: 'boolean', help: 'run without asking, whatever the estimate' },
  'fail-fast': { type: 'boolean', help: 'stop submitting at the first failure' },
  'skip-invalid': {
    type: 'boolean',
    help: 'set aside the CSV rows with a bad cell (a bad URL, an empty cell a step reads, a value the model refuses) and run the others, as on_invalid: skip on every CSV axis; the rows are listed with their row, column and reason, and the run exits 1. A problem of the file itself (not UTF-8, a missing column) is still refused. A new run only',
  },
  resume: {
    type: 'string',
    value: 'RUN_DIR',
    help: 'continue the run in RUN_DIR with this manifest (as genpipe resume does with the one it was started with)',
  },
  'resubmit-unknown': { type: 'boolean', help: 'on resume, resend submits whose fate is unknown (no key, no answer)' },
  adopt: {
    type: 'string',
    value: 'INSTANCE=REQUEST_ID',
    multiple: true,
    help: 'on resume, follow a request the service took whose id the journal could not record (a full disk), as the run printed the pair on stderr: journaled as adopted, followed and downloaded, never sent again. Refused (exit 2, nothing sent) for an instance not in the plan, already final, or with a journaled request id',
  },
  'accept-corrupt': {
    type: 'boolean',
    help: 'on resume, go past damaged journal lines (refused otherwise, exit 2): every instance such a line could belong to becomes unknown (see --retry unknown)',
  },
  retry: {
    type: 'string',
    value: 'LIST',
    help: 'on resume, start a new attempt, with a new Idempotency-Key, of the instances that ended in any of LIST: failed, canceled, nsfw, unknown (comma-separated); rejected: the completed ones rejected in `genpipe review`, made again with a seed outside the sweep (their files move to outputs/<step>/rejected/)',
  },
  only: {
    type: 'string',
    value: 'SELECTOR',
    multiple: true,
    help: "run only these instances, ids and keys unchanged: a step, or a step with axis values as in instance ids ('sheets[tier=cats,seed=3]')",
  },
  limit: {
    type: 'string',
    value: 'N',
    help: "run at most the first N (selected) instances of each step; a for_each step follows the selected upstream ones. A resume keeps the run's subset",
  },
  reuse: {
    type: 'boolean',
    help: 'reuse the results of earlier runs of this pipeline under the same --out: an instance whose model and input completed before is linked, not sent (US$0)',
  },
  'retry-budget': {
    type: 'string',
    value: 'N',
    defaultText: '200',
    help: 'transient errors and refusals (429, busy) tolerated over the whole run before it stops, resumable, with exit 5',
  },
  'allow-changed': { type: 'boolean', help: 'on resume, accept a manifest whose plan changed' },
  'cancel-on-abort': { type: 'boolean', help: 'on Ctrl-C, cancel requests that are still queued' },
  'webhook-url': {
    type: 'string',
    value: 'URL',
    help: 'with --listen, track requests by webhook: the service reaches the receiver at URL (a random per-run token is appended); polling stays on as a slow fallback',
  },
  listen: { type: 'string', value: 'HOST:PORT', help: 'with --webhook-url, where the webhook receiver listens' },
  overlap: {
    type: 'string',
    value: 'POLICY',
    defaultText: 'skip',
    help: 'another run of this pipeline holds the lock: skip (exit 4), wait for it, or allow both',
  },
  'break-lock': {
    type: 'boolean',
    help: "take the pipeline's lock even from a live run on another host (which stops when it notices, exit 4); this run waits out its heartbeat (a sixth of GENPIPE_LOCK_STALE_MS, default 60 s, plus 2 s) before sending anything",
  },
  force: { type: 'boolean', help: 'with --break-lock, also from a run alive on this host (refused otherwise, naming its pid)' },
  notify: {
    type: 'string',
    value: 'URL',
    multiple: true,
    help: "when the run ends, or cannot start, POST its summary (JSON) to URL (https, or http to this machine); adds to the manifest's notify: block. Retried for at most 30 s; a failed delivery is a warning, never the run's exit code",
  },
  redis: {
    type: 'string',
    value: 'URL',
    env: 'GENPIPE_REDIS_URL',
    help: 'run on a fleet (see genpipe worker): instances go through the Redis queue at URL and any worker on it submits and follows them; this process journals, downloads and reports as usual, and works jobs itself too unless --no-local-worker. Redis unreachable: exit 5',
  },
  queue: REDIS.queue,
  'no-local-worker': { type: 'boolean', help: "with --redis, leave every job to the fleet's workers" },
  quiet: { type: 'boolean', help: 'print only errors and the summary' },
  'json-logs': { type: 'boolean', help: 'one JSON event per line on stdout, for log shippers' },
  'metrics-file': {
    type: 'string',
    value: 'PATH',
    help: "when the run ends, however it ends, write its figures to PATH in the Prometheus text format, for node_exporter's textfile collector (a cron job's metrics): runs, instances and money by model, requests by route and status, 429s, throttling, journal fsync latency, the exit code. Written to a temporary file, then renamed",
  },
  'progress-interval': {
    type: 'string',
    value: 'S',
    unit: 'seconds',
    defaultText: '10',
    help: 'outside a terminal, seconds between progress lines',
  },
  ...EMULATOR,
} as const satisfies OptionTable;

const RUN_GROUPS = [{ title: 'Options', options: RUN_OPTIONS }, CONNECTION] as const;
const RUN_TABLE = tableOf(RUN_GROUPS);

export const runCommand = defineCommand({
  name: 'run',
  usage: `Usage: genpipe run <manifest> [options]
       genpipe run <manifest> --resume RUN_DIR [options]

Runs every instance of the manifest and writes runs/<pipeline>/<run-id>/ with plan.json,
journal.jsonl, outputs/, outputs.csv and the cost report (report.json, report.csv, report.md).
Exit codes: 0 all succeeded, 1 some failed or CSV rows were skipped as invalid, 2 invalid input, 3 the budget stopped the run,
4 another run holds the lock, 5 the service is unreachable or refused the credentials,
130 interrupted (resume it).`,
  groups: RUN_GROUPS,
  run: (argv, io) => runOrResume(argv, io, 'run'),
});

export const resumeCommand = defineCommand({
  name: 'resume',
  usage: `Usage: genpipe resume <run_dir> [options]

Reads the run's journal and continues: finished instances are skipped, submitted ones are
followed, an intent without an answer is resent with the same Idempotency-Key where the model
honours one, and reported as unknown otherwise.`,
  groups: RUN_GROUPS,
  run: (argv, io) => runOrResume(argv, io, 'resume'),
});

/** `--retry failed,canceled`: the outcomes to start over. */
function retryStatuses(value: string | undefined): ReadonlySet<RetryStatus> | undefined {
  if (value === undefined) return undefined;
  const wanted = value.split(',').map((s) => s.trim());
  const unknown = wanted.filter((s) => !(RETRY_STATUSES as readonly string[]).includes(s));
  if (unknown.length > 0 || wanted.length === 0) {
    throw new GenpipeError(
      'invalid_input',
      `--retry takes a comma-separated list of ${RETRY_STATUSES.join(', ')}; "${unknown[0] ?? value}" is none of them.`,
    );
  }
  return new Set(wanted as RetryStatus[]);
}

/** The flags of `genpipe run` and `genpipe resume`, parsed into a session's options (src/session/). */
async function runOrResume(argv: readonly string[], io: CliIO, command: 'run' | 'resume'): Promise<number> {
  const { values, positionals } = parse(argv, RUN_TABLE, command);
  const overlap = values.overlap ?? 'skip';
  if (overlap !== 'skip' && overlap !== 'wait' && overlap !== 'allow')
    throw new GenpipeError('invalid_input', `--overlap takes skip, wait or allow, not "${overlap}".`);
  const listen = webhookFlags(values['webhook-url'], values.listen);
  const redisUrl = redisUrlOf(values.redis, io.env, values.config);
  const redis = redisUrl === undefined ? undefined : parseRedisUrl(redisUrl);
  if (!redis && (values.queue !== undefined || values['no-local-worker']))
    throw new GenpipeError(
      'invalid_input',
      '--queue and --no-local-worker are fleet options: use them with --redis URL (or GENPIPE_REDIS_URL).',
    );
  if (redis && listen && values['no-local-worker'])
    throw new GenpipeError(
      'invalid_input',
      "With --redis, --webhook-url and --listen serve the coordinator's own worker, and --no-local-worker has none: give them to each genpipe worker instead.",
    );
  let resumeDir = values.resume;
  if (command === 'resume') {
    resumeDir = positional(positionals, 0, 'a run directory', 'resume');
    noExtraPositionals(positionals, 1, 'resume');
  } else {
    noExtraPositionals(positionals, 1, 'run');
  }
  if (resumeDir !== undefined && values['skip-invalid'])
    throw new GenpipeError(
      'invalid_input',
      '--skip-invalid chooses the rows of a new run; a resume runs the rows its run recorded (those it set aside stay aside).',
    );
  const adopt = values.adopt?.map(parseAdoption);
  if (adopt !== undefined && resumeDir === undefined)
    throw new GenpipeError('invalid_input', '--adopt follows a request of an earlier start: use it with genpipe resume RUN_DIR.');
  // `--metrics-file`: the run's figures, written on every way it ends (textfile.ts).
  const metricsFile = values['metrics-file'];
  const metrics = metricsFile === undefined ? undefined : new (await import('../../metrics/textfile.js')).RunMetrics();
  let runDir: string | undefined;
  const options: SessionOptions = {
    connection: connectionFlags(values),
    emulator: values.emulator === true,
    outDir: values.out,
    concurrency: numberFlag(values.concurrency, '--concurrency', { integer: true, min: 1 }),
    // `--rate 5` or `--rate 5/s`.
    ratePerSecond: numberFlag(values.rate?.replace(/\/s$/, ''), '--rate', { min: 0.01 }),
    budgetUsd: numberFlag(values.budget, '--budget', { min: 0 }),
    failFast: values['fail-fast'],
    resubmitUnknown: values['resubmit-unknown'],
    adopt,
    acceptCorrupt: values['accept-corrupt'],
    retry: retryStatuses(values.retry),
    reuse: values.reuse,
    retryBudget: numberFlag(values['retry-budget'], '--retry-budget', { integer: true, min: 0 }),
    allowChanged: values['allow-changed'],
    breakLock: values['break-lock'],
    force: values.force,
    cancelOnAbort: values['cancel-on-abort'],
    webhook: listen,
    overlap,
    confirmOverUsd: numberFlag(values['confirm-over'], '--confirm-over', { min: 0 }),
    yes: values.yes,
    only: values.only,
    limit: numberFlag(values.limit, '--limit', { integer: true, min: 1 }),
    notify: values.notify,
    skipInvalid: values['skip-invalid'],
    fleet: redis ? { redis, queue: values.queue, localWorker: !values['no-local-worker'] } : undefined,
    out: (t) => io.out(t),
    err: (t) => io.err(t),
    signal: io.signal,
    env: io.env,
    tty: io.tty,
    quiet: values.quiet,
    jsonLogs: values['json-logs'],
    progressIntervalMs: progressIntervalMs(values['progress-interval']),
    onRunDir: async (dir) => {
      runDir = dir;
      await io.onRunDir?.(dir);
    },
    observer: metrics?.observer,
    confirmSpend: (spend) => confirmSpend(spend, io),
  };
  const session = async (): Promise<number> => {
    if (resumeDir === undefined) return (await startRun(positional(positionals, 0, 'a manifest file', 'run'), options)).exitCode;
    // `genpipe run M --resume DIR` runs M; `genpipe resume DIR` the manifest the run was started with.
    return (
      await resumeRun(resumeDir, {
        ...options,
        manifest: command === 'run' ? positional(positionals, 0, 'a manifest file', 'run') : undefined,
      })
    ).exitCode;
  };
  if (!metrics || metricsFile === undefined) return session();
  let exitCode: number = EXIT.internal;
  try {
    exitCode = await session();
    return exitCode;
  } catch (error) {
    exitCode = exitCodeOfError(error);
    throw error;
  } finally {
    await writeMetricsFile(metricsFile, () => metrics.write(metricsFile, { runDir: runDir ?? resumeDir, exitCode }), io);
  }
}

/** The exit code a failure ends genpipe with (report-error.ts says it; this only needs the number). */
function exitCodeOfError(error: unknown): number {
  const told = diskRefusal(error) ?? error;
  return told instanceof GenpipeError ? exitCodeFor(told.code) : EXIT.internal;
}

/** A metrics file that cannot be written is a warning: the run's own exit code stands. */
async function writeMetricsFile(path: string, write: () => Promise<void>, io: CliIO): Promise<void> {
  try {
    await write();
  } catch (error) {
    io.err(`warning: could not write the metrics file ${path}: ${error instanceof Error ? error.message : String(error)}`);
  }
}

function progressIntervalMs(value: string | undefined): number | undefined {
  // At most a day: a timer of 2^31 ms or more fires at once, every millisecond.
  const seconds = numberFlag(value, '--progress-interval', { integer: true, min: 1, max: 86_400 });
  return seconds === undefined ? undefined : seconds * 1000;
}
