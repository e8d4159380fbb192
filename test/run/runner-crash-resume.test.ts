// Crash and resume (reliability.md #1, #5): the built CLI is SIGKILLed at every named crash point
// (GENPIPE_CRASH_AT=<point>:<n>, n seeded) and at seeded random moments, then resumed. Afterwards the
// emulator holds exactly one request per Idempotency-Key (one per instance), every output is on disk
// with the sha256 of its journal record and of outputs.csv, and the ledger equals the estimate.
//
// A conformance suite: every scenario runs against both backends, the local one and the fleet
// (BullMQ on a redis-server of the file's own, a `genpipe worker` process per scenario, the
// coordinator with --no-local-worker: the worker goes on while the coordinator is killed).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseCsv } from 'csv-parse/sync';
import { afterAll, describe, expect, it } from 'vitest';
import { startEmulator } from '../../src/emulator/index.js';
import { CRASH_POINTS } from '../../src/run/attempt/crash-points.js';
import {
  cleanTemps,
  emuRequests,
  expectCompletedRun,
  expectNoSecret,
  expectOneRequestPerKey,
  findRunDir,
  journalOf,
  marketingManifest,
  prng,
  runCli,
  sha256File,
  sheetsManifest,
  spentUsd,
  tempDir,
  waitForRequests,
} from './runner-helpers.js';

import { BACKENDS, backendFor } from '../fleet/backends.js';
import { useTestRedis } from '../fleet/fleet-helpers.js';

const redis = useTestRedis();
afterAll(cleanTemps);

const INSTANCES = 24;
const CONCURRENCY = 8;
const PRICE = 0.05;

type Scenario = { name: string; seed: number; crashAt?: string; killAfterFirstSubmitMs?: number; killResumeAfterMs?: number | undefined };

// Every named point, three seeded hit counts each; n ≤ INSTANCES, and every point is reached at
// least once per instance (mid_download once per body chunk), so every one of them crashes the run.
const named: Scenario[] = CRASH_POINTS.flatMap((point, p) =>
  [1, 2, 3].map((k) => {
    const seed = 100 + p * 10 + k;
    const n = 1 + Math.floor(prng(seed)() * INSTANCES);
    return { name: `${point}:${n} (seed ${seed})`, seed, crashAt: `${point}:${n}` };
  }),
);
// Random moments: a seeded delay after the first submit reaches the emulator. A run needs at least
// three polling waves of 500 ms (24 instances, 8 at once, poll floor 500 ms), so a delay under
// 1,200 ms always lands mid-run. Half of them also kill the first resume at a seeded moment.
const random: Scenario[] = Array.from({ length: 10 }, (_, i) => {
  const seed = 1_000 + i;
  const r = prng(seed);
  const delay = Math.floor(r() * 1_200);
  const second = i % 2 === 1 ? 200 + Math.floor(r() * 1_500) : undefined;
  return {
    name: `random ${delay} ms${second === undefined ? '' : `, resume killed at ${second} ms`} (seed ${seed})`,
    seed,
    killAfterFirstSubmitMs: delay,
    killResumeAfterMs: second,
  };
});

describe.concurrent.each(BACKENDS)('crash and resume (character sheets, keyed), %s backend', (backend) => {
  it.each([...named, ...random])('$name', { timeout: 120_000 }, async (scenario) => {
    const emu = await startEmulator({ port: 0, timeScale: 0.01, seed: scenario.seed, log: () => {} });
    const fleet = await backendFor(backend, emu.url, redis.url);
    try {
      const dir = tempDir();
      const out = tempDir();
      const manifest = sheetsManifest(dir, INSTANCES);
      const common = ['--base-url', emu.url, '--concurrency', String(CONCURRENCY), '--rate', '1000', ...fleet.flags];
      const first = await runCli(['run', manifest, '--out', out, ...common], {
        env: scenario.crashAt ? { GENPIPE_CRASH_AT: scenario.crashAt } : {},
        onSpawn: (send) => {
          if (scenario.killAfterFirstSubmitMs === undefined) return;
          void waitForRequests(emu, 1).then(() => setTimeout(() => send('SIGKILL'), scenario.killAfterFirstSubmitMs));
        },
      });
      expect(first.signal, first.stderr).toBe('SIGKILL');
      const runDir = findRunDir(out, 'sheets');
      // The crash happened mid-run: some output was not downloaded yet, and the run never finished.
      const before = journalOf(runDir).records;
      expect(before.filter((r) => r.type === 'downloaded').length).toBeLessThan(INSTANCES);
      expect(before.some((r) => r.type === 'run_finished')).toBe(false);
      expectOneRequestPerKey(emu);

      let output = first.stdout + first.stderr;
      if (scenario.killResumeAfterMs !== undefined) {
        const second = await runCli(['resume', runDir, ...common], { kill: { signal: 'SIGKILL', afterMs: scenario.killResumeAfterMs } });
        output += second.stdout + second.stderr;
        expectOneRequestPerKey(emu);
      }
      const resumed = await runCli(['resume', runDir, ...common]);
      output += resumed.stdout + resumed.stderr;
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(resumed.stdout).toContain(`completed; ${INSTANCES} completed, 0 failed`);

      const byKey = expectOneRequestPerKey(emu);
      expect(byKey.size).toBe(INSTANCES);
      expect(emuRequests(emu)).toHaveLength(INSTANCES);
      expectCompletedRun(runDir, emu, INSTANCES);
      // The cost report equals the emulator's ledger.
      expect(resumed.stdout).toContain(`net US$${(INSTANCES * PRICE).toFixed(2)};`);
      expect(spentUsd(emu)).toBeCloseTo(INSTANCES * PRICE, 6);
      expectNoSecret(runDir, output);
    } finally {
      await fleet.stop();
      await emu.close();
    }
  });
});

