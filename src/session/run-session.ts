/**
 * A run session: the whole life of one start of a run, as a library. `startRun`
 * and `resumeRun` own, in one place, what every entry point needs: the service (flags, the
 * environment, the config file, or the embedded emulator), the spend guard, the lock, the run
 * directory, the options the run records, the executor (this process, or a fleet's Redis queue),
 * the report and the notifications. `genpipe run`, `genpipe resume`, scheduled ticks and fleet
 * coordinators all go through here; the CLI only parses flags and prints.
 *
 * Expected failures are thrown as GenpipeError (the CLI maps their codes to exit codes); a run that
 * ends resolves with its exit code (cli/exit-codes.ts), its summary and its report.
 */
import { diskRefusal, setWritingFolder } from './disk-refusal.js';
import { rm, stat } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { GenerationClient } from '../api/client.js';
import { resolveConfig, type ClientConfig, type ConfigFlags } from '../api/config.js';
import { within } from '../util/within.js';
import { GenpipeError } from '../api/errors.js';
import type { OptionsCatalog } from '../api/wire.js';
import { EXIT, exitCodeFor } from './exit-codes.js';
import { embeddedConfig, startEmbeddedEmulator, type EmbeddedEmulator } from './embedded-emulator.js';
import { planSources } from './plan-sources.js';
import { confirmSpend } from './confirm-spend.js';
import { reuseHint } from './reuse-hint.js';
import type { QueueExecutor, QueueExecutorOptions } from '../fleet/queue-executor.js';
import type { RunSinks } from '../sink/run-sinks.js';
import { adapterFor } from '../models/registry.js';
import { checkRedis, DEFAULT_QUEUE, redisCommands, type RedisTarget } from '../fleet/redis.js';
import type { FleetWorker } from '../fleet/worker.js';
import { loadManifestFile } from '../manifest/load.js';
import type { RunEnd } from '../notify/notify-message.js';
import { notifyRunEnd } from '../notify/notify-run.js';
import { markNotified, tellNotStarted } from './not-started.js';
import { resolveNotifyTargets } from '../notify/notify-targets.js';
import { assertPricedUnderBudget, budgetOf, DEFAULT_CONFIRM_OVER_USD, spendToConfirm, type BigSpend } from '../plan/guards.js';
import { buildPlan, type Plan } from '../plan/plan.js';
import { parseSelector, type Selector } from '../plan/selection.js';
import type { CostSummary } from '../report/cost-report.js';
import { progressFor } from '../report/progress.js';
import { writeCostReport } from '../report/write-report.js';
import { reviewWaitSentence } from '../review/review-wait.js';
import { decidedIds, decisions } from '../review/review-store.js';
import { galleryView } from '../gallery/run-view.js';
import { emptyCounts, type RunEvent, type RunListener, type RunSummary } from '../run/events.js';
import { acquirePipelineLock, lostToThisRun, type LockOptions, type PipelineLock } from '../run/lock/lock.js';
import { sleep } from '../api/sleep.js';
import { onHardExit } from '../util/exit-hooks.js';
import { readPollPrior } from '../run/polling/poll-prior.js';
import { createRunDir, newRunId, planHash, readPlanFile, type PlanFile, type StepSinkRecord } from '../run/files/run-dir.js';
import { readRunInputs } from '../run/files/run-inputs.js';
import { runPlan, type RetryStatus } from '../run/runner.js';
import { WebhookReceiver, type WebhookReceiverOptions } from '../run/polling/webhook-receiver.js';
import { formatCount } from '../util/format-usd.js';
import { redact } from '../util/redact.js';
import { embeddedRunSentence, movedServiceWarning, resumeFlags, serviceRecord } from './run-service.js';

/** Where a session writes for people, and what it is told from outside. */
export interface SessionIO {
  /** A result line (the summary). Default: nothing. */
  out?: ((text: string) => void) | undefined;
  /** Progress, warnings and errors. Default: nothing. */
  err?: ((text: string) => void) | undefined;
  /** Ctrl-C or SIGTERM: the run stops submitting, flushes and stays resumable. */
  signal?: AbortSignal | undefined;
  /** Credentials and addresses come from here too (HF_KEY, GENPIPE_BASE_URL...). Default: process.env. */
  env?: NodeJS.ProcessEnv | undefined;
  /** Progress bars instead of lines. */
  tty?: boolean | undefined;
  quiet?: boolean | undefined;
  jsonLogs?: boolean | undefined;
  /** Between two progress lines outside a terminal, ms. */
  progressIntervalMs?: number | undefined;
  /** Told the run's directory as soon as it exists or is resumed. */
  onRunDir?: ((runDir: string) => Promise<void>) | undefined;
  /** Every run event, besides the progress view. */
  onEvent?: RunListener | undefined;
  /**
   * A big spend with no budget (over confirmOverUsd): resolve to go on, throw to refuse. Default:
   * refused (exit 2), as nobody can be asked.
   */
  confirmSpend?: ((spend: BigSpend) => Promise<void>) | undefined;
}

