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
import { provisionalModels } from '../report/render.js';
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
import { guardCounts, guardSpend } from './spend-guard.js';
import { reuseHint } from './reuse-hint.js';
import type { QueueExecutor, QueueExecutorOptions } from '../fleet/queue-executor.js';
import type { RunSinks } from '../sink/run-sinks.js';
import { adapterFor } from '../models/registry.js';
import { checkRedis, DEFAULT_QUEUE, redisCommands, type RedisTarget } from '../fleet/redis.js';
import type { FleetWorker } from '../fleet/worker.js';
import { loadManifestFile } from '../manifest/load.js';
import type { RunEnd } from '../notify/notify-message.js';
import { notifyRunEnd } from '../notify/notify-run.js';
import { tellNotStarted } from './not-started.js';
import { resolveNotifyTargets } from '../notify/notify-targets.js';
import type { BigSpend } from '../plan/guards.js';
import { buildPlan, type Plan } from '../plan/plan.js';
import { parseSelector, type Selector } from '../plan/selection.js';
import type { CostSummary } from '../report/cost-report.js';
import { progressFor } from '../report/progress.js';
import { sinkNoteLines } from '../report/render.js';
import { writeCostReport } from '../report/write-report.js';
import { reviewWaitSentence } from '../review/review-wait.js';
import { decidedIds, decisions } from '../review/review-store.js';
import { galleryView } from '../gallery/run-view.js';
import { emptyCounts, outcomeWord, type RunEvent, type RunListener, type RunSummary } from '../run/events.js';
import { acquirePipelineLock, lostToThisRun, type LockOptions, type PipelineLock } from '../run/lock/lock.js';
import { sleep } from '../api/sleep.js';
import { onHardExit } from '../util/exit-hooks.js';
import { readPollPrior } from '../run/polling/poll-prior.js';
import { unjournaledLine } from '../run/attempt/adopt.js';
import { oneLine } from '../util/terminal-text.js';
import { createRunDir, newRunId, planHash, readPlanFile, type PlanFile, type StepSinkRecord } from '../run/files/run-dir.js';
import { readRunInputs, type RecordedAxes } from '../run/files/run-inputs.js';
import { skippedRowCount, skippedRowsLines } from '../plan/skipped-rows.js';
import { countNewRows, newRowsSentence } from './new-rows.js';
import { runPlan } from '../run/runner.js';
import type { RunObserver } from '../run/observer.js';
import { givenRunOptions, type GivenRunOptions, type RunOptions } from '../run/run-options.js';
import { concurrencyOf } from '../run/resolved-options.js';
import { WebhookReceiver, type WebhookReceiverOptions } from '../run/polling/webhook-receiver.js';
import { formatCount } from '../util/format-usd.js';
import { redact } from '../util/redact.js';
import { embeddedRunSentence, movedServiceWarning, resumeFlags, serviceRecord } from './run-service.js';
import { runFile } from '../run/files/run-layout.js';

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
  /** Told each request's answer, journal sync and the throttling, for metrics (run/observer.ts). */
  observer?: RunObserver | undefined;
  /**
   * A big spend with no budget (over confirmOverUsd): resolve to go on, throw to refuse. Default:
   * refused (exit 2), as nobody can be asked.
   */
  confirmSpend?: ((spend: BigSpend) => Promise<void>) | undefined;
}

/**
 * A session's options: its IO, the run's given options (run-options.ts GivenRunOptions: budget,
 * concurrency, retries...), and what only a session does (the service, the lock, the run directory).
 */
export interface SessionOptions extends SessionIO, Omit<GivenRunOptions, 'maxDownloadBytes' | 'watchdogMs'> {
  /** Service addresses and credentials files, as the connection flags give them. */
  connection?: ConfigFlags | undefined;
  /** Start the emulator in-process and use it (no credentials, nothing billed). */
  emulator?: boolean | undefined;
  /** Where run directories go (default: the manifest's output.dir, else `runs`). A new run only. */
  outDir?: string | undefined;
  /** A resume: accept a manifest whose plan changed. */
  allowChanged?: boolean | undefined;
  breakLock?: boolean | undefined;
  /** With breakLock, take the lock from a run alive on this host too (refused otherwise, with its pid). */
  force?: boolean | undefined;
  /** Track by webhook: a receiver on host:port, reached by the service at publicUrl (webhookFlags). */
  webhook?: WebhookReceiverOptions | undefined;
  overlap?: 'skip' | 'wait' | 'allow' | undefined;
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
  /** A new run: every CSV axis sets its invalid rows aside, as `on_invalid: skip` does (`--skip-invalid`). */
  skipInvalid?: boolean | undefined;
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
  return session({ manifestPath, resumeDir: undefined }, options);
}

