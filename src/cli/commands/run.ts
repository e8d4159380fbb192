import { dirname, join, resolve } from 'node:path';
import { GenerationClient } from '../../api/client.js';
import { resolveConfig, type ClientConfig } from '../../api/config.js';
import { assertPricedUnderBudget, budgetOf, DEFAULT_CONFIRM_OVER_USD, spendToConfirm } from '../../plan/guards.js';
import { GenpipeError } from '../../api/errors.js';
import type { OptionsCatalog } from '../../api/wire.js';
import { loadManifestFile } from '../../manifest/load.js';
import { buildPlan } from '../../plan/plan.js';
import { progressFor } from '../../report/progress.js';
import { writeCostReport } from '../../report/write-report.js';
import type { RunCounts, RunSummary } from '../../run/events.js';
import type { RunEnd } from '../../notify/notify-message.js';
import { notifyRunEnd } from '../../notify/notify-run.js';
import { resolveNotifyTargets } from '../../notify/notify-targets.js';
import { redact } from '../../util/redact.js';
import { acquirePipelineLock, type PipelineLock } from '../../run/lock.js';
import { createRunDir, newRunId, planHash, readPlanFile, type PlanFile } from '../../run/run-dir.js';
import { parseSelector, type Selection } from '../../plan/selection.js';
import { RETRY_STATUSES, runPlan, type RetryStatus } from '../../run/runner.js';
import { readPollPrior } from '../../run/poll-prior.js';
import { webhookFlags, WebhookReceiver } from '../../run/webhook-receiver.js';
import { CONNECTION_HELP, CONNECTION_OPTIONS, connectionFlags, noExtraPositionals, parse, positional } from '../args.js';
import type { Command } from '../command.js';
import { confirmSpend } from '../confirm-spend.js';
import { EMULATOR_FLAG_HELP, embeddedConfig, startEmbeddedEmulator } from '../embedded-emulator.js';
import { EXIT, exitCodeFor } from '../exit-codes.js';
import { formatCount } from '../../util/format-usd.js';
import { numberFlag } from '../number-flag.js';
import { checkRedis, DEFAULT_QUEUE, parseRedisUrl, redisUrlOf } from '../../fleet/redis.js';
import type { FleetDispatch, FleetDispatchOptions } from '../../fleet/dispatch.js';
import type { FleetWorker } from '../../fleet/worker.js';
import type { CliIO } from '../io.js';
import { planSources } from '../plan-sources.js';
import { embeddedRunSentence, movedServiceWarning, resumeFlags, serviceRecord } from '../run-service.js';

const RUN_OPTIONS = {
  ...CONNECTION_OPTIONS,
  emulator: { type: 'boolean' },
  out: { type: 'string' },
  concurrency: { type: 'string' },
  rate: { type: 'string' },
  budget: { type: 'string' },
  'fail-fast': { type: 'boolean' },
  resume: { type: 'string' },
  'resubmit-unknown': { type: 'boolean' },
  'accept-corrupt': { type: 'boolean' },
  retry: { type: 'string' },
  reuse: { type: 'boolean' },
  'retry-budget': { type: 'string' },
  'allow-changed': { type: 'boolean' },
  'break-lock': { type: 'boolean' },
  'cancel-on-abort': { type: 'boolean' },
  quiet: { type: 'boolean' },
  'json-logs': { type: 'boolean' },
  'progress-interval': { type: 'string' },
  'webhook-url': { type: 'string' },
  listen: { type: 'string' },
  overlap: { type: 'string' },
  'confirm-over': { type: 'string' },
  yes: { type: 'boolean' },
  only: { type: 'string', multiple: true },
  limit: { type: 'string' },
  notify: { type: 'string', multiple: true },
  redis: { type: 'string' },
  queue: { type: 'string' },
  'no-local-worker': { type: 'boolean' },
} as const;