export interface SessionOptions extends SessionIO {
  /** Service addresses and credentials files, as the connection flags give them. */
  connection?: ConfigFlags | undefined;
  /** Start the emulator in-process and use it (no credentials, nothing billed). */
  emulator?: boolean | undefined;
  /** Where run directories go (default: the manifest's output.dir, else `runs`). A new run only. */
  outDir?: string | undefined;
  concurrency?: number | undefined;
  ratePerSecond?: number | undefined;
  /** US$ over the run's whole life. A resume inherits the run's unless given. */
  budgetUsd?: number | undefined;
  failFast?: boolean | undefined;
  resubmitUnknown?: boolean | undefined;
  acceptCorrupt?: boolean | undefined;
  /** A resume: start new attempts of the instances that ended so (a new round). */
  retry?: ReadonlySet<RetryStatus> | undefined;
  reuse?: boolean | undefined;
  retryBudget?: number | undefined;
  /** A resume: accept a manifest whose plan changed. */
  allowChanged?: boolean | undefined;
  breakLock?: boolean | undefined;
  /** With breakLock, take the lock from a run alive on this host too (refused otherwise, with its pid). */
  force?: boolean | undefined;
  cancelOnAbort?: boolean | undefined;
  /** Track by webhook: a receiver on host:port, reached by the service at publicUrl (webhookFlags). */
  webhook?: WebhookReceiverOptions | undefined;
  overlap?: 'skip' | 'wait' | 'allow' | undefined;
  confirmOverUsd?: number | undefined;
  /** Run without asking, whatever the estimate. */
  yes?: boolean | undefined;
  /** A new run: only these instances (`--only`), at most this many per step (`--limit`). */
  only?: readonly string[] | undefined;
  limit?: number | undefined;
  /** More notify targets (`--notify URL`). */
  notify?: readonly string[] | undefined;
  /** Run on a fleet: instances through the Redis queue; this process coordinates. */
  fleet?: { redis: RedisTarget; queue?: string | undefined; localWorker?: boolean | undefined } | undefined;
  /** A resume only: run this manifest, not the one the run recorded (`genpipe run M --resume DIR`). */
  manifest?: string | undefined;
}

export interface RunResult {
  /** 0 completed, 1 some failed, 3 the budget stopped it, 5 the service stopped it, 130 interrupted. */
  exitCode: number;
  runDir: string;
  runId: string;
  summary: RunSummary;
  report: CostSummary;
}

/** Starts a new run of the manifest at `manifestPath`. */
export function startRun(manifestPath: string, options: SessionOptions = {}): Promise<RunResult> {
  return toldIfNotStarted({ manifestPath, resumeDir: undefined }, options);
}

/** Resumes the run in `runDir`: the options it recorded, the service it recorded, unless told otherwise. */
export async function resumeRun(runDir: string, options: SessionOptions = {}): Promise<RunResult> {
  return toldIfNotStarted({ manifestPath: options.manifest, resumeDir: runDir }, options);
}

/** A run that does not start still notifies, and leaves its record (not-started.ts). */
async function toldIfNotStarted(
  target: { manifestPath: string | undefined; resumeDir: string | undefined },
  o: SessionOptions,
): Promise<RunResult> {
  try {
    return await session(target, o);
  } catch (error) {
    await tellNotStarted(
      error,
      { ...target, outDir: o.outDir },
      { notify: o.notify, env: o.env ?? process.env, err: o.err ?? (() => {}), quiet: o.quiet },
    );
    throw error;
  }
}

/** A line now and then while a huge plan is checked before anything is spent (after 2 s, then every 10 s). */
function checkingProgress(err: (text: string) => void): (checked: number, total: number) => void {
  const started = Date.now();
  let next = started + 2_000;
  return (checked, total) => {
    const now = Date.now();
    if (now < next) return;
    next = now + 10_000;
    err(`genpipe: checking every instance before anything is spent: ${formatCount(checked)} of ${formatCount(total)}.`);
  };
}

