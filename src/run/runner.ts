/**
 * The runner: runs a plan to its end and pays once. It opens the run's store (the journal,
 * replayed), wires the effects every part shares (run-context.ts), lets the scheduler walk the DAG
 * (scheduler.ts) while the instance driver runs each instance (instance-driver.ts), keeps a
 * watchdog on liveness, and finishes: `run_finished` journaled, outputs.csv written, a summary.
 * Nothing here knows how an instance is submitted or tracked; nothing there knows how the run
 * started or ends.
 */
import { dirname, join } from 'node:path';
import { readdir, unlink } from 'node:fs/promises';
import { setMaxListeners } from 'node:events';
import { GenpipeError } from '../api/errors.js';
import type { RunCounts, RunEvent, RunOutcome, RunSummary } from './events.js';
import { CANCEL_TIMEOUT_MS, InstanceDriver } from './attempt/instance-driver.js';
import { OutputsCsv } from './files/outputs-csv.js';
import { axisColumns } from './files/output-rows.js';
import { planFileSteps } from './files/run-dir.js';
import { plannedSteps, RunContext } from './run-context.js';
import { releaseUnsent } from './lock/unsent-notes.js';
import type { RunOptions } from './run-options.js';
import { resolveRunOptions } from './resolved-options.js';
import { ReuseIndex } from './attempt/reuse.js';
import { committedByJournal } from './attempt/spend.js';
import { checkAdoptions } from './attempt/adopt.js';
import { settle } from './attempt/settle.js';
import type { Submission } from '../models/adapter.js';
import { sentNotFinal, type RunState } from './journal/run-state.js';
import { RunFold } from './journal/run-fold.js';
import { stepOfInstanceId } from '../plan/instance.js';
import { isPriced } from '../plan/price.js';
import { openJournalStore, type OpenRunStoreOptions, type RunStore } from './journal/run-store.js';
import { Scheduler } from './scheduler.js';
import { runFile } from './files/run-layout.js';
import { RunSummaryWriter } from './files/run-summary.js';

export { RETRY_STATUSES, type RateLimiter, type RetryStatus, type RunOptions } from './run-options.js';

/** At most one "throttled by the service" line this often. */
const THROTTLE_LINE_MS = 5_000;

/** How often a running run rewrites gallery.html. */
const GALLERY_EVERY_MS = 5_000;

/** outputs.csv's writer, its rows in the order plan.json gives the report and the gallery. */
const openOutputs = (options: RunOptions): Promise<OutputsCsv> =>
  OutputsCsv.open(options.runDir, axisColumns(options.plan), { sink: options.sinks !== undefined, order: planFileSteps(options.plan) });

/** After Ctrl-C or a halt, how long the walk may take to settle before the run ends without it. */
const HALT_GRACE_MS = 1_500;