describe.concurrent.each(BACKENDS)('crash and resume (marketing images, keyless), %s backend', (backend) => {
  it.each(['after_intent_sync', 'after_post'])(
    '%s: the instance is unknown and resent only with --resubmit-unknown (on the fleet, unless its job in Redis knows its submission)',
    { timeout: 120_000 },
    async (point) => {
      const emu = await startEmulator({ port: 0, timeScale: 0.01, seed: 7, log: () => {} });
      const fleet = await backendFor(backend, emu.url, redis.url);
      try {
        const dir = tempDir();
        const out = tempDir();
        const count = 6;
        const manifest = marketingManifest(dir, count);
        const common = ['--base-url', emu.url, '--concurrency', '2', '--rate', '1000', ...fleet.flags];
        const first = await runCli(['run', manifest, '--out', out, ...common], { env: { GENPIPE_CRASH_AT: `${point}:3` } });
        expect(first.signal).toBe('SIGKILL');
        // On the fleet the worker goes on: a job the coordinator enqueued before its kill is sent
        // after it. What was sent before the resume is counted once the worker has settled.
        await fleet.settle();
        const runDir = findRunDir(out, 'ads');

        // Instances with an intent but no answer: their fate is unknown.
        const intents = new Map<string, string>();
        const answered = new Set<string>();
        for (const r of journalOf(runDir).records) {
          if (r.type === 'intent') {
            expect(r.idempotencyKey).toBeNull();
            intents.set(r.instance, r.bodyHash);
          }
          if (r.type === 'submitted') answered.add(r.instance);
        }
        const unknown = [...intents.keys()].filter((id) => !answered.has(id));
        expect(unknown.length).toBeGreaterThanOrEqual(1);
        const sentFor = (id: string): number => emuRequests(emu).filter((r) => r.body_hash === intents.get(id)).length;
        // The journal's body hash is the hash of the bytes sent: answered instances are found by it.
        for (const id of answered) expect(sentFor(id)).toBe(1);
        const sentBefore = new Map(unknown.map((id) => [id, sentFor(id)]));
        if (point === 'after_post') expect([...sentBefore.values()].some((n) => n === 1)).toBe(true);

        // On the fleet, a job the dead coordinator enqueued stays in Redis, and its worker sent it: a
        // plain resume learns the submission from there (never unknown, never sent again). Unknown
        // stays an instance whose job was never enqueued, and, locally, every one.
        const learnt = backend === 'local' ? [] : unknown.filter((id) => sentBefore.get(id) === 1);
        const stillUnknown = unknown.filter((id) => !learnt.includes(id));
        if (point === 'after_post' && backend !== 'local') expect(learnt.length).toBeGreaterThanOrEqual(1);
        const resumed = await runCli(['resume', runDir, ...common]);
        expect(resumed.code, resumed.stderr).toBe(stillUnknown.length > 0 ? 1 : 0);
        if (stillUnknown.length > 0) expect(resumed.stdout).toContain(`${stillUnknown.length} unknown`);
        for (const id of stillUnknown) {
          expect(resumed.stderr).toContain(`${id}: unknown:`);
          expect(sentFor(id), `${id} was resent without --resubmit-unknown`).toBe(sentBefore.get(id));
        }
        for (const id of learnt) {
          expect(resumed.stderr).not.toContain(`${id}: unknown:`);
          expect(sentFor(id), `${id} was sent again`).toBe(1);
        }
        for (const id of answered) expect(sentFor(id)).toBe(1);

        const forced = await runCli(['resume', runDir, ...common, '--resubmit-unknown']);
        expect(forced.code, forced.stderr).toBe(0);
        expect(forced.stdout).toContain(`completed; ${count} completed, 0 failed`);
        // Locally an unknown instance is sent once more. On the fleet the job in Redis still knows a
        // submission its worker made, so that one is followed, not resent: every instance is sent once.
        for (const id of unknown) expect(sentFor(id)).toBe(backend === 'local' ? (sentBefore.get(id) ?? 0) + 1 : 1);
        for (const id of answered) expect(sentFor(id)).toBe(1);
        const rows = emuRequests(emu);
        expect(rows).toHaveLength(backend === 'local' ? count + [...sentBefore.values()].reduce((a, b) => a + b, 0) : count);
        // Every instance's output is on disk with its journaled hash.
        const journal = journalOf(runDir);
        const downloaded = journal.records.filter((r) => r.type === 'downloaded');
        expect(new Set(downloaded.map((r) => r.type === 'downloaded' && r.instance)).size).toBe(count);
        expect(expectCompletedRows(join(runDir, 'outputs.csv'))).toBe(count);
        expectNoSecret(runDir, first.stdout + first.stderr + resumed.stdout + resumed.stderr + forced.stdout + forced.stderr);
      } finally {
        await fleet.stop();
        await emu.close();
      }
    },
  );
});

/** outputs.csv: every row completed, its file's sha256 as recorded; returns the row count. */
function expectCompletedRows(path: string): number {
  const rows = parseCsv(readFileSync(path, 'utf8'), { columns: true }) as Record<string, string>[];
  for (const row of rows) {
    expect(row.status).toBe('completed');
    expect(sha256File(join(path, '..', row.file as string))).toBe(row.sha256);
  }
  return rows.length;
}