/** The subset a run recorded in plan.json, for its resume. */
function recordedSelection(previous: PlanFile): { only: Selector[] | undefined; limit: number | undefined } | undefined {
  if (!previous.selection) return undefined;
  return { only: previous.selection.only.map(parseSelector), limit: previous.selection.limit ?? undefined };
}

async function session(target: { manifestPath: string | undefined; resumeDir: string | undefined }, o: SessionOptions): Promise<RunResult> {
  const err = o.err ?? (() => {});
  const out = o.out ?? (() => {});
  const env = o.env ?? process.env;
  const signal = o.signal ?? new AbortController().signal;
  const { resumeDir } = target;
  if (resumeDir && (o.only !== undefined || o.limit !== undefined)) {
    throw new GenpipeError(
      'invalid_input',
      '--only and --limit choose the instances of a new run; a resume runs the subset its run started with (recorded in plan.json).',
    );
  }
  if (o.retry && !resumeDir)
    throw new GenpipeError(
      'invalid_input',
      '--retry starts new attempts of instances of an earlier run: use it with `genpipe resume RUN_DIR`.',
    );
  const previous = resumeDir ? await readPlanFile(resumeDir) : undefined;
  if (resumeDir) await assertResumable(resumeDir);
  const manifestPath = target.manifestPath ?? previous?.manifest;
  if (manifestPath === undefined) throw new GenpipeError('invalid_input', 'A manifest file is needed to start a run.');
  const loaded = loadManifestFile(manifestPath);
  // Checked before anything is sent: a bad URL or a missing url_env variable exits 2.
  const notifyTargets = resolveNotifyTargets(loaded, o.notify ?? [], env);
  const only = o.only?.map(parseSelector);

  // A resume talks to the service its run recorded, unless told otherwise (run-service.ts).
  const given = o.connection ?? {};
  const flags = previous && resumeDir ? resumeFlags(previous, resumeDir, given, env, o.emulator === true) : given;
  const embedded: EmbeddedEmulator | undefined = o.emulator ? await startEmbeddedEmulator() : undefined;
  let config: ClientConfig;
  try {
    config = embedded ? embeddedConfig(flags, embedded) : resolveConfig({ flags, env });
  } catch (error) {
    await embedded?.close();
    throw error;
  }
  if (previous && resumeDir) {
    if (previous.service?.embedded_emulator) err(embeddedRunSentence(resumeDir));
    const moved = movedServiceWarning(previous.service, config, embedded !== undefined);
    if (moved) err(moved);
  }
  if (o.fleet) {
    try {
      // Unreachable at start: exit 5 with one sentence, before a run directory exists.
      await checkRedis(o.fleet.redis);
    } catch (error) {
      await embedded?.close();
      throw error;
    }
  }
  const client = new GenerationClient(config);
  const sources = planSources(flags, { env, signal }, embedded, client);
  let catalog: OptionsCatalog | undefined;
  const fetchCatalog = sources.options.catalog;
  // The run's id and start are known before the plan: templates may read them (`{{ run.date }}`),
  // and a resume renders them as the run first did.
  const startedAt = previous ? new Date(previous.createdAt) : new Date();
  const newId = newRunId(startedAt);
  try {
    // A resume plans from the inputs its run saved (CSV rows, presets), never from today's files.
    const recordedInputs = previous && resumeDir ? await readRunInputs(resolve(resumeDir), previous.inputs) : undefined;
    const plan = await buildPlan(loaded, {
      ...sources.options,
      run: { id: previous?.runId ?? newId, startedAt },
      select: previous ? recordedSelection(previous) : only !== undefined || o.limit !== undefined ? { only, limit: o.limit } : undefined,
      fingerprint: true,
      signal,
      onProgress: o.quiet || o.jsonLogs ? undefined : checkingProgress(err),
      catalog: fetchCatalog && (async () => (catalog ??= await fetchCatalog())),
      ...(recordedInputs ? { recorded: recordedInputs } : {}),
      // Money guards (plan/guards.ts) need only the counts: they run before the instances are
      // checked, so a plan of millions is refused at once, and before the lock, the run directory
      // and any request that spends.
      beforeInstances: async (counted) => {
        const budgetGuard = budgetOf(counted, o.budgetUsd);
        assertPricedUnderBudget(counted, budgetGuard);
        // The embedded emulator bills nothing, and a resume was agreed to when its run started.
        const spend =
          previous || embedded || o.yes
            ? undefined
            : spendToConfirm(counted, { budget: budgetGuard, confirmOverUsd: o.confirmOverUsd ?? DEFAULT_CONFIRM_OVER_USD });
        if (spend) await (o.confirmSpend ?? ((big) => confirmSpend(big, {})))(spend);
      },
    });
    // A raw model path is planned (instances, ids, prices) but cannot be run yet: refused before the
    // run directory and any spending, not after the steps before it were paid for.
    const unrunnable = plan.steps.find((step) => adapterFor(step.model) === undefined);
    if (unrunnable) {
      throw new GenpipeError(
        'invalid_input',
        `Step ${unrunnable.id} uses the raw model path ${unrunnable.model}, which genpipe can plan but not run yet; nothing was sent.`,
      );
    }
    const hash = planHash(plan);
    let runDir: string;
    let runId: string;
    let lock: PipelineLock;
    /** Each step's sink as plan.json records it: the gallery links public outputs there. */
    let stepSinkRecords: ReadonlyMap<string, StepSinkRecord> | undefined;
    if (previous && resumeDir) {
      // --allow-changed accepts a changed plan of the same pipeline, never another pipeline's.
      if (previous.pipeline !== plan.name) {
        throw new GenpipeError(
          'invalid_input',
          `${manifestPath} is the pipeline ${plan.name}, but run ${previous.runId} is of the pipeline ${previous.pipeline}; resume a run with its own manifest.`,
        );
      }
      if (previous.planHash !== hash && !o.allowChanged) {
        throw new GenpipeError(
          'invalid_input',
          `The plan of ${manifestPath} changed since run ${previous.runId} started; resume with --allow-changed to accept it, or start a new run.`,
        );
      }
      runDir = resolve(resumeDir);
      setWritingFolder(runDir);
      runId = previous.runId;
      stepSinkRecords = stepSinks(previous);
      await assertSinksAsRecorded(plan, { id: runId, startedAt }, env, stepSinkRecords);
      lock = await acquirePipelineLock(join(dirname(runDir), '.lock'), runId, o.overlap ?? 'skip', signal, lockOptions(o));
    } else {
      const root = resolve(
        o.outDir ?? (loaded.manifest.defaults?.output?.dir ? resolve(loaded.dir, loaded.manifest.defaults.output.dir) : 'runs'),
      );
      // Before anything is spent: what an earlier run of this pipeline already made, and the flag that reuses it.
      if (!o.reuse) {
        const hint = await reuseHint(join(root, plan.name), plan, catalog);
        if (hint) err(hint);
      }
      // The lock first: a run refused for overlapping leaves nothing behind.
      runId = newId;
      setWritingFolder(join(root, plan.name));
      lock = await acquirePipelineLock(join(root, plan.name, '.lock'), runId, o.overlap ?? 'skip', signal, lockOptions(o));
      stepSinkRecords = await sinkRecords(plan, { id: runId, startedAt }, env);
      try {
        ({ dir: runDir } = await createRunDir(
          root,
          plan,
          resolve(manifestPath),
          hash,
          startedAt,
          runId,
          serviceRecord(config, embedded !== undefined),
          stepSinkRecords,
        ));
      } catch (error) {
        await lock.release();
        throw error;
      }
      setWritingFolder(runDir);
    }
    // Ended at once (a second Ctrl-C): the lock is still marked released, synchronously.
    const unhook = onHardExit(() => {
      lock.releaseSync();
      err(
        `genpipe: the run in ${runDir} stopped at once: its journal is kept as written and its lock released; the report, outputs.csv and gallery were skipped (\`genpipe report ${runDir}\` writes them, \`genpipe resume ${runDir}\` continues the run).`,
      );
    });
    const held = {
      ...lock,
      release: async () => {
        unhook();
        await lock.release();
      },
    };
    await o.onRunDir?.(runDir);
    if (lock.displaced) {
      const { owner, reason } = lock.displaced;
      const who = owner
        ? `run ${owner.runId} (pid ${owner.pid} on ${owner.host}, since ${owner.startedAt})`
        : 'a lock with no readable owner';
      err(
        reason === 'broken'
          ? `warning: --break-lock took the pipeline's lock from ${who}, which was still live; it stops when it notices (exit 4).`
          : `note: took over the stale lock of ${who}.`,
      );
      if (reason === 'broken') {
        // Its heartbeat notices within a refresh period: until then it may still be journaling
        // requests it had sent. Waited out, they are in the journal this run replays, and followed.
        const waitMs = lockStaleMs(o) / 6 + 2_000;
        err(`note: waiting ${Math.round(waitMs / 1000)} s for it to stop before sending anything.`);
        await sleep(waitMs, signal);
      }
    }
    try {
      return await execute({
        o,
        plan,
        client,
        config,
        runDir,
        runId,
        startedAt,
        hash,
        lock: held,
        previous,
        stepSinkRecords,
        embedded,
        catalog,
        notifyTargets,
        signal,
        err,
        out,
      });
    } finally {
      unhook();
    }
  } finally {
    await sources.close();
    await client.close();
    await embedded?.close();
  }
}