export async function runPlan(options: RunOptions): Promise<RunSummary> {
  const started = Date.now();
  // Every instance in flight listens to the run's signal (sleeps, requests): no leak warning at high concurrency.
  setMaxListeners(0, options.signal);
  const outputs = await openOutputs(options);
  let store: RunStore;
  try {
    store = await openJournalStore(options.runDir, storeOptions(options));
  } catch (error) {
    await outputs.abandon();
    throw error;
  }
  let fx: RunContext;
  let changes: string[];
  let adopted: ReadonlyMap<string, Submission> = new Map();
  try {
    // `--adopt` pairs are checked before anything is written: a refusal is exit 2, nothing changed.
    if (options.adopt?.length) adopted = checkAdoptions(options.plan, store.state, options.adopt);
    // Intents a displaced holder journaled and never sent are sent as new, not left unknown.
    if (!store.created && store.state.started)
      await releaseUnsent(options.runDir, store.state, (record, durable) => store.append(record, durable));
    ({ fx, changes } = await startContext(options, store));
  } catch (error) {
    await store.close();
    await outputs.abandon();
    throw error;
  }
  setMaxListeners(0, fx.signal);
  // summary.json: where the run stands, for lists and first screens (a view: it never holds the run up).
  const summaryFile = summaryWriter(fx, store);
  fx.summary = summaryFile;
  // The views (the gallery) subscribe to the run: run/ knows none of them.
  const view = options.view?.({ state: store.state, failed: (message) => fx.emit({ type: 'gallery_failed', message }) });
  const driver = new InstanceDriver(fx, outputs, {
    onFinished: (id, entry) => view?.finished(id, entry),
    onDownloaded: (path, size) => view?.downloaded(path, size),
  });
  // What is finished so far, now and then (a view: it never holds the run up).
  const galleryTimer = view ? setInterval(() => view.update(), GALLERY_EVERY_MS).unref() : undefined;
  const scheduler = new Scheduler(fx, driver);
  if (!store.created) await removePartialDownloads(runFile(options.runDir, 'outputs'));
  // How the last start ended, read before this one's record: a finished run resumed with nothing to do tells no one again.
  const endedBefore = store.state.lastOutcome;
  await fx.log(
    {
      type: 'run_started',
      runId: options.runId,
      pipeline: options.plan.name,
      planHash: options.planHash,
      options: fx.recorded,
      budgetUsd: fx.settings.budgetUsd ?? null,
    },
    true,
  );
  // Adopted requests are journaled as submitted (settle's `adopted` row), then followed as such.
  for (const [instance, submission] of adopted)
    await settle({ fx, step: options.plan.step(stepOfInstanceId(instance)), instance }, { kind: 'adopted', submission });
  if (fx.settings.serviceForgotten) {
    // What the dead service had in flight is unknown here, not something to follow: journaled, so
    // the run, its summary and the report read the same thing.
    const forgotten = sentNotFinal(store.state);
    for (const [i, instance] of forgotten.entries()) await fx.log({ type: 'forgotten', instance }, i === forgotten.length - 1);
  }
  fx.emit(startedEvent(fx, store.created));
  if (changes.length > 0) fx.emit({ type: 'options_changed', changes });
  const onAbort = (): void =>
    fx.stopRun('aborted', 'Interrupted: stopped submitting; the journal is flushed and `genpipe resume` continues the run.');
  // Interrupted before the walk began (Ctrl-C while the plan was checked): it stops at once, said so.
  if (options.signal.aborted) onAbort();
  else options.signal.addEventListener('abort', onAbort, { once: true });
  const unwire = wireTransport(fx, options);
  const watchdog = startWatchdog(fx);
  try {
    await untilHalted(fx, scheduler.walk().then(driver.walked));
  } finally {
    clearInterval(watchdog.timer);
    unwire();
    options.signal.removeEventListener('abort', onAbort);
    try {
      await fx.log({ type: 'run_finished', outcome: outcomeOf(fx) });
      await store.close();
      if (!fx.displaced) await summaryFile.close(fx.routes.waitedMs);
    } finally {
      summaryFile.stop();
      clearInterval(galleryTimer);
      // A displaced holder leaves the run's files to the process that holds it now.
      if (fx.displaced) await outputs.abandon();
      else {
        await driver.writeOutputsCsv();
        await view?.finish();
      }
    }
  }
  if (watchdog.stuck) throw watchdog.stuck;
  if (fx.refused) throw fx.refused;
  const summary = summaryOf(fx, started, endedBefore);
  fx.emit({ type: 'run_finished', summary });
  return summary;
}

/** How the run's journal is opened: past damaged lines when accepted (each said), its syncs timed for metrics. */
function storeOptions(options: RunOptions): OpenRunStoreOptions {
  return {
    acceptCorrupt: options.acceptCorrupt,
    onCorrupt: (corrupt) => options.onEvent?.({ type: 'journal_corrupt_accepted', line: corrupt.line, instance: corrupt.instance }),
    onSync: options.observer?.journalSync?.bind(options.observer),
  };
}

