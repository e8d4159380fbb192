/**
 * Worker threads doing work for the thread that started them, two ways, each with both sides:
 * - startTask / answerTask: one task (the second half of a big plan: plan-worker.ts), started with
 *   its data; it answers once, with its result or with why it failed, and ends.
 * - startTaskWorker / serveTasks: tasks in turn (a big report's: the journal's second half, then
 *   its last lines: report-worker.ts), sent once the thread says it is ready, each answered in
 *   order; the thread lives until stopped. A thread started once costs its start once, and it can
 *   start while the first thread already works (about a tenth of a second, more beside busy cores).
 */
import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parentPort, Worker, type WorkerOptions } from 'node:worker_threads';

/** A task's answer when it failed; any other answer is its result. */
interface Failure {
  failed: string;
}

const isFailure = (message: unknown): message is Failure => typeof message === 'object' && message !== null && 'failed' in message;

/** True when a second thread can help: two cores or more, and the worker's module is built. */
export function canStartWorker(module: URL): boolean {
  return availableParallelism() >= 2 && existsSync(fileURLToPath(module));
}

/**
 * Starts the worker `module` on `data`. `answer` settles once: with the task's result, or rejected
 * with `failed(why)` when the task failed, threw, or the thread ended without answering. The caller
 * awaits it once its own part is done; `stop` ends the thread.
 */
export function startTask<T>(module: URL, data: unknown, failed: (why: string) => Error): { answer: Promise<T>; stop: () => void } {
  const worker = newWorker(module, { workerData: data });
  const answer = new Promise<T>((resolve, reject) => {
    worker.once('message', (message: unknown) => (isFailure(message) ? reject(failed(message.failed)) : resolve(message as T)));
    worker.once('error', (error) => reject(failed(error.message)));
    // After an answer this does nothing (a promise settles once).
    worker.once('exit', (code) => reject(failed(`the thread stopped (exit code ${code}) before answering`)));
  });
  // Not awaited until the caller's own part is done: a failure waits for that, unreported till then.
  answer.catch(() => {});
  return { answer, stop: () => void worker.terminate() };
}

/**
 * The Node options a worker starts with: this process's, less those about the main script's own
 * source (`--input-type`, `-e`, `-p` and their values). A worker inherits them by default, and with
 * `--input-type` it refused to start ("can only be used with string input"): genpipe driven from
 * `node --input-type=module -e '…'` failed its big plans and reports with exit 70.
 */
export function workerExecArgv(execArgv: readonly string[]): string[] {
  const kept: string[] = [];
  for (let i = 0; i < execArgv.length; i++) {
    const arg = execArgv[i] as string;
    if (arg.startsWith('--input-type=') || /^--(eval|print)=/.test(arg)) continue;
    if (['--input-type', '-e', '--eval', '-p', '--print', '-pe'].includes(arg)) {
      i++;
      continue;
    }
    kept.push(arg);
  }
  return kept;
}

/**
 * A worker on `module`, given this process's Node options (workerExecArgv) less any a worker
 * refuses: V8's (`--max-old-space-size`, `--trace-gc`) and the process's own (`--title`). Those
 * already hold for every thread of the process. Given them, a worker would not start, and
 * `node --max-old-space-size=4096 genpipe report` of a big run failed with exit 70. Node names the
 * options it refuses; if it names them in words this does not read, the worker starts with none.
 */
function newWorker(module: URL, options: WorkerOptions): Worker {
  let execArgv = workerExecArgv(process.execArgv);
  // Each refusal leaves fewer options, and none once Node names none of those given: the tries end.
  for (;;) {
    try {
      return new Worker(module, { ...options, execArgv });
    } catch (error) {
      if ((error as { code?: unknown }).code !== 'ERR_WORKER_INVALID_EXEC_ARGV' || execArgv.length === 0) throw error;
      const refused = new Set((error as Error).message.replace(/^[^:]*:\s*/, '').split(/,\s*/));
      const kept = execArgv.filter((arg) => !refused.has(arg));
      execArgv = kept.length < execArgv.length ? kept : [];
    }
  }
}