/**
 * The lock's settings: a lock not refreshed for GENPIPE_LOCK_STALE_MS (default 60 s) is stale; on
 * shared storage with slow clocks, raise it; tests lower it.
 */
function lockStaleMs(o: SessionOptions): number {
  const fromEnv = Number((o.env ?? process.env).GENPIPE_LOCK_STALE_MS);
  // At most a day: the lock's refresh timer runs at a fraction of it, and a timer of 2^31 ms or more fires at once.
  return Number.isFinite(fromEnv) && fromEnv >= 1_000 ? Math.min(fromEnv, 86_400_000) : 60_000;
}

function lockOptions(o: SessionOptions): LockOptions {
  return { breakLock: o.breakLock === true, force: o.force === true, staleMs: lockStaleMs(o) };
}

/** A resume needs the run's journal: without it, genpipe cannot tell what the run already paid for. */
async function assertResumable(runDir: string): Promise<void> {
  const { stat } = await import('node:fs/promises');
  const journal = join(runDir, 'journal.jsonl');
  const found = await stat(journal).catch(() => undefined);
  if (!found)
    throw new GenpipeError(
      'invalid_file',
      `${journal} is missing, so genpipe cannot tell what the run already paid for. Nothing was sent; restore it, or start a new run.`,
    );
}