const RUN_HELP = `Options:
  --out DIR            where run directories go (default runs/): DIR/<pipeline>/<run-id>/
  --concurrency N      instances in flight at once (default: the manifest's, else 8)
  --rate R[/s]         submits per second (default 20); a 429 slows the whole run down
  --budget USD         stop submitting before the estimate goes over USD (exit 3)
  --confirm-over USD   with no budget, a run estimated over USD (default 100) asks first on a
                       terminal and is refused elsewhere (exit 2); a resume never asks
  --yes                run without asking, whatever the estimate
  --fail-fast          stop submitting at the first failure
  --resubmit-unknown   on resume, resend submits whose fate is unknown (no key, no answer)
  --accept-corrupt     on resume, go past damaged journal lines (refused otherwise, exit 2): every
                       instance such a line could belong to becomes unknown (see --retry unknown)
  --retry LIST         on resume, start a new attempt, with a new Idempotency-Key, of the instances
                       that ended in any of LIST: failed, canceled, nsfw, unknown (comma-separated);
                       rejected: the completed ones rejected in \`genpipe review\`, made again with
                       a seed outside the sweep (their files move to outputs/<step>/rejected/)
  --only SELECTOR      run only these instances, ids and keys unchanged: a step, or a step with
                       axis values as in instance ids ('sheets[tier=cats,seed=3]'); repeatable
  --limit N            run at most the first N (selected) instances of each step; a for_each step
                       follows the selected upstream ones. A resume keeps the run's subset
  --reuse              reuse the results of earlier runs of this pipeline under the same --out:
                       an instance whose model and input completed before is linked, not sent (US$0)
  --retry-budget N     transient errors and refusals (429, busy) tolerated over the whole run
                       before it stops, resumable, with exit 5 (default 200)
  --allow-changed      on resume, accept a manifest whose plan changed
  --cancel-on-abort    on Ctrl-C, cancel requests that are still queued
  --webhook-url URL --listen HOST:PORT
                       track requests by webhook: a receiver on HOST:PORT, reached by the
                       service at URL (a random per-run token is appended); polling stays on as
                       a slow fallback
  --overlap POLICY     another run of this pipeline holds the lock: skip (exit 4, the default),
                       wait for it, or allow both
  --break-lock         take the pipeline's lock even from a live run (which then stops, exit 4);
                       the displaced run is named on stderr
  --notify URL         when the run ends, POST its summary (JSON) to URL (https, or http to this
                       machine); repeatable, adds to the manifest's notify: block. Retried for
                       at most 30 s; a failed delivery is a warning, never the run's exit code
  --redis URL          run on a fleet (see genpipe worker): instances go through the Redis queue
                       at URL (or GENPIPE_REDIS_URL) and any worker on it submits and follows
                       them; this process journals, downloads and reports as usual, and works
                       jobs itself too unless --no-local-worker. Redis unreachable: exit 5
  --queue NAME         the fleet queue (default genpipe)
  --no-local-worker    with --redis, leave every job to the fleet's workers
  --quiet              print only errors and the summary
  --json-logs          one JSON event per line on stdout, for log shippers
  --progress-interval S
                       outside a terminal, seconds between progress lines (default 10)
${EMULATOR_FLAG_HELP}
${CONNECTION_HELP}`;

export const runCommand: Command = {
  name: 'run',
  help: `Usage: genpipe run <manifest> [options]
       genpipe run <manifest> --resume RUN_DIR [options]

Runs every instance of the manifest and writes runs/<pipeline>/<run-id>/ with plan.json,
journal.jsonl, outputs/, outputs.csv and the cost report (report.json, report.csv, report.md).
Exit codes: 0 all succeeded, 1 some failed, 2 invalid input, 3 the budget stopped the run,
4 another run holds the lock, 5 the service is unreachable or refused the credentials,
130 interrupted (resume it).

${RUN_HELP}`,
  run: (argv, io) => runOrResume(argv, io, 'run'),
};