/** Resumes the run in `runDir`: the options it recorded, the service it recorded, unless told otherwise. */
export async function resumeRun(runDir: string, options: SessionOptions = {}): Promise<RunResult> {
  return session({ manifestPath: options.manifest, resumeDir: runDir }, options);
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

type Target = { manifestPath: string | undefined; resumeDir: string | undefined };
type Say = (text: string) => void;

/** What a start reads before it talks to anything: the run it resumes, the manifest, the notify targets. */
interface Start {
  resumeDir: string | undefined;
  /** The resumed run's plan.json. */
  previous: PlanFile | undefined;
  manifestPath: string;
  loaded: ReturnType<typeof loadManifestFile>;
  notifyTargets: ReturnType<typeof resolveNotifyTargets>;
  err: Say;
  out: Say;
  env: NodeJS.ProcessEnv;
  signal: AbortSignal;
  /** The reuse hint, once the confirm question has said it: not printed a second time. */
  reuseHintSaid?: boolean;
}

/** The service a start talks to: its connection flags, its config, and the embedded emulator when it is one. */
interface Service {
  flags: ConfigFlags;
  config: ClientConfig;
  embedded: EmbeddedEmulator | undefined;
}

/** The run's directory, id and lock, once this start holds them. */
interface Claimed {
  runDir: string;
  runId: string;
  lock: PipelineLock;
  /** Each step's sink as plan.json records it: the gallery links public outputs there. */
  stepSinkRecords: ReadonlyMap<string, StepSinkRecord> | undefined;
}

/**
 * What a session holds as it goes, so that its one teardown (endSession) undoes and tells all of it
 * once, whichever way the session ends: completed, stopped by the budget, interrupted, failed,
 * refused before it started, or refused the lock.
 */
interface Held {
  /** Closed last, in reverse order: the embedded emulator, the client, the plan's sources. */
  closers: (() => Promise<void>)[];
  /** The pipeline's lock once taken; released by releaseLock, once. */
  lock?: PipelineLock | undefined;
  /** Removes the hook that marks the lock released on a hard exit. */
  unhook?: (() => void) | undefined;
  /** Set once the run's directory and lock are held: from then on its end is told as the run's. */
  x?: Execution | undefined;
  parts?: Parts | undefined;
  progress?: ReturnType<typeof progressFor> | undefined;
  /** The runner's last event: the summary line waits for the report, to say its net. */
  finished?: Extract<RunEvent, { type: 'run_finished' }> | undefined;
}

/** How the session's work ended, before its teardown: the runner's summary, or what was thrown. */
type Ended = { summary: RunSummary } | { error: unknown };

async function session(target: Target, o: SessionOptions): Promise<RunResult> {
  const held: Held = { closers: [] };
  let ended: Ended;
  try {
    ended = { summary: await runSession(target, o, held) };
  } catch (error) {
    ended = { error };
  }
  return endSession(held, target, o, ended);
}

/** Everything up to the runner's summary; what it opens or takes goes into `held`, for endSession. */
async function runSession(target: Target, o: SessionOptions, held: Held): Promise<RunSummary> {
  const start = await readStart(target, o);
  const service = await connect(start, o);
  held.closers.push(async () => service.embedded?.close());
  const client = new GenerationClient(service.config);
  held.closers.push(() => client.close());
  const sources = planSources(service.flags, { env: start.env, signal: start.signal }, service.embedded, client);
  held.closers.push(() => sources.close());
  // The run's id and start are known before the plan: templates may read them (`{{ run.date }}`),
  // and a resume renders them as the run first did.
  const startedAt = start.previous ? new Date(start.previous.createdAt) : new Date();
  const newId = newRunId(startedAt);
  const catalog: { value?: OptionsCatalog | undefined } = {};
  const plan = await planOf(start, o, service, sources, { id: start.previous?.runId ?? newId, startedAt }, catalog);
  const hash = planHash(plan);
  const claimed = start.previous
    ? await claimResumed(start, o, plan, hash, startedAt, held)
    : await claimNew(start, o, { service, plan, hash, startedAt, runId: newId, catalog: catalog.value }, held);
  held.x = {
    o,
    plan,
    client,
    config: service.config,
    runDir: claimed.runDir,
    runId: claimed.runId,
    startedAt,
    hash,
    lock: claimed.lock,
    previous: start.previous,
    stepSinkRecords: claimed.stepSinkRecords,
    embedded: service.embedded,
    catalog: catalog.value,
    notifyTargets: start.notifyTargets,
    signal: start.signal,
    err: start.err,
    out: start.out,
    runStarted: Date.now(),
  };
  return runClaimed(start, held.x, held);
}

/**
 * The one teardown path of a session, on every way it ends: the run's parts closed, the lock
 * released once, the report written once (when the run has a journal to report), the summary line
 * printed, the notify targets told once, the service closed. A session that never held a run
 * directory tells of a run that did not start instead (not-started.ts).
 */
async function endSession(held: Held, target: Target, o: SessionOptions, ended: Ended): Promise<RunResult> {
  const { x } = held;
  let concluded: Concluded;
  try {
    await closeParts(held);
    concluded = x ? await concludeRun(x, held, ended) : { result: { error: 'error' in ended ? ended.error : notStarted() } };
  } catch (error) {
    // A step of the teardown itself failed: it is what the session says, and the rest is still done.
    concluded = { result: { error }, ending: x && endingOfError(error, false, x) };
  }
  try {
    // Held through the report (no other holder writes the run's files meanwhile), not through the
    // notifications: a slow webhook must not hold the next run back.
    await releaseLock(held);
    if (x && concluded.ending) await notifyEnd(x, concluded.ending, concluded.report);
    else if (!x) await tellNotStarted(errorOf(concluded.result), { ...target, outDir: o.outDir }, notStartedIO(o));
  } finally {
    for (const close of held.closers.reverse()) await close();
  }
  if ('value' in concluded.result) return concluded.result.value;
  throw concluded.result.error;
}

/** What the teardown concluded before it tells anyone: the session's result, and the run's ending and report when it had a run. */
interface Concluded {
  result: { value: RunResult } | { error: unknown };
  ending?: RunEnding | undefined;
  report?: CostSummary | undefined;
}

const errorOf = (result: Concluded['result']): unknown => ('error' in result ? result.error : undefined);

const notStartedIO = (o: SessionOptions): Parameters<typeof tellNotStarted>[2] => ({
  notify: o.notify,
  env: o.env ?? process.env,
  err: o.err ?? (() => {}),
  quiet: o.quiet,
});

const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));

