// A Redis that stops answering once a fleet process is running: a paused
// redis-server (SIGSTOP) keeps its connections open and answers nothing. A worker and a run's
// coordinator each end by themselves with exit 5 and one sentence (the stall period is lowered to
// 3 s here; the default is 10 s), and the run resumes once Redis answers, nothing paid twice.
// Each child process has a hard limit: past it, it is killed and its exit code is null.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { expectOneRequestPerKey, findRunDir, runCli, tempDir } from '../run/runner-helpers.js';
import { fastSheets, startWorkerProcess } from './fleet-helpers.js';
import { startTestRedis, type TestRedis } from './redis-server.js';

let redis: TestRedis;
let emu: Emulator;
beforeAll(async () => {
  redis = await startTestRedis();
  emu = await startEmulator({ port: 0, timeScale: 0.05, log: () => {} });
});
afterAll(async () => {
  await redis.dispose();
  await emu.close();
});

const env = (): Record<string, string> => ({ GENPIPE_BASE_URL: emu.url, GENPIPE_REDIS_STALL_MS: '3000' });
const STALLED =
  /Redis at redis:\/\/127\.0\.0\.1:\d+ stopped answering \(nothing for 3 s\), so the (worker \S+|run) stopped; what was done is kept: start it again once Redis answers\./;

describe('a Redis that stops answering mid-way', () => {
  it('ends a worker with exit 5 and one sentence', { timeout: 60_000 }, async () => {
    const worker = await startWorkerProcess(redis.url, emu.url, 'stall-w', ['--queue', 'stall-worker'], { GENPIPE_REDIS_STALL_MS: '3000' });
    redis.signal('SIGSTOP');
    const bound = setTimeout(() => worker.child.kill('SIGKILL'), 30_000);
    const code = await worker.exited;
    clearTimeout(bound);
    redis.signal('SIGCONT');
    expect(code, worker.output()).toBe(5);
    expect(worker.output()).toMatch(STALLED);
    expect(worker.output()).not.toMatch(/internal error|at .*\.js:\d+/);
  });

  it(
    'ends a run --redis with exit 5 and one sentence; resumed once Redis answers, it completes with one request per key',
    { timeout: 90_000 },
    async () => {
      const dir = tempDir();
      const out = `${dir}/runs`;
      const before = emu.requests.byId.size;
      const run = runCli(
        ['run', fastSheets(dir, 16, 'stalled'), '--out', out, '--redis', redis.url, '--queue', 'stall-run', '--concurrency', '2', '--yes'],
        { env: env(), timeoutMs: 40_000 },
      );
      const end = Date.now() + 20_000;
      // Bounded by the deadline: pause Redis once the run has sent a few requests.
      while (emu.requests.byId.size - before < 3 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
      redis.signal('SIGSTOP');
      const stopped = await run;
      redis.signal('SIGCONT');
      expect(stopped.code, stopped.stderr).toBe(5);
      expect(stopped.stderr).toMatch(STALLED);
      const resumed = await runCli(['resume', findRunDir(out, 'stalled'), '--redis', redis.url, '--queue', 'stall-run', '--yes'], {
        env: env(),
        timeoutMs: 60_000,
      });
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(emu.requests.byId.size - before).toBe(16);
      expectOneRequestPerKey(emu);
    },
  );
});