/** summary.json's writer, reading the run's own fold (a resume's journal folded, then each record written). */
function summaryWriter(fx: RunContext, store: RunStore): RunSummaryWriter {
  const head = { pipeline: fx.settings.plan.name, runId: fx.settings.runId, startedAt: store.state.firstStartedAt };
  return new RunSummaryWriter(fx.settings.runDir, head, fx.fold);
}

/** What the run tells its views at the start: the plan's steps, and for a resume its journal folded as it stands now (they go on from there). */
function startedEvent(fx: RunContext, created: boolean): RunEvent {
  const { plan, runId, runDir, budgetUsd } = fx.settings;
  return {
    type: 'run_started',
    runId,
    runDir,
    pipeline: plan.name,
    instances: plan.totalInstances,
    resumed: !created,
    budgetUsd,
    steps: plannedSteps(plan),
    // The run's own fold as it stands: a view copies it, as the summary reads it at the end.
    ...(created ? {} : { already: fx.fold.copy() }),
  };
}

/**
 * The run's transport, told of the run: every request goes through the run's per-route limiter (a
 * 429 slows its own route), and the transport's own retries draw from the run's one retry budget.
 * Returns the undoing of both.
 */
function wireTransport(fx: RunContext, options: RunOptions): () => void {
  const unpace = options.client.transport.pace(fx.routes);
  // Metrics: each answer and the run's throttling, told to the observer (observer.ts).
  const observer = options.observer;
  const unthrottle = observer?.throttling?.(fx.routes);
  const unobserve = observer
    ? options.client.transport.onExchange((e) => observer.exchange?.(e.method, new URL(e.url).pathname, e.status))
    : () => {};
  let throttleSaid = 0;
  const ungate = options.client.transport.retryGate(({ code, delayMs }) => {
    if (!fx.consumeRetry()) return false;
    if (code === 'rate_limited' && Date.now() - throttleSaid >= THROTTLE_LINE_MS) {
      throttleSaid = Date.now();
      fx.emit({ type: 'throttled', waitMs: delayMs, retriesLeft: fx.retriesLeft });
    }
    return true;
  });
  return () => {
    unpace();
    unobserve();
    ungate();
    fx.routes.close();
    unthrottle?.();
  };
}

/**
 * How the start ended, for its caller and the `run_finished` event. Its counts and money are the
 * run's fold of its journal (fx.fold, run-fold.ts), the very functions the report and progress
 * read: the summary says what the report of the journal says.
 */
function summaryOf(fx: RunContext, started: number, endedBefore: RunState['lastOutcome']): RunSummary {
  const { runId, runDir, plan } = fx.settings;
  const money = fx.fold.money();
  return {
    runId,
    runDir,
    pipeline: plan.name,
    outcome: outcomeOf(fx),
    message:
      fx.stopMessage ?? missingFilesSentence(fx) ?? uploadConflictsSentence(fx) ?? uploadsPendingSentence(fx) ?? notRemadeSentence(fx),
    stopReason: fx.stopReason,
    counts: countsOf(fx.fold),
    estimatedUsd: money.committedUsd,
    money: { netUsd: money.netUsd, unknownUsd: money.unknownUsd, unpricedInstances: money.unpricedInstances },
    durationMs: Date.now() - started,
    throttledMs: fx.routes.waitedMs,
    unchanged: fx.instanceRecords === 0 && endedBefore === outcomeOf(fx),
  };
}

/**
 * The run's context for this start: the journal must be a run's (a `run_started` record: an emptied
 * or foreign journal would make every instance look fresh and pay again), the options are the given
 * ones over those the run recorded, and the money starts from what the journal says was committed.
 */