const notStarted = (): GenpipeError => new GenpipeError('internal', 'The session ended before its run started, without an error.');

/** Releases the pipeline's lock, if this session holds it: once, whoever asks again. */
async function releaseLock(held: Held): Promise<void> {
  const lock = held.lock;
  held.lock = undefined;
  held.unhook?.();
  held.unhook = undefined;
  await lock?.release();
}

/** The flags a start may not combine, the run it resumes and its manifest; nothing is sent yet. */
async function readStart(target: Target, o: SessionOptions): Promise<Start> {
  const env = o.env ?? process.env;
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
  return {
    resumeDir,
    previous,
    manifestPath,
    loaded,
    // Checked before anything is sent: a bad URL or a missing url_env variable exits 2.
    notifyTargets: resolveNotifyTargets(loaded, o.notify ?? [], env),
    err: o.err ?? (() => {}),
    out: o.out ?? (() => {}),
    env,
    signal: o.signal ?? new AbortController().signal,
  };
}

/** The service: a resume talks to the one its run recorded, unless told otherwise (run-service.ts); with a fleet, Redis must answer. */
async function connect(start: Start, o: SessionOptions): Promise<Service> {
  const { previous, resumeDir, env, err } = start;
  const given = o.connection ?? {};
  const flags = previous && resumeDir ? resumeFlags(previous, resumeDir, given, env, o.emulator === true) : given;
  const embedded: EmbeddedEmulator | undefined = o.emulator ? await startEmbeddedEmulator() : undefined;
  try {
    const config = embedded ? embeddedConfig(flags, embedded) : resolveConfig({ flags, env });
    if (previous && resumeDir) {
      if (previous.service?.embedded_emulator) err(embeddedRunSentence(resumeDir));
      const moved = movedServiceWarning(previous.service, config, embedded !== undefined);
      if (moved) err(moved);
    }
    // Unreachable at start: exit 5 with one sentence, before a run directory exists. Ctrl-C or
    // SIGTERM while it waits: interrupted (exit 130) at once, the run's files untouched.
    if (o.fleet) await checkRedis(o.fleet.redis, undefined, start.signal);
    return { flags, config, embedded };
  } catch (error) {
    await embedded?.close();
    throw error;
  }
}

