// The second threads of a big plan or report (src/util/worker-task.ts): a task answers once, with its
// result or why it failed, and a thread that ends without answering is a failure too, never a result.
// The worker modules import the built helper (npm test builds first).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startTask, workerExecArgv } from '../../src/util/worker-task.js';
import { cleanTemps, tempDir } from '../run/runner-helpers.js';

afterAll(cleanTemps);

const built = new URL('../../dist/util/worker-task.js', import.meta.url).href;
const dir = tempDir('genpipe-worker-task-');

function workerModule(name: string, body: string): URL {
  const path = join(dir, `${name}.mjs`);
  writeFileSync(path, `import { workerData } from 'node:worker_threads';\nimport { answerTask } from ${JSON.stringify(built)};\n${body}\n`);
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