interface Execution {
  o: SessionOptions;
  plan: Plan;
  client: GenerationClient;
  config: ClientConfig;
  runDir: string;
  runId: string;
  hash: string;
  lock: PipelineLock;
  previous: PlanFile | undefined;
  embedded: EmbeddedEmulator | undefined;
  /** Each step's sink as plan.json records it, when the run has one. */
  stepSinkRecords: ReadonlyMap<string, StepSinkRecord> | undefined;
  /** When the run first started (its run variables, a sink's prefix). */
  startedAt: Date;
  catalog: OptionsCatalog | undefined;
  notifyTargets: ReturnType<typeof resolveNotifyTargets>;
  signal: AbortSignal;
  err: (text: string) => void;
  out: (text: string) => void;
}

/** The run itself, once its directory and lock are held: the executor, the report, the notifications. */
async function execute(x: Execution): Promise<RunResult> {
  const { o, plan, client, runDir, runId, lock, err, out } = x;
  const progress = progressFor(
    { out, err },
    {
      tty: o.tty === true,
      jsonLogs: o.jsonLogs === true,
      quiet: o.quiet === true,
      budgetUsd: o.budgetUsd ?? plan.loaded.manifest.defaults?.budget_usd,
      steps: plan.steps,
      ...(o.progressIntervalMs === undefined ? {} : { intervalMs: o.progressIntervalMs }),
    },
  );
  let webhook: WebhookReceiver | undefined;
  let fleet: Fleet | undefined;
  let sinks: RunSinks | undefined;
  let summary: RunSummary;
  // Aborted with the sentence to exit 5 with when the fleet's Redis stops answering.
  const stall = new AbortController();
  const runStarted = Date.now();
  const ended = (fields: Pick<RunEnd, 'outcome' | 'exitCode' | 'message'> & Partial<RunEnd>): RunEnd => ({
    pipeline: plan.name,
    runId,
    runDir,
    counts: emptyCounts(),
    durationMs: Date.now() - runStarted,
    ...fields,
  });
  const concurrency = o.concurrency ?? plan.loaded.manifest.defaults?.concurrency;
  let finished: Extract<RunEvent, { type: 'run_finished' }> | undefined;
  /** Prints the summary line, with the report's net when there is a report. */
  const sayEnd = (report: CostSummary | undefined): void => {
    if (!finished) return;
    const t = report?.total;
    const money = t ? { netUsd: t.netUsd, unknownUsd: t.unknownUsd, unpricedInstances: t.unpricedInstances } : undefined;
    progress.listener({ type: 'run_finished', summary: { ...finished.summary, money } });
  };
  try {
    // Storage sinks are checked before anything is spent: a missing bucket or refused
    // credentials end the run here, exit 2, with nothing sent to the service. Without a sink in
    // the manifest, the AWS SDK is never loaded.
    sinks = await openSinks(plan, { id: runId, startedAt: x.startedAt }, o.env ?? process.env, x.signal);
    for (const warning of sinks?.warnings ?? []) err(warning);
    if (o.webhook) webhook = await WebhookReceiver.start(o.webhook);
    if (o.fleet) {
      const polling = plan.loaded.manifest.defaults?.polling;
      const poll = polling ? { baseMs: polling.initial_ms, capMs: polling.max_ms, floorMs: polling.min_ms } : undefined;
      const target = o.fleet.redis;
      // Redis lost while the fleet's connections open (a restart, a kill) is exit 5 and one sentence, not an internal error.
      fleet = await redisCommands(target, () =>
        openFleet(
          { redis: target, queue: o.fleet?.queue ?? DEFAULT_QUEUE, runId, say: err, poll, resumed: x.previous !== undefined },
          o.fleet?.localWorker === false ? undefined : { client, concurrency: concurrency ?? 8, webhook },
          o.env ?? process.env,
        ),
      );
      // A Redis that stops answering mid-run stops the run (exit 5, resumable) instead of a silent hang.
      void fleet.stalled.then((error) => stall.abort(error));
    }
    summary = await runPlan({
      plan,
      client,
      runDir,
      runId,
      planHash: x.hash,
      // A run that lost its lock (taken over, or its folder gone) stops as on Ctrl-C; see below.
      signal: AbortSignal.any([x.signal, lock.signal, stall.signal]),
      // The lock as a fence: checked before each spending request; once lost, nothing more is written.
      fence: lock,
      catalog: x.catalog,
      concurrency: o.concurrency,
      ratePerSecond: o.ratePerSecond,
      budgetUsd: o.budgetUsd,
      failFast: o.failFast,
      resubmitUnknown: o.resubmitUnknown,
      acceptCorrupt: o.acceptCorrupt,
      serviceForgotten: x.previous?.service?.embedded_emulator === true && x.embedded !== undefined,
      retry: o.retry,
      retryBudget: o.retryBudget,
      // The first polls aim at how long this pipeline's requests took in its earlier runs.
      pollPrior: await readPollPrior(runDir),
      // Recorded with the run: a resume reuses too, unless the run never did (run-options.ts).
      reuse: o.reuse ? true : undefined,
      confirmOverUsd: o.confirmOverUsd,
      cancelOnAbort: o.cancelOnAbort,
      // On a fleet the workers follow the requests (the coordinator's own worker with this receiver).
      webhook: fleet ? undefined : webhook,
      // The coordinator uploads, as it downloads: workers need no storage credentials.
      sinks,
      // Attempts go through the fleet's queue, else this process runs them.
      executor: fleet?.executor,
      // Review decisions come in as data, and the gallery is a view: run/ knows neither.
      review: { approved: () => decidedIds(runDir, 'approved'), rejected: () => decisions(runDir, 'rejected') },
      view: galleryView(runDir, plan, runId, x.stepSinkRecords),
      onEvent: (event) => {
        // The summary line waits for the report: it says the report's net, on every way a run ends.
        if (event.type === 'run_finished') finished = event;
        else progress.listener(event);
        o.onEvent?.(event);
      },
    });
  } catch (error) {
    progress.stop();
    await fleet?.close(stall.signal.aborted);
    await webhook?.close();
    sinks?.close();
    // A new run stopped before its journal existed (its sinks or its fleet could not start) sent
    // nothing: its directory goes, so no run is left that cannot be resumed.
    if (x.previous === undefined && !(await exists(join(runDir, 'journal.jsonl')))) await rm(runDir, { recursive: true, force: true });
    await lock.release();
    // The run stopped on an error after its directory existed: the team hears of it too.
    const told = diskRefusal(error) ?? error;
    const code = told instanceof GenpipeError ? exitCodeFor(told.code) : EXIT.internal;
    await notifyRunEnd(
      x.notifyTargets,
      ended({
        outcome: code === EXIT.interrupted ? 'aborted' : 'failed',
        exitCode: code,
        message: redact(told instanceof Error ? told.message : String(told)),
      }),
      undefined,
      { err, quiet: o.quiet },
    );
    markNotified(error);
    throw error;
  }
  progress.stop();
  await fleet?.close(stall.signal.aborted);
  await webhook?.close();
  sinks?.close();
  await lock.release();
  // Redis stopped answering: the run stopped as on Ctrl-C, resumable; exit 5 with its sentence.
  if (stall.signal.aborted && !x.signal.aborted) {
    const stalled = stall.signal.reason as GenpipeError;
    const report = await writeCostReport(runDir, { creditsPerUsd: x.config.creditsPerUsd });
    sayEnd(report);
    await notifyRunEnd(
      x.notifyTargets,
      ended({
        outcome: 'stopped',
        exitCode: EXIT.unavailable,
        message: redact(stalled.message),
        counts: summary.counts,
        durationMs: summary.durationMs,
      }),
      report,
      { err, quiet: o.quiet },
    );
    markNotified(stalled);
    throw stalled;
  }
  // Another process took the lock over: this run stopped, resumable; exit 4 with its sentence. It
  // leaves the run's files (report, gallery) to the process that holds the run now.
  // Checked once more: a holder displaced while it finished (it has not noticed yet) must not
  // write the run's files over the new holder's. A fresh look, not the fence's lease: once a run.
  if (!lock.signal.aborted) await lock.check({ fresh: true });
  const lockLost = lock.signal.aborted && !x.signal.aborted;
  // Taken over by a resume of this very run: its files are the new holder's to write.
  const report =
    lockLost && lostToThisRun(lock.signal.reason, runId)
      ? undefined
      : await writeCostReport(runDir, { creditsPerUsd: x.config.creditsPerUsd });
  sayEnd(report);
  if (lockLost) {
    await notifyRunEnd(
      x.notifyTargets,
      ended({
        outcome: 'stopped',
        exitCode: EXIT.locked,
        message: redact(lock.signal.reason instanceof Error ? lock.signal.reason.message : "The pipeline's lock was taken over."),
        counts: summary.counts,
        durationMs: summary.durationMs,
      }),
      report,
      { err, quiet: o.quiet },
    );
    markNotified(lock.signal.reason);
    throw lock.signal.reason;
  }
  if (!report) throw new GenpipeError('internal', 'The run ended without its report.');
  // A run that ends waiting on review says so, and names the commands.
  const waiting = summary.outcome === 'completed' ? await reviewWaitSentence(runDir) : undefined;
  if (waiting) err(waiting);
  const exitCode = exitCodeOf(summary);
  // A finished run resumed with nothing to do: told once already, so no one is told again.
  if (summary.unchanged) {
    if (x.notifyTargets.length > 0) err(`Run ${runId} had ended ${summary.outcome} already and nothing changed: no one is notified again.`);
  } else
    await notifyRunEnd(
      x.notifyTargets,
      ended({ outcome: summary.outcome, exitCode, message: summary.message, counts: summary.counts, durationMs: summary.durationMs }),
      report,
      { err, quiet: o.quiet },
    );
  return { exitCode, runDir, runId, summary, report };
}