/** The plan, with its money guards run before any instance is checked; a raw model path is refused here. */
async function planOf(
  start: Start,
  o: SessionOptions,
  service: Service,
  sources: ReturnType<typeof planSources>,
  run: { id: string; startedAt: Date },
  catalog: { value?: OptionsCatalog | undefined },
): Promise<Plan> {
  const { previous, resumeDir } = start;
  const fetchCatalog = sources.options.catalog;
  // A resume plans from the inputs its run saved (CSV rows, presets), never from today's files.
  const recordedInputs = previous && resumeDir ? await readRunInputs(resolve(resumeDir), previous.inputs) : undefined;
  const only = o.only?.map(parseSelector);
  const agreed = previous !== undefined || service.embedded !== undefined;
  const hint = async (counted: Plan): Promise<string | undefined> => {
    // A new run's question says what an earlier run already made, and the flag that reuses it.
    if (previous || o.reuse) return undefined;
    const said = await reuseHint(join(outputRoot(start, o), counted.name), counted, catalog.value);
    if (said) start.reuseHintSaid = true;
    return said;
  };
  /** The estimate the person said yes to, when the counts alone asked. */
  let agreedUsd: number | undefined;
  const plan = await buildPlan(start.loaded, {
    ...sources.options,
    run,
    select: previous ? recordedSelection(previous) : only !== undefined || o.limit !== undefined ? { only, limit: o.limit } : undefined,
    fingerprint: true,
    signal: start.signal,
    onProgress: o.quiet || o.jsonLogs ? undefined : checkingProgress(start.err),
    catalog: fetchCatalog && (async () => (catalog.value ??= await fetchCatalog())),
    ...(recordedInputs ? { recorded: recordedInputs } : {}),
    skipInvalid: o.skipInvalid,
    // Money guards (plan/guards.ts) need only the counts: they run before the instances are
    // checked, so a plan of millions is refused at once, and before the lock, the run directory
    // and any request that spends.
    beforeInstances: async (counted) => {
      agreedUsd = await guardCounts(counted, o, agreed, hint);
    },
  });
  // A step priced per instance (a price_usd formula, a prices table keyed by input fields) has no
  // true figure until its instances are checked, so the counts did not ask about it: the guard
  // looks again at the priced plan, still before the lock, the run directory and any request, and
  // asks unless that spend was agreed to already. A plan priced per step is asked here only if it
  // now costs more than it was agreed at.
  await guardSpend(plan, o, agreed, hint, agreedUsd);
  await sayRows(plan, start, o, recordedInputs);
  // A raw model path is planned (instances, ids, prices) but cannot be run yet: refused before the
  // run directory and any spending, not after the steps before it were paid for.
  const unrunnable = plan.steps.find((step) => adapterFor(step.model) === undefined);
  if (unrunnable) {
    throw new GenpipeError(
      'invalid_input',
      `Step ${unrunnable.id} uses the raw model path ${unrunnable.model}, which genpipe can plan but not run yet; nothing was sent.`,
    );
  }
  return plan;
}

/**
 * Before anything is spent: the CSV rows a new run sets aside as invalid, one line each; for a
 * resume, the rows its run set aside (plan.json) and how many rows the files have gained since.
 */
async function sayRows(plan: Plan, start: Start, o: SessionOptions, recorded: RecordedAxes | undefined): Promise<void> {
  const { previous } = start;
  if (previous) plan.skippedRows = previous.skipped_rows ?? [];
  else if (!o.quiet) for (const line of skippedRowsLines(plan.skippedRows)) start.err(line);
  if (!recorded) return;
  const added = await countNewRows(plan, recorded, plan.skippedRows);
  if (added > 0) start.err(newRowsSentence(added));
}

/** The folder a new run's pipeline folder is made in: --out, the manifest's output dir, or ./runs. */
function outputRoot(start: Start, o: SessionOptions): string {
  const dir = start.loaded.manifest.defaults?.output?.dir;
  return resolve(o.outDir ?? (dir ? resolve(start.loaded.dir, dir) : 'runs'));
}