async function startContext(options: RunOptions, store: RunStore): Promise<{ fx: RunContext; changes: string[] }> {
  if (!store.created && !store.state.started) {
    throw new GenpipeError(
      'invalid_file',
      `${runFile(options.runDir, 'journal')} holds no run_started record: it is empty or not this run's journal, so genpipe cannot tell what the run already paid for. Nothing was sent; restore the journal, or start a new run.`,
    );
  }
  const { options: settings, changes } = resolveRunOptions(options, store.state.options);
  const budget = settings.budgetUsd;
  const unpriced = options.plan.steps.filter((s) => !isPriced(s.price)).map((s) => s.id);
  if (budget !== undefined && unpriced.length > 0) {
    // A budget is a promise about money: an instance of unknown price could break it unseen. The
    // CLI refuses such a manifest first (plan/guards.ts); a library caller meets it here.
    throw new GenpipeError(
      'invalid_input',
      `With a budget, every step needs a price; ${unpriced.join(', ')} ${unpriced.length === 1 ? 'has' : 'have'} none: add it to the manifest's prices (or price_usd on the step).`,
    );
  }
  const reuse = settings.reuse ? await ReuseIndex.build(dirname(options.runDir), options.runDir) : undefined;
  const prices = new Map(options.plan.steps.map((s) => [s.id, s.priceUsd]));
  const committed = committedByJournal(store.state, (step) => prices.get(step));
  return { fx: new RunContext(store, settings, reuse, committed), changes };
}

/** What a run whose completed instances lack files says at its end: how many, why, and what to do. */
function missingFilesSentence(fx: RunContext): string | undefined {
  if (fx.missingFiles === 0) return undefined;
  const n = fx.missingFiles;
  return `${n} completed instance${n === 1 ? ' is' : 's are'} missing files that could not be fetched (${(fx.missingReason ?? 'the download failed').replace(/[.]$/, '')}); \`genpipe resume\` fetches them again, and nothing is generated again for them.`;
}

/** What a run that left uploads pending says at its end: how many, why, and what to do. */
function uploadsPendingSentence(fx: RunContext): string | undefined {
  if (fx.uploadsPending === 0) return undefined;
  const n = fx.uploadsPending;
  return `${n} completed instance${n === 1 ? ' is' : 's are'} not in the storage sink yet (${(fx.uploadProblem ?? 'the store refused').replace(/[.]$/, '')}); the files are on disk, and \`genpipe resume\` uploads them without generating anything.`;
}

/** What a run whose outputs met other objects at their keys says at its end: how many, and the setting that decides. */
function uploadConflictsSentence(fx: RunContext): string | undefined {
  const n = fx.uploadConflicts;
  if (n === 0) return undefined;
  return `${n} output${n === 1 ? ' was' : 's were'} not uploaded because another object with other bytes is at ${n === 1 ? 'its key' : 'their keys'} in the storage sink (nothing was overwritten; the files are on disk): set the sink's on_conflict to overwrite to replace ${n === 1 ? 'it' : 'them'}, or to skip to keep ${n === 1 ? 'it' : 'them'}, and \`genpipe resume --allow-changed\`.`;
}

/** What a start that could not remake every rejected instance says at its end. */
function notRemadeSentence(fx: RunContext): string | undefined {
  const n = fx.notRemade;
  if (n === 0) return undefined;
  return `${n} rejected instance${n === 1 ? '' : 's'} could not be made again (each is named above); nothing was sent for ${n === 1 ? 'it' : 'them'}.`;
}

function outcomeOf(fx: RunContext): RunOutcome {
  if (fx.settings.signal.aborted) return 'aborted';
  if (fx.stopReason === 'budget') return 'budget';
  if (fx.stopReason !== undefined || fx.refused !== undefined) return 'stopped';
  const c = fx.fold.counts();
  // A for_each step's instance never made is waiting for its upstream instance (one that failed
  // fails the run itself) or for its approval (`only: approved`, a review still to come): neither
  // fails the run. A step of its own that left instances unstarted does.
  const notStarted = fx.settings.plan.steps.reduce((n, s) => n + (s.forEach === undefined ? fx.fold.counts(s.id).not_started : 0), 0);
  // An attempt left in flight for a resume (its status could not be read) is not done; files
  // missing, waiting for a sink or kept out by an object at their key fail it too, as do rejected
  // instances that could not be made again.
  const left = fx.missingFiles + fx.uploadsPending + fx.uploadConflicts + fx.notRemade;
  return c.failed + c.nsfw + c.canceled + c.unknown + c.in_flight + notStarted + left === 0 ? 'completed' : 'failed';
}