/** The steps' sinks as the run's plan.json records them (the gallery links public outputs). */
const stepSinks = (file: PlanFile): Map<string, StepSinkRecord> =>
  new Map(file.steps.flatMap((s) => (s.sink ? [[s.id, s.sink] as const] : [])));

/** What plan.json records of the steps' sinks (bucket, rendered prefix, public URL); undefined without one. */
async function sinkRecords(
  plan: Plan,
  run: { id: string; startedAt: Date },
  env: NodeJS.ProcessEnv,
): Promise<Map<string, StepSinkRecord> | undefined> {
  const { manifestHasSink, stepSinkRecords } = await import('../sink/sink-config.js');
  return manifestHasSink(plan.loaded) ? stepSinkRecords(plan.loaded, run, env) : undefined;
}

/**
 * A resume's sinks render as its run's did (plan.json), or the resume is refused before anything is
 * sent: a prefix may read allow-listed environment variables, and one changed since the run started
 * would put the rest of its objects under another prefix than the report, outputs.csv and the
 * objects already uploaded say.
 */
async function assertSinksAsRecorded(
  plan: Plan,
  run: { id: string; startedAt: Date },
  env: NodeJS.ProcessEnv,
  recorded: ReadonlyMap<string, StepSinkRecord>,
): Promise<void> {
  if (recorded.size === 0) return;
  for (const [step, now] of (await sinkRecords(plan, run, env)) ?? []) {
    const was = recorded.get(step);
    if (!was) continue;
    const changed =
      now.uri !== was.uri
        ? ['URL', was.uri, now.uri]
        : now.public_url !== was.public_url
          ? ['public URL', was.public_url, now.public_url]
          : undefined;
    if (!changed) continue;
    const [what, before, after] = changed;
    throw new GenpipeError(
      'invalid_input',
      `The storage sink of step ${step} renders its ${what} as ${after ?? '(none)'} now, but as ${before ?? '(none)'} when run ${run.id} started: an environment variable it reads has changed. Set it as it was, then resume; nothing was sent.`,
    );
  }
}