/** A resume takes its run's directory and the pipeline's lock: the same pipeline, the same plan (unless --allow-changed), the same sinks. */
async function claimResumed(start: Start, o: SessionOptions, plan: Plan, hash: string, startedAt: Date, held: Held): Promise<Claimed> {
  const previous = start.previous as PlanFile;
  // --allow-changed accepts a changed plan of the same pipeline, never another pipeline's.
  if (previous.pipeline !== plan.name) {
    throw new GenpipeError(
      'invalid_input',
      `${start.manifestPath} is the pipeline ${plan.name}, but run ${previous.runId} is of the pipeline ${previous.pipeline}; resume a run with its own manifest.`,
    );
  }
  if (previous.planHash !== hash && !o.allowChanged) {
    throw new GenpipeError(
      'invalid_input',
      `The plan of ${start.manifestPath} changed since run ${previous.runId} started; resume with --allow-changed to accept it, or start a new run.`,
    );
  }
  const runDir = resolve(start.resumeDir as string);
  setWritingFolder(runDir);
  const runId = previous.runId;
  const stepSinkRecords = stepSinks(previous);
  await assertSinksAsRecorded(plan, { id: runId, startedAt }, start.env, stepSinkRecords);
  const lock = await acquirePipelineLock(join(dirname(runDir), '.lock'), runId, o.overlap ?? 'skip', start.signal, lockOptions(o));
  held.lock = lock;
  return { runDir, runId, lock, stepSinkRecords };
}

/** A new run takes the pipeline's lock first (a run refused for overlapping leaves nothing behind), then makes its directory. */
async function claimNew(
  start: Start,
  o: SessionOptions,
  run: { service: Service; plan: Plan; hash: string; startedAt: Date; runId: string; catalog: OptionsCatalog | undefined },
  held: Held,
): Promise<Claimed> {
  const { service, plan, hash, startedAt, runId } = run;
  const root = outputRoot(start, o);
  // Before anything is spent: what an earlier run of this pipeline already made, and the flag that
  // reuses it (unless the confirm question said it already).
  if (!o.reuse && !start.reuseHintSaid) {
    const hint = await reuseHint(join(root, plan.name), plan, run.catalog);
    if (hint) start.err(hint);
  }
  setWritingFolder(join(root, plan.name));
  // Held from here: a run directory that cannot be made releases it in endSession.
  const lock = await acquirePipelineLock(join(root, plan.name, '.lock'), runId, o.overlap ?? 'skip', start.signal, lockOptions(o));
  held.lock = lock;
  const stepSinkRecords = await sinkRecords(plan, { id: runId, startedAt }, start.env);
  const { dir: runDir } = await createRunDir(
    root,
    plan,
    resolve(start.manifestPath),
    hash,
    startedAt,
    runId,
    serviceRecord(service.config, service.embedded !== undefined),
    stepSinkRecords,
  );
  setWritingFolder(runDir);
  return { runDir, runId, lock, stepSinkRecords };
}

/** Runs the claimed run: its lock released at once on a hard exit, a takeover said (and waited out), then the runner. */
async function runClaimed(start: Start, x: Execution, held: Held): Promise<RunSummary> {
  const { runDir, lock, o } = x;
  // Ended at once (a second Ctrl-C): the lock is still marked released, synchronously.
  held.unhook = onHardExit(() => {
    lock.releaseSync();
    start.err(
      `genpipe: the run in ${runDir} stopped at once: its journal is kept as written and its lock released; the report, outputs.csv and gallery were skipped (\`genpipe report ${runDir}\` writes them, \`genpipe resume ${runDir}\` continues the run).`,
    );
  });
  await o.onRunDir?.(runDir);
  if (lock.displaced) await sayTakeover(lock.displaced, o, start);
  return execute(x, held);
}

/** The lock was taken over: said, and a lock broken from a live run is waited out before anything is sent. */
async function sayTakeover(displaced: NonNullable<PipelineLock['displaced']>, o: SessionOptions, start: Start): Promise<void> {
  const { owner, reason } = displaced;
  const who = owner ? `run ${owner.runId} (pid ${owner.pid} on ${owner.host}, since ${owner.startedAt})` : 'a lock with no readable owner';
  start.err(
    reason === 'broken'
      ? `warning: --break-lock took the pipeline's lock from ${who}, which was still live; it stops when it notices (exit 4).`
      : `note: took over the stale lock of ${who}.`,
  );
  if (reason !== 'broken') return;
  // Its heartbeat notices within a refresh period: until then it may still be journaling
  // requests it had sent. Waited out, they are in the journal this run replays, and followed.
  const waitMs = lockStaleMs(o) / 6 + 2_000;
  start.err(`note: waiting ${Math.round(waitMs / 1000)} s for it to stop before sending anything.`);
  await sleep(waitMs, start.signal);
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
  const journal = runFile(runDir, 'journal');
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
  /** When this start took the run (Date.now()): a failure's notification says how long it went. */
  runStarted: number;
}

