// A 429 slows the route that was throttled, not the whole run, and the throttled request is
// retried no earlier than its Retry-After (route-limiter.ts). In-process against a real emulator
// on loopback; the client's dispatcher notes when each request left and when each 429's headers
// arrived. Counts and orderings only, no speed: the speed is measured in bench/throttle.bench.mjs.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { profileFromSpec, type FaultFile } from '../../src/emulator/faults.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { readJournal } from '../../src/run/journal/journal.js';
import type { JournalRecordOf } from '../../src/run/journal/journal-records.js';
import { runPlan } from '../../src/run/runner.js';
import type { RunSummary } from '../../src/run/events.js';
import { summaryLine } from '../../src/report/progress.js';
import { writeCostReport } from '../../src/report/write-report.js';
import { closeRun, isSubmit, MARKETING_SUBMIT, prepareRun, type Exchange, type InProcessRun, runOf } from './pin-helpers.js';
import { cleanTemps, marketingManifest, sheetsManifest, spentUsd, tempDir } from './runner-helpers.js';

afterAll(cleanTemps);

/** Retry-After is at least 1 s in every 429 here; 10 ms spare for timer and clock granularity. */
const RETRY_AFTER_MS = 1_000 - 10;

type Model = 'marketing-image' | 'character-sheet';

interface Throttled {
  emu: Emulator;
  run: InProcessRun;
  summary: RunSummary;
  posts: Exchange[];
  intents: JournalRecordOf<'intent'>[];
}

async function throttledRun(
  model: Model,
  o: { instances: number; concurrency: number; rate: number; faults?: FaultFile; oneAttempt?: boolean; force?: ReadonlySet<number> },
  check: (t: Throttled) => void | Promise<void>,
): Promise<void> {
  const emu = await startEmulator({
    port: 0,
    timeScale: 1,
    seed: 9,
    log: () => {},
    durations: { [model]: { queuedMs: [0, 50], runMs: [150, 400] } },
    ...(o.faults ? { faults: profileFromSpec(o.faults) } : {}),
  });
  let run: InProcessRun | undefined;
  try {
    const dir = tempDir();
    const manifest =
      model === 'marketing-image' ? marketingManifest(dir, o.instances) : sheetsManifest(dir, o.instances, { name: 'sheets' });
    run = await prepareRun(emu, manifest, o.oneAttempt ? (c) => ({ ...c, retry: { ...c.retry, maxAttempts: 1 } }) : undefined);
    let submits = 0;
    const force = o.force;
    if (force) run.agent.onDispatch = (e) => void (isSubmit(e) && force.has(++submits) && emu.forceFaults('submit', 'rate_429'));
    const summary = await runPlan({
      ...runOf(run),
      signal: new AbortController().signal,
      concurrency: o.concurrency,
      ratePerSecond: o.rate,
      poll: { floorMs: 10, baseMs: 20, capMs: 50 },
    });
    expect(summary.outcome).toBe('completed');
    expect(summary.counts.completed).toBe(o.instances);
    // A 429 is never charged and never creates anything: one request an instance, whatever was
    // refused, and the report's money is the emulator ledger's.
    expect(emu.requests.byId.size).toBe(o.instances);
    // (The marketing manifest has no price: its report says unpriced instead.)
    const report = await writeCostReport(run.runDir, { throttledMs: summary.throttledMs });
    if (model === 'character-sheet') {
      expect(report.total.netUsd).toBeCloseTo(spentUsd(emu), 6);
      expect(spentUsd(emu)).toBeCloseTo(o.instances * 0.05, 6);
    } else expect(report.total.unpricedInstances).toBe(o.instances);
    const intents = (await readJournal(join(run.runDir, 'journal.jsonl'))).records.filter(
      (r): r is JournalRecordOf<'intent'> => r.type === 'intent',
    );
    await check({ emu, run, summary, posts: run.agent.exchanges.filter(isSubmit), intents });
  } finally {
    await closeRun(run);
    await emu.close();
  }
}

/** The instance a submit is for: its Idempotency-Key's intent (sheets), or its prompt (ads). */
function instanceOf(post: Exchange, intents: readonly JournalRecordOf<'intent'>[]): string {
  if (post.path === MARKETING_SUBMIT) return `ads[n=${/Banner number (\d+) /.exec(JSON.parse(post.body ?? '{}').prompt)?.[1]}]`;
  return intents.find((i) => i.idempotencyKey === post.headers['idempotency-key'])?.instance ?? '?';
}