export const resumeCommand: Command = {
  name: 'resume',
  help: `Usage: genpipe resume <run_dir> [options]

Reads the run's journal and continues: finished instances are skipped, submitted ones are
followed, an intent without an answer is resent with the same Idempotency-Key where the model
honours one, and reported as unknown otherwise.

${RUN_HELP}`,
  run: (argv, io) => runOrResume(argv, io, 'resume'),
};

/**
 * A line now and then while a huge plan is checked before anything is spent (the first after 2 s,
 * then every 10 s), so a run of millions says what it is doing from the start.
 */
function checkingProgress(io: CliIO): (checked: number, total: number) => void {
  const started = Date.now();
  let next = started + 2_000;
  return (checked, total) => {
    const now = Date.now();
    if (now < next) return;
    next = now + 10_000;
    io.err(`genpipe: checking every instance before anything is spent: ${formatCount(checked)} of ${formatCount(total)}.`);
  };
}

/** The subset a run recorded in plan.json, for its resume. */
function recordedSelection(previous: PlanFile): Selection | undefined {
  if (!previous.selection) return undefined;
  return { only: previous.selection.only.map(parseSelector), limit: previous.selection.limit ?? undefined };
}

/** `--retry failed,canceled`: the outcomes to start over. */
function retryStatuses(value: string | undefined): ReadonlySet<RetryStatus> | undefined {
  if (value === undefined) return undefined;
  const wanted = value.split(',').map((s) => s.trim());
  const unknown = wanted.filter((s) => !(RETRY_STATUSES as readonly string[]).includes(s));
  if (unknown.length > 0 || wanted.length === 0) {
    throw new GenpipeError('invalid_input', `--retry takes a comma-separated list of ${RETRY_STATUSES.join(', ')}; "${unknown[0] ?? value}" is none of them.`);
  }
  return new Set(wanted as RetryStatus[]);
}