/** In the worker: runs the task and answers the thread that started it, with its result or why it failed. */
export async function answerTask(work: () => Promise<unknown>): Promise<void> {
  let message: unknown;
  try {
    message = await work();
  } catch (error) {
    message = { failed: error instanceof Error ? error.message : String(error) } satisfies Failure;
  }
  parentPort?.postMessage(message);
}

/** What a serving thread says once it is ready for tasks. */
const READY = 'genpipe-worker-ready';

/** A thread serving tasks in turn (serveTasks on its side). */
export interface TaskWorker {
  /** Settles once the thread is ready for tasks, or rejected with why it never will be. */
  readonly ready: Promise<void>;
  /**
   * Sends a task once the thread is ready and the task before has been answered; resolves with its
   * answer, or rejects with `failed(why)`: the task failed, or the thread ended or failed first.
   */
  run<T>(task: unknown, failed: (why: string) => Error): Promise<T>;
  /** Ends the thread; a task not yet answered is rejected. */
  stop(): void;
}

/** Starts the serving worker `module` (see TaskWorker). */
export function startTaskWorker(module: URL): TaskWorker {
  const worker = newWorker(module, {});
  // Why the thread can no longer answer, once it cannot; each waiting answer hears it.
  let ended: string | undefined;
  const waiting: ((message: unknown) => void)[] = [];
  // The thread keeps this process alive only while an answer is awaited: a thread left idle
  // (its owner failed before stopping it) never holds a command open.
  const hold = (): void => {
    if (waiting.length > 0) worker.ref();
    else worker.unref();
  };
  const end = (why: string): void => {
    ended ??= why;
    for (const settle of waiting.splice(0)) settle({ failed: ended } satisfies Failure);
  };
  worker.on('message', (message: unknown) => {
    waiting.shift()?.(message);
    hold();
  });
  worker.once('error', (error) => end(error.message));
  worker.once('exit', (code) => end(`the thread stopped (exit code ${code}) before answering`));
  const next = (): Promise<unknown> => {
    if (ended !== undefined) return Promise.resolve({ failed: ended } satisfies Failure);
    const answer = new Promise<unknown>((resolve) => waiting.push(resolve));
    hold();
    return answer;
  };
  const ready = next().then((message) => {
    if (message !== READY) throw new Error(isFailure(message) ? message.failed : 'the thread said something else than that it was ready');
  });
  // Not awaited until a task is run: a failure waits for that, unreported till then.
  ready.catch(() => {});
  let previous: Promise<unknown> = ready;
  return {
    ready,
    run<T>(task: unknown, failed: (why: string) => Error): Promise<T> {
      const answer = previous
        .catch(() => {})
        .then(async () => {
          await ready.catch((error: Error) => {
            throw failed(error.message);
          });
          const reply = next();
          if (ended === undefined) worker.postMessage(task);
          const message = await reply;
          if (isFailure(message)) throw failed(message.failed);
          return message as T;
        });
      previous = answer;
      answer.catch(() => {});
      return answer;
    },
    stop: () => void worker.terminate(),
  };
}

/** In a serving worker: says it is ready, then runs each task it is sent, in order, answering each with its result or why it failed. */
export function serveTasks(work: (task: unknown) => Promise<unknown>): void {
  const port = parentPort;
  if (!port) throw new Error('serveTasks runs in a worker thread');
  let previous = Promise.resolve();
  port.on('message', (task: unknown) => {
    previous = previous.then(async () => {
      let message: unknown;
      try {
        message = await work(task);
      } catch (error) {
        message = { failed: error instanceof Error ? error.message : String(error) } satisfies Failure;
      }
      port.postMessage(message);
    });
  });
  port.postMessage(READY);
}