/** Each 429'd submit's retry (the next submit of its instance) left no earlier than its Retry-After. */
function retriesWaited(posts: readonly Exchange[], intents: readonly JournalRecordOf<'intent'>[]): string[] {
  const problems: string[] = [];
  for (const answer of posts.filter((p) => p.status === 429)) {
    const instance = instanceOf(answer, intents);
    const retry = posts.find((p) => p.seq > answer.seq && instanceOf(p, intents) === instance);
    if (retry === undefined) problems.push(`${instance} was never sent again after its 429`);
    else if (retry.dispatchedAt - (answer.headersAt as number) < RETRY_AFTER_MS)
      problems.push(`${instance} was resent ${retry.dispatchedAt - (answer.headersAt as number)} ms after its 429`);
  }
  return problems;
}

/** Submits of other instances that left while a 429'd instance waited out its Retry-After. */
function othersDuringWaits(posts: readonly Exchange[], intents: readonly JournalRecordOf<'intent'>[]): number {
  let others = 0;
  for (const answer of posts.filter((p) => p.status === 429)) {
    const t = answer.headersAt as number;
    const instance = instanceOf(answer, intents);
    others += posts.filter((p) => p.dispatchedAt > t + 100 && p.dispatchedAt < t + 900 && instanceOf(p, intents) !== instance).length;
  }
  return others;
}

describe('a 429 slows its route, not the run', () => {
  const force = new Set([18, 30]);
  const forced = { instances: 40, concurrency: 16, rate: 1_000, force };
  for (const [title, model, oneAttempt] of [
    ['keyless marketing images (the runner retries)', 'marketing-image', false],
    ['keyed character sheets, one attempt per call (the runner retries)', 'character-sheet', true],
    ['keyed character sheets, the default attempts (the transport retries)', 'character-sheet', false],
  ] as const) {
    it(`${title}: the throttled instance waits its Retry-After, the others go on`, { timeout: 60_000 }, async () => {
      await throttledRun(model, { ...forced, oneAttempt }, async ({ emu, run, summary, posts, intents }) => {
        expect(emu.faults.injected['submit.rate_429']).toBe(force.size);
        expect(posts.filter((p) => p.status === 429)).toHaveLength(force.size);
        expect(posts).toHaveLength(40 + force.size);
        expect(retriesWaited(posts, intents)).toEqual([]);
        // Not paused: other instances submitted while the throttled one waited (the whole run paused
        // would send none; the first 429 comes with 22 instances not yet sent).
        expect(othersDuringWaits(posts, intents)).toBeGreaterThan(0);
        // The wait is said: at least one Retry-After, and never more than the run took.
        expect(summary.throttledMs).toBeGreaterThanOrEqual(RETRY_AFTER_MS);
        expect(summary.throttledMs).toBeLessThanOrEqual(summary.durationMs);
        const seconds = ((summary.throttledMs ?? 0) / 1000).toFixed(1);
        expect(summaryLine(summary)).toContain(`(${seconds} s waited on throttling)`);
        await writeCostReport(run.runDir, { throttledMs: summary.throttledMs });
        expect(JSON.parse(readFileSync(join(run.runDir, 'report.json'), 'utf8')).throttledMs).toBe(Math.round(summary.throttledMs ?? 0));
        expect(readFileSync(join(run.runDir, 'report.md'), 'utf8')).toContain(`Waited ${seconds} s on throttling in all`);
      });
    });
  }

  it(
    'sparse random 429s (2% of submits, Retry-After: 1): every instance completes, no retry before its Retry-After',
    { timeout: 60_000 },
    async () => {
      const faults: FaultFile = { submit: { rate_429: 0.02, retry_after_s: 1 } };
      await throttledRun('character-sheet', { instances: 150, concurrency: 16, rate: 20, faults }, ({ emu, posts, intents, summary }) => {
        const refused = emu.faults.injected['submit.rate_429'] ?? 0;
        expect(refused, 'the seed draws some 429s').toBeGreaterThan(0);
        expect(posts.filter((p) => p.status === 429)).toHaveLength(refused);
        expect(retriesWaited(posts, intents)).toEqual([]);
        expect(othersDuringWaits(posts, intents)).toBeGreaterThan(0);
        expect(summary.throttledMs).toBeGreaterThan(0);
      });
    },
  );

  it('a true rate limit (10 submits a second): the run backs off to it, with few 429s per 100 submits', { timeout: 60_000 }, async () => {
    const faults: FaultFile = { submit: { rate_limit_per_s: 10 } };
    await throttledRun('character-sheet', { instances: 60, concurrency: 20, rate: 20, faults }, ({ emu, posts, intents }) => {
      const refused = emu.faults.injected['submit.rate_limit'] ?? 0;
      expect(refused, 'the limit bound').toBeGreaterThan(0);
      expect(posts.filter((p) => p.status === 429)).toHaveLength(refused);
      // Loose: a client that kept sending at 20/s would get about one 429 for every submit let through.
      expect((refused * 100) / posts.length).toBeLessThan(35);
      expect(retriesWaited(posts, intents)).toEqual([]);
    });
  });
});
