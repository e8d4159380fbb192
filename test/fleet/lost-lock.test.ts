// A worker that lost its job never sends for it: worker A stops itself (SIGSTOP) just before its
// intent write, stays stopped past its lock lease, worker B takes the job over and sends it, and A
// is continued while B still follows it. A's intent write is refused by its lock token (the job's
// lock is B's now): A writes nothing and sends nothing. One POST for the attempt, one intent in the
// run's journal, and the report is the emulator's ledger. Runs the built binary.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { cleanTemps, emuRequests, findRunDir, journalOf, runCli, spentUsd, tempDir } from '../run/runner-helpers.js';
import { killAll, startWorkerProcess, useTestRedis, type WorkerProcess } from './fleet-helpers.js';

const redis = useTestRedis();
const workers: WorkerProcess[] = [];
let emu: Emulator | undefined;

afterEach(async () => {
  for (const w of workers) w.child.kill('SIGCONT');
  await killAll(workers.splice(0));
  await emu?.close();
  emu = undefined;
  cleanTemps();
});

const POLLING = 'defaults:\n  polling: { initial_ms: 100, min_ms: 50, max_ms: 400 }\n';
/** One instance `p[n=1]`: a keyless image (Soul: no Idempotency-Key) or a keyed character sheet, each priced so the ledger moves. */
const MODELS = {
  keyless: {
    price: 0.03,
    steps: `prices: { soul-standard: 0.03 }\n${POLLING}steps:\n  p:\n    model: soul-standard\n    matrix: { n: [1] }\n    input: { prompt: "Poster {{ n }}", aspect_ratio: "1:1", resolution: 1080p }\n`,
  },
  keyed: {
    price: 0.05,
    steps: `${POLLING}steps:\n  p:\n    model: character-sheet\n    matrix: { n: [1] }\n    input: { tier: cats, seed: "{{ n }}", brief: A mascot }\n`,
  },
} as const;

function manifest(dir: string, name: string, kind: keyof typeof MODELS): string {
  const path = join(dir, `${name}.yaml`);
  writeFileSync(path, `version: 1\nname: ${name}\n${MODELS[kind].steps}`);
  return path;
}

/** The state letter of a process (T: stopped), from /proc. */
const stateOf = (pid: number): string =>
  readFileSync(`/proc/${pid}/stat`, 'utf8')
    .replace(/^.*\) /s, '')
    .slice(0, 1);

async function until(what: () => boolean, ms: number, label: string): Promise<void> {
  const end = Date.now() + ms;
  // Bounded by the deadline.
  while (!what()) {
    if (Date.now() > end) throw new Error(`not within ${ms} ms: ${label}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('a worker paused past its lock lease', () => {
  it.each(['keyless', 'keyed'] as const)(
    '%s: writes no intent and sends nothing once another worker took its job: one POST, one intent, report = ledger',
    { timeout: 90_000 },
    async (kind) => {
      emu = await startEmulator({ port: 0, timeScale: 1, log: () => {} });
      const service = emu;
      const dir = tempDir();
      const out = `${dir}/runs`;
      const queue = 'lost-lock';
      const a = await startWorkerProcess(redis.url, service.url, 'lock-a', ['--queue', queue, '--concurrency', '1'], {
        GENPIPE_FLEET_PAUSE_AT: 'before_intent',
      });
      workers.push(a);
      const pid = a.child.pid as number;
      const run = runCli(
        ['run', manifest(dir, 'lost', kind), '--out', out, '--redis', redis.url, '--queue', queue, '--no-local-worker', '--yes'],
        {
          env: { GENPIPE_BASE_URL: service.url },
          timeoutMs: 80_000,
        },
      );
      // A took the job and stopped itself just before its intent write.
      await until(() => stateOf(pid) === 'T', 20_000, 'worker A stopped before its intent');
      const b = await startWorkerProcess(redis.url, service.url, 'lock-b', ['--queue', queue, '--concurrency', '1']);
      workers.push(b);
      // A's lock lapses (10 s), the stalled-job check gives the job to B, and B sends it.
      await until(() => emuRequests(service).length >= 1, 40_000, 'worker B sent the request');
      expect(emuRequests(service)[0]?.status).not.toBe('completed');
      a.child.kill('SIGCONT');
      const said = /lost the lock of the job of p\[n=1\]/;
      await until(() => said.test(a.output()) || emuRequests(service).length > 1, 10_000, `worker A said it lost the job:\n${a.output()}`);

      const done = await run;
      expect(done.code, done.stderr).toBe(0);
      expect(emuRequests(service)).toHaveLength(1);
      expect(a.output()).toMatch(said);
      const runDir = findRunDir(out, 'lost');
      const records = journalOf(runDir).records;
      expect(records.filter((r) => r.type === 'intent')).toHaveLength(1);
      expect(records.filter((r) => r.type === 'submitted')).toHaveLength(1);
      const report = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as {
        total: { netUsd: number; unknownUsd: number; counts: Record<string, number> };
      };
      expect(report.total.counts.completed).toBe(1);
      expect(report.total.unknownUsd).toBe(0);
      expect(report.total.netUsd).toBeCloseTo(spentUsd(service), 6);
      expect(report.total.netUsd).toBeCloseTo(MODELS[kind].price, 6);
      expect(a.output()).not.toMatch(/internal error|at .*\.js:\d+/);
    },
  );
});