/** The summary's counts, in its words, of the run's fold: the report's counts, and its re-rolls. */
function countsOf(fold: RunFold): RunCounts {
  const c = fold.counts();
  return {
    completed: c.completed,
    failed: c.failed,
    nsfw: c.nsfw,
    canceled: c.canceled,
    unknown: c.unknown,
    pending: c.not_started,
    rerolled: fold.rerolls(),
    reused: c.reused,
    inFlight: c.in_flight,
  };
}

/**
 * Liveness as an invariant: a run with work left, nothing under way that settles by itself (no
 * request, sleep or write) and no limiter timer pending can never move again. Two looks in a row
 * without progress end it with an internal error naming the stuck state: every wait is aborted,
 * the journal is flushed, and the run stays resumable. The timer is not unref'd on purpose: a
 * stuck run must be found, not left to exit quietly with an empty event loop.
 */
function startWatchdog(fx: RunContext): { timer: NodeJS.Timeout; stuck: GenpipeError | undefined } {
  const watchdog: { timer: NodeJS.Timeout; stuck: GenpipeError | undefined } = {
    timer: undefined as unknown as NodeJS.Timeout,
    stuck: undefined,
  };
  let seen = fx.progress;
  let idleLooks = 0;
  watchdog.timer = setInterval(() => {
    if (fx.busy > 0 || fx.limiter.sleeping || fx.routes.sleeping || fx.progress !== seen) {
      seen = fx.progress;
      idleLooks = 0;
      return;
    }
    if (++idleLooks < 2) return;
    clearInterval(watchdog.timer);
    const waits = [...fx.waits].map(([what, n]) => `${n} waiting for ${what}`).join(', ');
    watchdog.stuck = new GenpipeError(
      'internal',
      `The run is stuck: nothing is in flight and no timer is pending${waits === '' ? '' : `, with ${waits}`}. This is a bug in genpipe; the journal is flushed, and \`genpipe resume\` continues the run.`,
    );
    fx.stopRun('stuck', watchdog.stuck.message);
    fx.halt.abort(watchdog.stuck);
  }, fx.settings.watchdogMs);
  return watchdog;
}

/**
 * The walk, or, once the run is halted (stuck) or interrupted, at most a short grace for it to
 * settle: a wait that ignores the abort must not keep the run from ending.
 */
async function untilHalted(fx: RunContext, walk: Promise<void>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const ended = new Promise<void>((resolve) => {
    const onAbort = (): void => {
      timer = setTimeout(resolve, fx.settings.cancelOnAbort ? CANCEL_TIMEOUT_MS + HALT_GRACE_MS : HALT_GRACE_MS);
    };
    if (fx.signal.aborted) onAbort();
    else fx.signal.addEventListener('abort', onAbort, { once: true });
  });
  try {
    await Promise.race([walk, ended]);
  } finally {
    clearTimeout(timer);
  }
}

/** Temp files of downloads a crash cut short (see download.ts); a resume downloads them again. */
async function removePartialDownloads(outputs: string): Promise<void> {
  const steps = await readdir(outputs, { withFileTypes: true }).catch(() => []);
  for (const step of steps) {
    if (!step.isDirectory()) continue;
    const names = await readdir(join(outputs, step.name)).catch(() => [] as string[]);
    for (const name of names) if (/^\.genpipe-[0-9a-f]{16}\.part$/.test(name)) await unlink(join(outputs, step.name, name)).catch(() => {});
  }
}