/** The run's storage sinks, preflighted; undefined when the manifest has none (the SDK is not loaded). */
async function openSinks(
  plan: Plan,
  run: { id: string; startedAt: Date },
  env: NodeJS.ProcessEnv,
  signal: AbortSignal,
): Promise<RunSinks | undefined> {
  const { manifestHasSink } = await import('../sink/sink-config.js');
  if (!manifestHasSink(plan.loaded)) return undefined;
  const { RunSinks } = await import('../sink/run-sinks.js');
  const sinks = await RunSinks.open(plan.loaded, run, env);
  let problem: GenpipeError | undefined;
  try {
    problem = await sinks?.preflight(signal);
  } catch (error) {
    sinks?.close();
    throw error;
  }
  if (problem) {
    sinks?.close();
    // Said once: a message that already says nothing was sent keeps its own words.
    const message = /nothing was sent/.test(problem.message)
      ? problem.message
      : `${problem.message.replace(/[.]$/, '')}; nothing was sent to the service.`;
    throw new GenpipeError('invalid_input', message);
  }
  return sinks;
}

const exists = (path: string): Promise<boolean> =>
  stat(path).then(
    () => true,
    () => false,
  );

interface Fleet {
  executor: QueueExecutor;
  /** Resolves with the sentence to stop with once Redis stops answering (redis-watch.ts). */
  stalled: Promise<GenpipeError>;
  /** `stalled`: Redis does not answer, so connections are dropped rather than closed. */
  close(stalled?: boolean): Promise<void>;
}

