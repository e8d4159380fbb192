// Progress is a fold of the journal's records, the very fold the report runs: at a run's end its
// counts and money are the report's. Once over a hand-written journal (every way an instance's
// records can go), and once over a live run against the emulator on 127.0.0.1 that has
// completed, refunded and never-started instances (a step whose model the account may not use).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GenerationClient } from '../../src/api/client.js';
import { resolveConfig } from '../../src/api/config.js';
import { accountsFromFile } from '../../src/emulator/accounts.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { loadManifestFile } from '../../src/manifest/load.js';
import { buildPlan } from '../../src/plan/plan.js';
import { buildCostReport, type CostReport, type GroupLine } from '../../src/report/cost-report.js';
import { LineProgress } from '../../src/report/progress.js';
import { createRunDir, planHash } from '../../src/run/files/run-dir.js';
import { Journal } from '../../src/run/journal/journal.js';
import type { JournalRecord } from '../../src/run/journal/journal-records.js';
import { RunFold, statusOf, type PlannedStep } from '../../src/run/journal/run-fold.js';
import { applyRecord, emptyRunState, instanceStatus } from '../../src/run/journal/run-state.js';
import { runPlan } from '../../src/run/runner.js';

const dir = mkdtempSync(join(tmpdir(), 'genpipe-progress-fold-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const HASH = 'a'.repeat(64);

/** The money of a group of the report, in the fold's words. */
const moneyOfGroup = (g: GroupLine) => ({
  estimatedUsd: g.estimatedUsd,
  refundedUsd: g.refundedUsd,
  netUsd: g.netUsd,
  unknownUsd: g.unknownUsd,
  unpricedInstances: g.unpricedInstances,
  committedUsd: Math.round((g.netUsd + g.unknownUsd) * 1e6) / 1e6,
});

/** The fold says what the report says: counts and money, by step and in total, and each instance's status. */
function expectSameAsReport(fold: RunFold, report: CostReport): void {
  expect(fold.counts()).toEqual(report.total.counts);
  expect(fold.money()).toEqual(moneyOfGroup(report.total));
  for (const step of report.steps) {
    expect(fold.counts(step.name), step.name).toEqual(step.counts);
    expect(fold.money(step.name), step.name).toEqual(moneyOfGroup(step));
  }
  for (const line of report.instances) expect(fold.status(line.instance), line.instance).toBe(line.status);
}

describe('RunFold over a journal', () => {
  const steps: PlannedStep[] = [
    { id: 'a', count: 12, priceUsd: 0.05 },
    { id: 'b', count: 1, priceUsd: null },
    { id: 'c', count: 3, priceUsd: 0.1 },
  ];
  const intent = (instance: string, priceUsd?: number | null, idempotencyKey: string | null = `k-${instance}`): JournalRecord => ({
    type: 'intent',
    instance,
    model: instance.startsWith('c') ? 'agent' : 'character-sheet',
    idempotencyKey,
    bodyHash: HASH,
    ...(priceUsd === undefined ? {} : { priceUsd }),
  });
  const submitted = (instance: string): JournalRecord => ({
    type: 'submitted',
    instance,
    handle: { kind: 'request', requestId: `req-${instance}-${Math.random()}` },
  });
  const status = (instance: string, s: 'completed' | 'failed' | 'nsfw', extra: object = {}): JournalRecord => ({
    type: 'status',
    instance,
    status: s,
    outputs: [],
    ...extra,
  });
  const sent = (instance: string, priceUsd: number | null | undefined = 0.05): JournalRecord[] => [
    intent(instance, priceUsd),
    submitted(instance),
  ];
  const records: JournalRecord[] = [
    { type: 'run_started', runId: 'r1', pipeline: 'p', planHash: HASH },
    ...sent('a[n=1]'),
    status('a[n=1]', 'completed'),
    { type: 'downloaded', instance: 'a[n=1]', output: 0, path: 'outputs/a/1.png', size: 3, sha256: HASH },
    ...sent('a[n=2]'),
    status('a[n=2]', 'failed'),
    // nsfw, re-rolled, then completed: the nsfw attempt refunded, the second charged.
    ...sent('a[n=3]'),
    status('a[n=3]', 'nsfw'),
    { type: 'reroll', instance: 'a[n=3]', attempt: 1, seed: 9 },
    ...sent('a[n=3]'),
    status('a[n=3]', 'completed'),
    // A keyless intent never answered: unknown.
    intent('a[n=4]', 0.05, null),
    // Completed, and its files failed for good: completed (terminal states are final), charged.
    ...sent('a[n=5]'),
    status('a[n=5]', 'completed'),
    { type: 'failed', instance: 'a[n=5]', code: 'not_found', message: 'the file is gone' },
    // Failed here (its status could not be read), then its completed status came after all:
    // completed too, in the report and in outputs.csv alike.
    ...sent('a[n=11]'),
    { type: 'failed', instance: 'a[n=11]', code: 'network', message: 'no answer' },
    status('a[n=11]', 'completed'),
    // Refused before anything was made: as if never started.
    intent('a[n=6]'),
    { type: 'refused', instance: 'a[n=6]', code: 'model_access' },
    { type: 'reused', instance: 'a[n=7]', model: 'character-sheet', bodyHash: HASH, fromRunId: 'r0', outputs: [] },
    // The service forgot it: unknown.
    ...sent('a[n=8]'),
    { type: 'forgotten', instance: 'a[n=8]' },
    // Sent, then failed here (its status could not be read): failed, its price unknown.
    ...sent('a[n=9]'),
    { type: 'failed', instance: 'a[n=9]', code: 'network', message: 'no answer' },
    // Failed, retried, and in flight again.
    ...sent('a[n=10]'),
    status('a[n=10]', 'failed'),
    { type: 'retry', instance: 'a[n=10]', attempt: 1, previous: 'failed' },
    ...sent('a[n=10]'),
    // Unpriced.
    ...sent('b[n=1]', null),
    status('b[n=1]', 'completed'),
    // A journal written before prices were: the step's price; the service's own cost where it reports one.
    ...sent('c[n=1]', undefined),
    status('c[n=1]', 'completed', { actualCostUsd: 0.2 }),
    ...sent('c[n=2]', undefined),
    { type: 'run_finished', outcome: 'failed' },
  ];

  let report: CostReport;
  beforeAll(async () => {
    const runDir = join(dir, 'hand');
    mkdirSync(runDir, { recursive: true });
    writeFileSync(
      join(runDir, 'plan.json'),
      JSON.stringify({
        pipeline: 'p',
        runId: 'r1',
        manifest: 'p.yaml',
        planHash: HASH,
        createdAt: new Date(0).toISOString(),
        steps: steps.map((s) => ({ id: s.id, model: 'character-sheet', count: s.count, needs: [], for_each: null, price_usd: s.priceUsd })),
        estimate: { known_usd: 0, unknown_instances: 0 },
      }),
    );
    const journal = await Journal.open(join(runDir, 'journal.jsonl'));
    for (const record of records) await journal.append(record);
    await journal.close();
    report = await buildCostReport(runDir);
  });

  it('counts and sums as the report does, record by record', () => {
    const fold = new RunFold(steps);
    for (const record of records) fold.apply(record);
    expectSameAsReport(fold, report);
    // The cases the journal was written for, as the report reads them.
    expect(report.total.counts).toEqual({
      completed: 6,
      reused: 1,
      failed: 2,
      nsfw: 0,
      canceled: 0,
      unknown: 2,
      in_flight: 2,
      not_started: 3,
    });
    expect(fold.status('a[n=5]')).toBe('completed');
    expect(fold.status('a[n=11]')).toBe('completed');
    expect(fold.money().unpricedInstances).toBe(1);
  });

  it('goes on from a replayed state (a resume) to the same end, and its copy is its own', () => {
    const half = Math.floor(records.length / 2);
    const state = emptyRunState();
    for (const record of records.slice(0, half)) applyRecord(state, record);
    const seed = RunFold.of(state, steps);
    const fold = seed.copy();
    for (const record of records.slice(half)) fold.apply(record);
    expectSameAsReport(fold, report);
    // The seed did not move with its copy, nor the state it was made from.
    expect(seed.counts()).not.toEqual(fold.counts());
    const again = RunFold.of(state, steps);
    expect(again.counts()).toEqual(seed.counts());
    expect(again.money()).toEqual(seed.money());
  });

  it('keeps none of the records it folds, in its copies neither: what a large run holds per instance stays small', async () => {
    v8.setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const fold = new RunFold(steps);
    // Copies of the records, made in a function of their own so that nothing but the fold could keep them alive.
    const refs: WeakRef<JournalRecord>[] = [];
    const feed = (): void => {
      for (const record of records) {
        const copy = structuredClone(record);
        refs.push(new WeakRef(copy));
        fold.apply(copy);
      }
    };
    feed();
    // A resume's fold, made from a replayed state that is then let go.
    const resumed = (): RunFold => {
      const state = emptyRunState();
      for (const record of records) {
        const copy = structuredClone(record);
        refs.push(new WeakRef(copy));
        applyRecord(state, copy);
      }
      return RunFold.of(state, steps);
    };
    const copies = [fold.copy(), resumed()];
    // A WeakRef holds its target until the job that made it ends.
    await new Promise((resolve) => setImmediate(resolve));
    gc();
    expect(refs.filter((ref) => ref.deref() !== undefined).map((ref) => ref.deref()!.type)).toEqual([]);
    // What they keep still says what the report says.
    for (const kept of [fold, ...copies]) expectSameAsReport(kept, report);
  });

  it('the report, outputs.csv and the gallery read one status: a completed instance is completed, whatever the run recorded around it', () => {
    const state = emptyRunState();
    for (const record of records) applyRecord(state, record);
    for (const [id, entry] of state.instances) {
      const csv = instanceStatus(entry);
      expect(statusOf(entry), id).toBe(csv === 'pending' ? 'not_started' : csv);
    }
    expect(instanceStatus(state.instances.get('a[n=5]')!)).toBe('completed');
    expect(instanceStatus(state.instances.get('a[n=11]')!)).toBe('completed');
  });
});

describe('progress at the end of a live run', () => {
  const LIMITED = '55555555-5555-4555-8555-555555555555';
  const SECRET = 'limited-secret';
  let emulator: Emulator;
  let client: GenerationClient;

  beforeAll(async () => {
    const accounts = join(dir, 'accounts.yaml');
    // The account may not use marketing-image: that step's first submit is refused, the others never sent.
    writeFileSync(accounts, `accounts:\n  - key_id: ${LIMITED}\n    secret: ${SECRET}\n    models: [character-sheet]\n`);
    emulator = await startEmulator({ port: 0, timeScale: 0.001, log: () => {}, accounts: accountsFromFile(accounts) });
    client = new GenerationClient(resolveConfig({ flags: { baseUrl: emulator.url }, env: { HF_KEY: `${LIMITED}:${SECRET}` } }));
  });
  afterAll(async () => {
    await client.close();
    await emulator.close();
  });

  it('says the counts and money of the report: completed, refunded (failed, nsfw) and not started', { timeout: 60_000 }, async () => {
    const manifest = join(dir, 'fold.yaml');
    writeFileSync(
      manifest,
      `version: 1
name: fold
prices: { marketing-image: 0.01026 }
steps:
  sheets:
    model: character-sheet
    matrix:
      brief: ["fine", "fine too", "[emulator:fail] broken", "[emulator:nsfw] flagged", "fine again"]
    input: { tier: cats, seed: 7, brief: "{{ brief }}" }
  ads:
    model: marketing-image
    matrix: { n: [1, 2, 3] }
    input: { prompt: "Hero banner {{ n }}", resolution: 1k, quality: low }
`,
    );
    const plan = await buildPlan(loadManifestFile(manifest));
    const hash = planHash(plan);
    const { runId, dir: runDir } = await createRunDir(join(dir, 'runs'), plan, manifest, hash);
    const err: string[] = [];
    const progress = new LineProgress({ out: () => {}, err: (t) => err.push(t) }, { quiet: true });
    await runPlan({
      plan,
      client,
      runDir,
      runId,
      planHash: hash,
      signal: new AbortController().signal,
      poll: { floorMs: 10, baseMs: 10, capMs: 50 },
      onEvent: progress.listener,
    });
    progress.stop();
    const report = await buildCostReport(runDir);
    // What the run was made to have: 3 completed, 2 refunded, and the step without model access not started.
    expect(report.total.counts).toMatchObject({ completed: 3, failed: 1, nsfw: 1, not_started: 3 });
    expect(report.total.refundedUsd).toBe(0.1);
    expect(report.total.netUsd).toBe(0.15);
    expectSameAsReport(progress.fold, report);
    expect(progress.line()).toMatch(/^progress: 5\/8 done \(2 failed\), 0 in flight, committed US\$0\.15, ETA/);
  });
});