/** What a run opens besides its lock, each closed by the one teardown path (endSession, closeParts). */
interface Parts {
  sinks?: RunSinks | undefined;
  webhook?: WebhookReceiver | undefined;
  fleet?: Fleet | undefined;
  /** Aborted with the sentence to exit 5 with when the fleet's Redis stops answering. */
  readonly stall: AbortController;
}

/** The run itself, once its directory and lock are held: its parts opened, then the runner. */
async function execute(x: Execution, held: Held): Promise<RunSummary> {
  const progress = progressOf(x);
  held.progress = progress;
  const parts: Parts = { stall: new AbortController() };
  held.parts = parts;
  await openParts(x, parts);
  return runPlan(
    runOptionsOf(x, parts, await readPollPrior(x.runDir), (event) => {
      // The summary line waits for the report: it says the report's net, on every way a run ends.
      if (event.type === 'run_finished') held.finished = event;
      else progress.listener(event);
      // A paid request the journal lost: on stderr whatever the output mode, for `resume --adopt`.
      if (event.type === 'request_unjournaled') x.err(oneLine(unjournaledLine({ ...event, runDir: x.runDir })));
      x.o.onEvent?.(event);
    }),
  );
}

/** How a run ended, decided once: what its targets are told, what is thrown after, and whether its report is written. */
interface RunEnding {
  outcome: RunEnd['outcome'];
  exitCode: number;
  message: string | undefined;
  /** The counts and duration of the runner's summary, when it gave one. */
  tally?: Pick<RunEnd, 'counts' | 'durationMs'> | undefined;
  writeReport: boolean;
  /** Thrown once told (the CLI prints it as an error); absent: the run's result is returned. */
  error?: { thrown: unknown } | undefined;
  /** A finished run resumed with nothing to do: told once already, so no one is told again. */
  unchanged?: boolean | undefined;
  /** A run that ends waiting on review says so under its summary, and names the commands. */
  waiting?: string | undefined;
}

/**
 * The run's share of the teardown (endSession), while its lock is still held: its directory (gone
 * when a new run never journaled), a last look at the lock, how it ended, its report, and the
 * summary line.
 */
async function concludeRun(x: Execution, held: Held, ended: Ended): Promise<Concluded> {
  const journaled = await exists(runFile(x.runDir, 'journal'));
  // A new run stopped before its journal existed (its sinks or its fleet could not start) sent
  // nothing: its directory goes, so no run is left that cannot be resumed.
  if ('error' in ended && x.previous === undefined && !journaled) await rm(x.runDir, { recursive: true, force: true });
  // Checked once more while still held: a holder displaced while it finished (it has not noticed
  // yet) must not write the run's files over the new holder's. A fresh look, not the fence's lease.
  if ('summary' in ended && !x.lock.signal.aborted) await x.lock.check({ fresh: true });
  let ending = 'summary' in ended ? await endingOf(x, held.parts, ended.summary) : endingOfError(ended.error, journaled, x);
  let report: CostSummary | undefined;
  try {
    const throttledMs = 'summary' in ended ? ended.summary.throttledMs : 0;
    if (ending.writeReport)
      report = await writeCostReport(x.runDir, { creditsPerUsd: x.config.creditsPerUsd, throttledMs, status: outcomeWord(ending.outcome) });
    sayEnd(x, held, report);
    if (ending.waiting) x.err(ending.waiting);
  } catch (error) {
    // After a failure, the failure is what the run says; after a summary, the report's own error is.
    if ('error' in ended) x.err(redact(`warning: the run's report could not be written: ${messageOf(error)}`));
    else ending = endingOfError(error, false, x);
  }
  if (ending.error) return { result: { error: ending.error.thrown }, ending, report };
  if (!report || !('summary' in ended)) throw new GenpipeError('internal', 'The run ended without its report.');
  const value = { exitCode: ending.exitCode, runDir: x.runDir, runId: x.runId, summary: ended.summary, report };
  return { result: { value }, ending, report };
}

