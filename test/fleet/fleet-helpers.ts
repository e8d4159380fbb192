import { spawn, type ChildProcess } from 'node:child_process';
import { BIN, HF_KEY } from '../run/runner-helpers.js';

export interface WorkerProcess {
  child: ChildProcess;
  name: string;
  output(): string;
  /** Resolves with the exit code (or the signal's name) once it ends. */
  exited: Promise<number | string>;
}

/** Starts `genpipe worker` as its own process and resolves once it printed its `ready` line. */
export async function startWorkerProcess(redisUrl: string, serviceUrl: string, name: string, extra: readonly string[] = []): Promise<WorkerProcess> {
  const child = spawn(process.execPath, [BIN, 'worker', '--redis', redisUrl, '--name', name, ...extra], {
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', HF_KEY, GENPIPE_BASE_URL: serviceUrl },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  const exited = new Promise<number | string>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal ?? 'unknown')));
  const ready = new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      if (/^ready\b/m.test(stdout)) resolve();
    });
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    void exited.then((code) => reject(new Error(`worker ${name} exited (${code}) before it was ready:\n${stdout}${stderr}`)));
    setTimeout(() => reject(new Error(`worker ${name} was not ready within 15 s:\n${stdout}${stderr}`)), 15_000).unref();
  });
  await ready;
  return { child, name, output: () => stdout + stderr, exited };
}

/** Stops every worker still running (SIGKILL), for afterEach. */
export async function killAll(workers: readonly WorkerProcess[]): Promise<void> {
  for (const w of workers) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
  await Promise.all(workers.map((w) => w.exited));
}