async function runOrResume(argv: readonly string[], io: CliIO, command: 'run' | 'resume'): Promise<number> {
  const { values, positionals } = parse(argv, RUN_OPTIONS, command);
  const concurrency = numberFlag(values.concurrency, '--concurrency', { integer: true, min: 1 });
  // `--rate 5` or `--rate 5/s`.
  const rate = numberFlag(values.rate?.replace(/\/s$/, ''), '--rate', { min: 0.01 });
  const budget = numberFlag(values.budget, '--budget', { min: 0 });
  const progressIntervalS = numberFlag(values['progress-interval'], '--progress-interval', { integer: true, min: 1 });
  const retryBudget = numberFlag(values['retry-budget'], '--retry-budget', { integer: true, min: 0 });
  const retry = retryStatuses(values.retry);
  const confirmOverUsd = numberFlag(values['confirm-over'], '--confirm-over', { min: 0 }) ?? DEFAULT_CONFIRM_OVER_USD;
  const overlap = values.overlap ?? 'skip';
  if (overlap !== 'skip' && overlap !== 'wait' && overlap !== 'allow') throw new GenpipeError('invalid_input', `--overlap takes skip, wait or allow, not "${overlap}".`);
  const listen = webhookFlags(values['webhook-url'], values.listen);
  const redisUrl = redisUrlOf(values.redis, io.env, values.config);
  const redis = redisUrl === undefined ? undefined : parseRedisUrl(redisUrl);
  if (!redis && (values.queue !== undefined || values['no-local-worker'])) throw new GenpipeError('invalid_input', '--queue and --no-local-worker are fleet options: use them with --redis URL (or GENPIPE_REDIS_URL).');
  if (redis && listen && values['no-local-worker']) throw new GenpipeError('invalid_input', 'With --redis, --webhook-url and --listen serve the coordinator\'s own worker, and --no-local-worker has none: give them to each genpipe worker instead.');
  let resumeDir = values.resume;
  if (command === 'resume') {
    resumeDir = positional(positionals, 0, 'a run directory', 'resume');
    noExtraPositionals(positionals, 1, 'resume');
  } else {
    noExtraPositionals(positionals, 1, 'run');
  }
  const limit = numberFlag(values.limit, '--limit', { integer: true, min: 1 });
  const only = values.only?.map(parseSelector);
  if (resumeDir && (only !== undefined || limit !== undefined)) {
    throw new GenpipeError('invalid_input', '--only and --limit choose the instances of a new run; a resume runs the subset its run started with (recorded in plan.json).');
  }
  if (retry && !resumeDir) throw new GenpipeError('invalid_input', '--retry starts new attempts of instances of an earlier run: use it with `genpipe resume RUN_DIR`.');
  const previous = resumeDir ? await readPlanFile(resumeDir) : undefined;
  // `genpipe resume DIR` runs the manifest the run was started with.
  const manifestPath = command === 'resume' && previous ? previous.manifest : positional(positionals, 0, 'a manifest file', 'run');
  const loaded = loadManifestFile(manifestPath);
  // Checked before anything is sent: a bad URL or a missing url_env variable exits 2.
  const notifyTargets = resolveNotifyTargets(loaded, values.notify ?? [], io.env);

  // A resume talks to the service its run recorded, unless told otherwise (run-service.ts).
  const flags = previous && resumeDir ? resumeFlags(previous, resumeDir, connectionFlags(values), io.env, values.emulator === true) : connectionFlags(values);
  const embedded = values.emulator ? await startEmbeddedEmulator() : undefined;
  let config: ClientConfig;
  try {
    config = embedded ? embeddedConfig(flags, embedded) : resolveConfig({ flags, env: io.env });
  } catch (error) {
    await embedded?.close();
    throw error;
  }
  if (previous && resumeDir) {
    if (previous.service?.embedded_emulator) io.err(embeddedRunSentence(resumeDir));
    const moved = movedServiceWarning(previous.service, config, embedded !== undefined);
    if (moved) io.err(moved);
  }
  if (redis) {
    try {
      // Unreachable at start: exit 5 with one sentence, before a run directory exists.
      await checkRedis(redis);
    } catch (error) {
      await embedded?.close();
      throw error;
    }
  }
  const client = new GenerationClient(config);
  const sources = planSources(flags, io, embedded, client);
  let catalog: OptionsCatalog | undefined;
  const fetchCatalog = sources.options.catalog;
  // The run's id and start are known before the plan: templates may read them (`{{ run.date }}`),
  // and a resume renders them as the run first did.
  const startedAt = previous ? new Date(previous.createdAt) : new Date();
  const newId = newRunId(startedAt);
  try {
    const plan = await buildPlan(loaded, {
      ...sources.options,
      run: { id: previous?.runId ?? newId, startedAt },
      select: previous ? recordedSelection(previous) : only !== undefined || limit !== undefined ? { only, limit } : undefined,
      fingerprint: true,
      signal: io.signal,
      onProgress: values.quiet || values['json-logs'] ? undefined : checkingProgress(io),
      catalog: fetchCatalog && (async () => (catalog ??= await fetchCatalog())),
      // Money guards (plan/guards.ts) need only the counts: they run before the instances are
      // checked, so a plan of millions is refused at once, and before the lock, the run directory
      // and any request that spends.
      beforeInstances: async (counted) => {
        const budgetGuard = budgetOf(counted, budget);
        assertPricedUnderBudget(counted, budgetGuard);
        // The embedded emulator bills nothing, and a resume was agreed to when its run started.
        const spend = previous || embedded || values.yes ? undefined : spendToConfirm(counted, { budget: budgetGuard, confirmOverUsd });
        if (spend) await confirmSpend(spend, io);
      },
    });
    const hash = planHash(plan);
    let runDir: string;
    let runId: string;
    let lock: PipelineLock;
    if (previous && resumeDir) {
      if (previous.planHash !== hash && !values['allow-changed']) {
        throw new GenpipeError('invalid_input', `The plan of ${manifestPath} changed since run ${previous.runId} started; resume with --allow-changed to accept it, or start a new run.`);
      }
      runDir = resolve(resumeDir);
      runId = previous.runId;
      lock = await acquirePipelineLock(join(dirname(runDir), '.lock'), runId, overlap, io.signal, { breakLock: values['break-lock'] === true });
    } else {
      const root = resolve(values.out ?? (loaded.manifest.defaults?.output?.dir ? resolve(loaded.dir, loaded.manifest.defaults.output.dir) : 'runs'));
      // The lock first: a run refused for overlapping leaves nothing behind.
      runId = newId;
      lock = await acquirePipelineLock(join(root, plan.name, '.lock'), runId, overlap, io.signal, { breakLock: values['break-lock'] === true });
      try {
        ({ dir: runDir } = await createRunDir(root, plan, resolve(manifestPath), hash, startedAt, runId, serviceRecord(config, embedded !== undefined)));
      } catch (error) {
        await lock.release();
        throw error;
      }
    }
    await io.onRunDir?.(runDir);
    if (lock.displaced) {
      const { owner, reason } = lock.displaced;
      const who = owner ? `run ${owner.runId} (pid ${owner.pid} on ${owner.host}, since ${owner.startedAt})` : 'a lock with no readable owner';
      io.err(reason === 'broken' ? `warning: --break-lock took the pipeline's lock from ${who}, which was still live; it stops when it notices (exit 4).` : `note: took over the stale lock of ${who}.`);
    }
    const progress = progressFor(
      { out: (t) => io.out(t), err: (t) => io.err(t) },
      {
        tty: io.tty === true,
        jsonLogs: values['json-logs'] === true,
        quiet: values.quiet === true,
        budgetUsd: budget ?? loaded.manifest.defaults?.budget_usd,
        steps: plan.steps,
        ...(progressIntervalS === undefined ? {} : { intervalMs: progressIntervalS * 1000 }),
      },
    );
    let webhook: WebhookReceiver | undefined;
    let fleet: Fleet | undefined;
    let summary: RunSummary;
    const runStarted = Date.now();
    const ended = (fields: Pick<RunEnd, 'outcome' | 'exitCode' | 'message'> & Partial<RunEnd>): RunEnd => ({ pipeline: plan.name, runId, runDir, counts: emptyCounts(), durationMs: Date.now() - runStarted, ...fields });
    try {
      if (listen) webhook = await WebhookReceiver.start(listen);
      if (redis) {
        const polling = loaded.manifest.defaults?.polling;
        const poll = polling ? { baseMs: polling.initial_ms, capMs: polling.max_ms, floorMs: polling.min_ms } : undefined;
        fleet = await openFleet({ redis, queue: values.queue ?? DEFAULT_QUEUE, runId, say: (line) => io.err(line), poll }, values['no-local-worker'] ? undefined : { client, concurrency: concurrency ?? loaded.manifest.defaults?.concurrency ?? 8, webhook });
      }
      summary = await runPlan({
        plan,
        client,
        runDir,
        runId,
        planHash: hash,
        // A run that lost its lock (taken over, or its folder gone) stops as on Ctrl-C; see below.
        signal: AbortSignal.any([io.signal, lock.signal]),
        catalog,
        concurrency,
        ratePerSecond: rate,
        budgetUsd: budget,
        failFast: values['fail-fast'],
        resubmitUnknown: values['resubmit-unknown'],
        acceptCorrupt: values['accept-corrupt'],
        serviceForgotten: previous?.service?.embedded_emulator === true && embedded !== undefined,
        retry,
        retryBudget,
        // The first polls aim at how long this pipeline's requests took in its earlier runs.
        pollPrior: await readPollPrior(runDir),
        // Recorded with the run: a resume reuses too, unless the run never did (run-options.ts).
        reuse: values.reuse ? true : undefined,
        confirmOverUsd: values['confirm-over'] === undefined ? undefined : confirmOverUsd,
        executor: redis ? 'redis' : undefined,
        cancelOnAbort: values['cancel-on-abort'],
        // On a fleet the workers follow the requests (the coordinator's own worker with this receiver).
        webhook: fleet ? undefined : webhook,
        dispatch: fleet?.dispatch,
        onEvent: progress.listener,
      });
    } catch (error) {
      progress.stop();
      await fleet?.close();
      await webhook?.close();
      await lock.release();
      // The run stopped on an error after its directory existed: the team hears of it too.
      const code = error instanceof GenpipeError ? exitCodeFor(error.code) : EXIT.internal;
      await notifyRunEnd(notifyTargets, ended({ outcome: code === EXIT.interrupted ? 'aborted' : 'failed', exitCode: code, message: redact(error instanceof Error ? error.message : String(error)) }), undefined, { err: io.err, quiet: values.quiet });
      throw error;
    }
    progress.stop();
    await fleet?.close();
    await webhook?.close();
    await lock.release();
    const report = await writeCostReport(runDir, { creditsPerUsd: config.creditsPerUsd });
    // Another process took the lock over: this run stopped, resumable; exit 4 with its sentence.
    const lockLost = lock.signal.aborted && !io.signal.aborted;
    const exitCode = lockLost ? EXIT.locked : exitCodeOf(summary);
    const lostMessage = lockLost ? redact(lock.signal.reason instanceof Error ? lock.signal.reason.message : 'The pipeline\'s lock was taken over.') : undefined;
    await notifyRunEnd(
      notifyTargets,
      ended({ outcome: lockLost ? 'stopped' : summary.outcome, exitCode, message: lostMessage ?? summary.message, counts: summary.counts, durationMs: summary.durationMs }),
      report,
      { err: io.err, quiet: values.quiet },
    );
    if (lockLost) throw lock.signal.reason;
    return exitCode;
  } finally {
    await sources.close();
    await client.close();
    await embedded?.close();
  }
}