/** How a run the runner summed up ended: Redis that stopped answering (exit 5), a lock taken over (exit 4), else the summary's own end. */
async function endingOf(x: Execution, parts: Parts | undefined, summary: RunSummary): Promise<RunEnding> {
  const tally = { counts: summary.counts, durationMs: summary.durationMs };
  // Redis stopped answering: the run stopped as on Ctrl-C, resumable; exit 5 with its sentence.
  if (parts?.stall.signal.aborted && !x.signal.aborted) {
    const stalled = parts.stall.signal.reason as GenpipeError;
    return {
      outcome: 'stopped',
      exitCode: EXIT.unavailable,
      message: redact(stalled.message),
      tally,
      writeReport: true,
      error: { thrown: stalled },
    };
  }
  // Another process took the lock over: this run stopped, resumable; exit 4 with its sentence. It
  // leaves the run's files (report, gallery) to the process that holds the run now when that is a
  // resume of this very run.
  const { lock, runId } = x;
  if (lock.signal.aborted && !x.signal.aborted) {
    const reason: unknown = lock.signal.reason;
    const message = redact(reason instanceof Error ? reason.message : "The pipeline's lock was taken over.");
    return {
      outcome: 'stopped',
      exitCode: EXIT.locked,
      message,
      tally,
      writeReport: !lostToThisRun(reason, runId),
      error: { thrown: reason },
    };
  }
  // A run that ends waiting on review says so, and names the commands.
  const waiting = summary.outcome === 'completed' ? await reviewWaitSentence(x.runDir) : undefined;
  const skipped = skippedRowCount(x.plan.skippedRows);
  // Rows set aside are rows the run did not make: a run otherwise complete exits 1.
  const exitCode = skipped > 0 && exitCodeOf(summary) === EXIT.ok ? EXIT.failed : exitCodeOf(summary);
  return {
    outcome: summary.outcome,
    exitCode,
    message: summary.message,
    tally,
    writeReport: true,
    unchanged: summary.unchanged,
    waiting,
  };
}

/**
 * How a run that threw ended (its sinks or fleet could not start, the disk refused, a bug): told as
 * failed (interrupted for exit 130), with the report when its journal can be read for one: not after
 * a refused input or a full disk, and not when the lock went to another holder.
 */
function endingOfError(error: unknown, journaled: boolean, x: Execution): RunEnding {
  const told = diskRefusal(error) ?? error;
  const exitCode = told instanceof GenpipeError ? exitCodeFor(told.code) : EXIT.internal;
  const message = redact(told instanceof Error ? told.message : String(told));
  const reportable = journaled && exitCode !== EXIT.invalidInput && exitCode !== EXIT.disk && !x.lock.signal.aborted;
  return {
    outcome: exitCode === EXIT.interrupted ? 'aborted' : 'failed',
    exitCode,
    message,
    writeReport: reportable,
    error: { thrown: error },
  };
}

/**
 * Prints the summary line and the notes under it. Its net is the runner's fold of the journal (the
 * report's own functions), said once the report is written, with whether the report calls some of
 * it provisional; without a report (another process holds the run now) the line says what the run
 * committed instead.
 */
function sayEnd(x: Execution, held: Held, report: CostSummary | undefined): void {
  const finished = held.finished;
  if (!finished || !held.progress) return;
  const folded = finished.summary.money;
  const money = report && folded ? { ...folded, provisional: provisionalModels(report).length > 0 } : undefined;
  held.progress.listener({ type: 'run_finished', summary: { ...finished.summary, money } });
  // The rows set aside, under the summary (beside it with --json-logs, whose stdout is events).
  const say = x.o.jsonLogs ? x.err : x.out;
  for (const line of skippedRowsLines(x.plan.skippedRows)) say(line);
  // The objects a sink could not deliver or vouch for, each named.
  for (const line of sinkNoteLines(report?.sink)) say(line);
}

/** Tells the run's notify targets how it ended; a finished run resumed with nothing to do was told already, so no one is told again. */
async function notifyEnd(x: Execution, ending: RunEnding, report: CostSummary | undefined): Promise<void> {
  if (ending.unchanged) {
    if (x.notifyTargets.length > 0)
      x.err(`Run ${x.runId} had ended ${ending.outcome} already and nothing changed: no one is notified again.`);
    return;
  }
  const end: RunEnd = {
    pipeline: x.plan.name,
    runId: x.runId,
    runDir: x.runDir,
    outcome: ending.outcome,
    exitCode: ending.exitCode,
    message: ending.message,
    counts: ending.tally?.counts ?? emptyCounts(),
    durationMs: ending.tally?.durationMs ?? Date.now() - x.runStarted,
    skippedRows: skippedRowCount(x.plan.skippedRows),
  };
  await notifyRunEnd(x.notifyTargets, end, report, { err: x.err, quiet: x.o.quiet });
}

