// The second threads of a big plan or report (src/util/worker-task.ts): a task answers once, with its
// result or why it failed, and a thread that ends without answering is a failure too, never a result.
// The worker modules import the built helper (npm test builds first).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startTask, startTaskWorker, workerExecArgv } from '../../src/util/worker-task.js';
import { spawnSync } from 'node:child_process';
import { cleanTemps, tempDir } from '../run/runner-helpers.js';

afterAll(cleanTemps);

const built = new URL('../../dist/util/worker-task.js', import.meta.url).href;
const dir = tempDir('genpipe-worker-task-');

function workerModule(name: string, body: string): URL {
  const path = join(dir, `${name}.mjs`);
  writeFileSync(
    path,
    `import { workerData } from 'node:worker_threads';\nimport { answerTask, serveTasks } from ${JSON.stringify(built)};\n${body}\n`,
  );
  return new URL(`file://${path}`);
}

const failed = (why: string): Error => new Error(`the task failed: ${why}`);

describe('startTask and answerTask', () => {
  it('resolves with what the task returns, given its data', async () => {
    const module = workerModule('doubles', 'await answerTask(async () => ({ doubled: workerData.n * 2 }));');
    await expect(startTask<{ doubled: number }>(module, { n: 21 }, failed).answer).resolves.toEqual({ doubled: 42 });
  });

  it('rejects with the sentence of a task that threw, not with an answer', async () => {
    const module = workerModule('throws', "await answerTask(async () => { throw new Error('no space left on the disk'); });");
    await expect(startTask(module, {}, failed).answer).rejects.toThrow(/^the task failed: no space left on the disk$/);
  });

  it('rejects when the thread ends without answering', async () => {
    const module = workerModule('exits', 'process.exit(4);');
    await expect(startTask(module, {}, failed).answer).rejects.toThrow(
      /^the task failed: the thread stopped \(exit code 4\) before answering$/,
    );
  });

  it('stop ends a thread that would never answer', async () => {
    const module = workerModule('hangs', 'setInterval(() => {}, 1000);');
    const task = startTask(module, {}, failed);
    task.stop();
    await expect(task.answer).rejects.toThrow(/before answering$/);
  });
});

describe('startTaskWorker and serveTasks', () => {
  it('answers each task in turn, a failed one with its sentence, and goes on serving', async () => {
    const module = workerModule(
      'serves',
      'serveTasks(async (task) => { if (task.n < 0) throw new Error(`no negative numbers: ${task.n}`); await new Promise((r) => setTimeout(r, 20 - task.n)); return task.n * 2; });',
    );
    const worker = startTaskWorker(module);
    try {
      await worker.ready;
      // Sent at once, answered in order, each its own (the first takes longest).
      const answers = [worker.run<number>({ n: 1 }, failed), worker.run<number>({ n: -2 }, failed), worker.run<number>({ n: 10 }, failed)];
      await expect(answers[0]).resolves.toBe(2);
      await expect(answers[1]).rejects.toThrow(/^the task failed: no negative numbers: -2$/);
      await expect(answers[2]).resolves.toBe(20);
    } finally {
      worker.stop();
    }
  });

  it('a thread that fails as it starts fails its tasks with why, never answers them', async () => {
    const module = workerModule('throws-at-start', "throw new Error('cannot load the catalog');");
    const worker = startTaskWorker(module);
    await expect(worker.ready).rejects.toThrow('cannot load the catalog');
    await expect(worker.run({ n: 1 }, failed)).rejects.toThrow(/^the task failed: cannot load the catalog$/);
  });

  it('a thread that ends while a task waits fails it, and every task after', async () => {
    const module = workerModule('exits-on-task', 'serveTasks(async () => process.exit(5));');
    const worker = startTaskWorker(module);
    await expect(worker.run({}, failed)).rejects.toThrow(/^the task failed: the thread stopped \(exit code 5\) before answering$/);
    await expect(worker.run({}, failed)).rejects.toThrow(/before answering$/);
  });

  it('stop fails a task not yet answered', async () => {
    const module = workerModule('serves-never', 'serveTasks(() => new Promise(() => {}));');
    const worker = startTaskWorker(module);
    await worker.ready;
    const answer = worker.run({}, failed);
    worker.stop();
    await expect(answer).rejects.toThrow(/before answering$/);
  });

  it('an idle thread never holds the process open: a caller that failed before stopping it still exits', () => {
    const module = workerModule('idle', 'serveTasks(async (task) => task);');
    const script = `import { startTaskWorker } from ${JSON.stringify(built)};\nconst worker = startTaskWorker(new URL(${JSON.stringify(module.href)}));\nconsole.log(await worker.run('echo', (why) => new Error(why)));\n`;
    const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 20_000 });
    // Answered, then exited on its own (not killed by the timeout), the thread never stopped.
    expect(child.stdout.trim()).toBe('echo');
    expect({ status: child.status, signal: child.signal }).toEqual({ status: 0, signal: null });
  });
});

describe('a process started with Node options a worker refuses', () => {
  // V8's options and the process's own hold for every thread; a worker given them would not start.
  it.each([
    ['V8 options', ['--max-old-space-size=512', '--trace-gc']],
    ['an option of the process', ['--title=genpipe-report']],
  ])('still starts its workers: %s', (_, options) => {
    const module = workerModule('answers', 'await answerTask(async () => workerData.n + 1);');
    const script = `import { startTask } from ${JSON.stringify(built)};\nconsole.log(await startTask(new URL(${JSON.stringify(module.href)}), { n: 41 }, (why) => new Error(why)).answer);\n`;
    const child = spawnSync(process.execPath, [...options, '--input-type=module', '-e', script], { encoding: 'utf8', timeout: 20_000 });
    expect(child.stderr).not.toMatch(/invalid execArgv/);
    expect(child.stdout.split('\n').filter((line) => /^\d+$/.test(line))).toEqual(['42']);
    expect(child.status).toBe(0);
  });
});

describe('workerExecArgv', () => {
  it('drops the options about the main script’s source, with their values, and keeps the rest', () => {
    expect(workerExecArgv(['--max-old-space-size=512', '--input-type=module', '-e', 'code', '--enable-source-maps'])).toEqual([
      '--max-old-space-size=512',
      '--enable-source-maps',
    ]);
    expect(workerExecArgv(['--input-type', 'module', '--eval', 'code', '--require', 'x.cjs'])).toEqual(['--require', 'x.cjs']);
    expect(workerExecArgv(['-p', 'code', '--print=code', '--eval=code', '--no-warnings'])).toEqual(['--no-warnings']);
  });
});