interface Fleet {
  dispatch: FleetDispatch;
  close(): Promise<void>;
}

/** The coordinator's side of a fleet run: its dispatch through the queue and, unless told not to, a worker of its own. */
async function openFleet(options: FleetDispatchOptions, local: { client: GenerationClient; concurrency: number; webhook: WebhookReceiver | undefined } | undefined): Promise<Fleet> {
  const { FleetDispatch } = await import('../../fleet/dispatch.js');
  const dispatch = await FleetDispatch.open(options);
  let worker: FleetWorker | undefined;
  if (local) {
    const { startFleetWorker, defaultWorkerName } = await import('../../fleet/worker.js');
    worker = await startFleetWorker({ redis: options.redis, queue: options.queue, client: local.client, concurrency: local.concurrency, name: `${defaultWorkerName()}-coordinator`, say: options.say, webhook: local.webhook });
  }
  return {
    dispatch,
    close: async () => {
      // The local worker hands back what it still holds at once: the run is over or interrupted.
      await worker?.close(0);
      await dispatch.close();
    },
  };
}

const emptyCounts = (): RunCounts => ({ completed: 0, failed: 0, nsfw: 0, canceled: 0, unknown: 0, pending: 0, rerolled: 0, reused: 0 });

export function exitCodeOf(summary: RunSummary): number {
  // The service could not be reached, or kept failing until the retry budget ran out.
  if (summary.stopReason === 'unreachable' || summary.stopReason === 'retry_budget') return EXIT.unavailable;
  switch (summary.outcome) {
    case 'completed':
      return EXIT.ok;
    case 'budget':
      return EXIT.budget;
    case 'aborted':
      return EXIT.interrupted;
    default:
      return EXIT.failed;
  }
}