function progressOf(x: Execution): ReturnType<typeof progressFor> {
  const { o, plan } = x;
  return progressFor(
    { out: x.out, err: x.err },
    {
      tty: o.tty === true,
      jsonLogs: o.jsonLogs === true,
      quiet: o.quiet === true,
      steps: plan.steps,
      ...(o.progressIntervalMs === undefined ? {} : { intervalMs: o.progressIntervalMs }),
    },
  );
}

/**
 * Opens what the run needs besides its lock, in `parts` as each opens (so a failure closes what
 * opened). Storage sinks are checked before anything is spent: a missing bucket or refused
 * credentials end the run here, exit 2, with nothing sent to the service. Without a sink in the
 * manifest, the AWS SDK is never loaded.
 */
async function openParts(x: Execution, parts: Parts): Promise<void> {
  const { o, plan } = x;
  parts.sinks = await openSinks(plan, { id: x.runId, startedAt: x.startedAt }, o.env ?? process.env, x.signal);
  for (const warning of parts.sinks?.warnings ?? []) x.err(warning);
  if (o.webhook) parts.webhook = await WebhookReceiver.start(o.webhook);
  if (!o.fleet) return;
  const polling = plan.loaded.manifest.defaults?.polling;
  const poll = polling ? { baseMs: polling.initial_ms, capMs: polling.max_ms, floorMs: polling.min_ms } : undefined;
  const { redis, queue, localWorker } = o.fleet;
  const concurrency = concurrencyOf(o.concurrency, plan);
  const webhook = parts.webhook;
  // Redis lost while the fleet's connections open (a restart, a kill) is exit 5 and one sentence, not an internal error.
  const fleet = await redisCommands(redis, () =>
    openFleet(
      { redis, queue: queue ?? DEFAULT_QUEUE, runId: x.runId, say: x.err, poll, resumed: x.previous !== undefined },
      localWorker === false ? undefined : { client: x.client, concurrency, webhook },
      o.env ?? process.env,
    ),
  );
  parts.fleet = fleet;
  // A Redis that stops answering mid-run stops the run (exit 5, resumable) instead of a silent hang.
  void fleet.stalled.then((error) => parts.stall.abort(error));
}

/** What the run opened besides its lock, closed (endRun): the progress view, the fleet, the webhook receiver, the sinks. */
async function closeParts(held: Held): Promise<void> {
  const { parts } = held;
  held.progress?.stop();
  await parts?.fleet?.close(parts.stall.signal.aborted);
  await parts?.webhook?.close();
  parts?.sinks?.close();
}

/** The runner's options: the given ones as the session holds them, and what the session opened for the run. */
function runOptionsOf(x: Execution, parts: Parts, pollPrior: Awaited<ReturnType<typeof readPollPrior>>, onEvent: RunListener): RunOptions {
  const { o, plan, runDir, runId, lock } = x;
  return {
    // Resolved once, by the runner, over what the run recorded (resolved-options.ts).
    ...givenRunOptions(o),
    plan,
    client: x.client,
    runDir,
    runId,
    planHash: x.hash,
    // A run that lost its lock (taken over, or its folder gone) stops as on Ctrl-C; see endingOf.
    signal: AbortSignal.any([x.signal, lock.signal, parts.stall.signal]),
    // The lock as a fence: checked before each spending request; once lost, nothing more is written.
    fence: lock,
    catalog: x.catalog,
    serviceForgotten: x.previous?.service?.embedded_emulator === true && x.embedded !== undefined,
    // The first polls aim at how long this pipeline's requests took in its earlier runs.
    pollPrior,
    // On a fleet the workers follow the requests (the coordinator's own worker with this receiver).
    webhook: parts.fleet ? undefined : parts.webhook,
    // The coordinator uploads, as it downloads: workers need no storage credentials.
    sinks: parts.sinks,
    // Attempts go through the fleet's queue, else this process runs them.
    executor: parts.fleet?.executor,
    // Review decisions come in as data, and the gallery is a view: run/ knows neither.
    review: { approved: () => decidedIds(runDir, 'approved'), rejected: () => decisions(runDir, 'rejected') },
    view: galleryView(runDir, plan, runId, x.stepSinkRecords),
    onEvent,
    observer: o.observer,
  };
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
  // Or answered in a shape that is not the service's, submit after submit (a wrong base URL).
  if (summary.stopReason === 'unreachable' || summary.stopReason === 'retry_budget' || summary.stopReason === 'protocol')
    return EXIT.unavailable;
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
