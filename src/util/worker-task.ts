/**
 * A worker thread doing one task for the thread that started it (the second half of a big plan or
 * report): started with its data, it answers once, with its result or with why it failed, and
 * ends. The threads on both sides of plan-worker.ts and report-worker.ts.
 */
import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parentPort, Worker } from 'node:worker_threads';

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
  const worker = new Worker(module, { workerData: data, execArgv: workerExecArgv(process.execArgv) });
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
