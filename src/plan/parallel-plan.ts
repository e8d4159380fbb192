/**
 * A plan's instances checked by two threads, to halve the time of a huge plan: this one checks the first part,
 * a worker thread (plan-worker.ts) the rest, each rendering, validating, keying and spooling its
 * part as JSON lines. The worker loads the same manifest and reads the same files, with the
 * catalogs this thread fetched, so its instances are those a single pass would make; its findings
 * are merged after this thread's (mergeChecks), so the plan's verdict is the same too.
 *
 * Only for plans it cannot change the meaning of: big ones (a thread costs about a tenth of a
 * second to start) without for_each steps (their instances follow the upstream's valid ones) or
 * output file names (two instances' names may not collide, a check over the whole step).
 */
import { GenpipeError } from '../api/errors.js';
import type { OptionsCatalog, Preset } from '../api/wire.js';
import { canStartWorker, startTask } from '../util/worker-task.js';
import type { InstancePrices } from './price.js';
import type { InstanceCheck, LocalFile, Plan, PlanHelper, PlanOptions, SeenProblem } from './plan.js';

/** Plans smaller than this are checked by one thread. */
export const PARALLEL_MIN_INSTANCES = 100_000;

/**
 * The share of the instances this thread keeps: half. The worker starts about a tenth of a second
 * late, and this thread alone copies the output afterwards; on a million instances 0.46 to 0.55
 * measured the same within noise.
 */
const OWN_SHARE = 0.5;

/** What the worker is asked to do (its workerData). */
export interface HelperJob {
  manifest: string;
  from: number;
  to: number;
  /** Where the worker spools its instances' JSON lines (instance-spool.ts, continuing this thread's). */
  spool: string;
  /** The manifest's allow-listed environment variables, as this thread read them. */
  env: Record<string, string>;
  run: { id: string; startedAt: string };
  maxProblems: number;
  presets: readonly Preset[] | undefined;
  catalog: OptionsCatalog | undefined;
}

/** What the worker answers: its check, as entry lists. */
export interface HelperAnswer {
  seen: [string, SeenProblem][];
  localFiles: [string, LocalFile][];
  /** The prices of the instances it checked, by step (InstanceCheck.prices). */
  prices?: [string, InstancePrices][] | undefined;
}

/** The worker's module: beside this one, in the build (dist/plan/ or dist/bundle/); absent when running from sources. */
const WORKER = new URL('./plan-worker.js', import.meta.url);

export interface ParallelPlanOptions {
  manifest: string;
  /** The worker's spool file. */
  spool: string;
  env: NodeJS.ProcessEnv;
  run: { id: string; startedAt: Date };
  /** The presets this thread's plan read, if it read any. */
  presets: () => readonly Preset[] | undefined;
  signal: AbortSignal;
  maxProblems?: number;
  /** Default PARALLEL_MIN_INSTANCES. */
  minInstances?: number | undefined;
  /** The worker's module; default plan-worker.js beside this one (tests of the sources name the built one). */
  worker?: URL | undefined;
}

/** A `helper` for buildPlan that checks a big plan's last instances in a worker thread. */
export function parallelPlanHelper(options: ParallelPlanOptions): NonNullable<PlanOptions['helper']> {
  return (plan, catalog) => {
    const total = plan.totalInstances;
    const worker = options.worker ?? WORKER;
    if (total < (options.minInstances ?? PARALLEL_MIN_INSTANCES) || !parallelizable(plan, worker)) return undefined;
    const from = Math.max(1, Math.floor(total * OWN_SHARE));
    const env: Record<string, string> = {};
    for (const name of plan.loaded.manifest.env ?? []) {
      const value = options.env[name];
      if (value !== undefined) env[name] = value;
    }
    const job: HelperJob = {
      manifest: options.manifest,
      from,
      to: total,
      spool: options.spool,
      env,
      run: { id: options.run.id, startedAt: options.run.startedAt.toISOString() },
      maxProblems: options.maxProblems ?? 100,
      presets: options.presets(),
      catalog,
    };
    return startHelper(worker, job, options.signal);
  };
}

function parallelizable(plan: Plan, worker: URL): boolean {
  return (
    canStartWorker(worker) && plan.loaded.fileNames.size === 0 && plan.steps.every((s) => s.forEach === undefined && s.subset === undefined)
  );
}

function startHelper(module: URL, job: HelperJob, signal: AbortSignal): PlanHelper {
  const task = startTask<HelperAnswer>(
    module,
    job,
    (why) => new GenpipeError('internal', `Checking the plan's last ${job.to - job.from} instances in a second thread failed: ${why}`),
  );
  const check = new Promise<InstanceCheck>((resolve, reject) => {
    const onAbort = (): void => {
      task.stop();
      reject(new GenpipeError('aborted', 'Interrupted while checking the plan; nothing was sent.', { cause: signal.reason }));
    };
    signal.addEventListener('abort', onAbort, { once: true });
    task.answer
      .then(
        (answer) => resolve({ seen: new Map(answer.seen), localFiles: new Map(answer.localFiles), prices: new Map(answer.prices ?? []) }),
        reject,
      )
      .finally(() => signal.removeEventListener('abort', onAbort));
  });
  // Not awaited until this thread's part is checked: a failure waits for that, unreported till then.
  check.catch(() => {});
  return { from: job.from, check, cancel: task.stop };
}