/** The coordinator's side of a fleet run: its executor through the queue and, unless told not to, a worker of its own. */
async function openFleet(
  options: QueueExecutorOptions,
  local: { client: GenerationClient; concurrency: number; webhook: WebhookReceiver | undefined } | undefined,
  env: NodeJS.ProcessEnv,
): Promise<Fleet> {
  const { QueueExecutor } = await import('../fleet/queue-executor.js');
  const { watchRedis, redisStallMs } = await import('../fleet/redis-watch.js');
  const stallMs = redisStallMs(env);
  let executor: QueueExecutor | undefined;
  let worker: FleetWorker | undefined;
  const dropAll = async (): Promise<void> => {
    await worker?.disconnect();
    await executor?.disconnect();
  };
  // Bounded: a Redis lost or restarted while the queue's connections open must not leave the run
  // waiting with no output (soak seed 50484 waited 120 s here). Past the stall period: exit 5.
  const opened = (async () => {
    executor = await QueueExecutor.open(options);
    if (local) {
      const { startFleetWorker, defaultWorkerName } = await import('../fleet/worker.js');
      worker = await startFleetWorker({
        redis: options.redis,
        queue: options.queue,
        client: local.client,
        concurrency: local.concurrency,
        name: `${defaultWorkerName()}-coordinator`,
        say: options.say,
        webhook: local.webhook,
      });
    }
  })();
  const inTime = await within(opened, stallMs).catch(async (error: unknown) => {
    // Half open (the worker failed after the queue opened): nothing is left connected.
    await dropAll();
    throw error;
  });
  if (!inTime) {
    await dropAll();
    opened.catch(() => {});
    throw new GenpipeError(
      'network',
      `Redis at ${options.redis.shown} did not let the fleet's queue open within ${Math.round(stallMs / 1000)} s, so the run stopped before sending anything: start it again once Redis answers.`,
    );
  }
  if (!executor) throw new GenpipeError('internal', "The fleet's queue opened without its executor.");
  const ready = executor;
  const watch = watchRedis(options.redis, 'run', stallMs);
  return {
    executor: ready,
    stalled: watch.stalled,
    close: async (stalled = false) => {
      watch.close();
      if (stalled) return dropAll();
      // The local worker hands back what it still holds at once: the run is over or interrupted.
      // Bounded too: a close that waits on a Redis gone quiet drops the connections instead.
      const closed = (async () => {
        await worker?.close(0);
        await ready.close();
      })();
      if (!(await within(closed, stallMs))) {
        closed.catch(() => {});
        await dropAll();
      }
    },
  };
}

/** A run's exit code from its summary (cli/exit-codes.ts). */
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
