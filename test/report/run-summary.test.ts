// summary.json, the small file a run keeps current so lists and first screens need not replay its
// journal, must say what the journal says (one truth): for runs ended each way (completed, stopped
// by the budget, failed, interrupted, interrupted then resumed), the listing read from the summary
// equals the listing replayed from the journal field by field, and so do the sums by step and by
// model that metrics reads. A summary the run could not finish (a process killed while it ran)
// is not trusted: the listing replays the journal.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator } from '../../src/emulator/index.js';
import { runListing, runListingFromJournal, type RunListing, type RunSums } from '../../src/report/run-list.js';
import { readRunSummary, RunSummaryWriter, type RunSummaryFile } from '../../src/run/files/run-summary.js';
import { RunFold } from '../../src/run/journal/run-fold.js';
import { runFile } from '../../src/run/files/run-layout.js';
import { cleanTemps, emuRequests, findRunDir, HF_KEY, sheetsManifest, tempDir } from '../run/runner-helpers.js';

afterAll(() => cleanTemps());

const io = (baseUrl: string, signal = new AbortController().signal): CliIO => ({
  out: () => {},
  write: async () => {},
  err: () => {},
  env: { GENPIPE_BASE_URL: baseUrl, HF_KEY },
  signal,
});

/** The listing and the sums, read from the summary and replayed from the journal. */
async function bothWays(runDir: string): Promise<{ fromSummary: [RunListing, RunSums]; fromJournal: [RunListing, RunSums] }> {
  const root = dirname(dirname(runDir));
  const [pipeline, runId] = [basename(dirname(runDir)), basename(runDir)];
  let sums: RunSums | undefined;
  const fromSummary = await runListing(root, pipeline, runId, (_, s) => (sums = s));
  let replayed: RunSums | undefined;
  const fromJournal = await runListingFromJournal(root, pipeline, runId, (_, s) => (replayed = s));
  if (!fromSummary || !fromJournal || !sums || !replayed) throw new Error(`no listing of ${runDir}`);
  return { fromSummary: [fromSummary, sums], fromJournal: [fromJournal, replayed] };
}

/** The sums as a list reads them: counts and money, by step, by model and in total. */
const plainSums = (s: RunSums): unknown => {
  const group = (g: RunSums['total']): unknown => ({
    name: g.name,
    counts: g.counts,
    estimatedUsd: g.estimatedUsd,
    refundedUsd: g.refundedUsd,
    netUsd: g.netUsd,
    unknownUsd: g.unknownUsd,
    unpricedInstances: g.unpricedInstances,
  });
  return { pipeline: s.pipeline, steps: s.steps.map(group), models: s.models.map(group), total: group({ ...s.total, name: 'total' }) };
};

async function expectSameBothWays(runDir: string): Promise<RunListing> {
  // The summary is the run's own (written at its end), and trusted: the listing below is read from it.
  const summary = await readRunSummary(runDir, () => Promise.resolve(false));
  expect(summary, `${runDir} has a trusted summary.json`).toBeDefined();
  const { fromSummary, fromJournal } = await bothWays(runDir);
  expect(fromSummary[0]).toEqual(fromJournal[0]);
  expect(plainSums(fromSummary[1])).toEqual(plainSums(fromJournal[1]));
  return fromSummary[0];
}

const readSummary = (runDir: string): RunSummaryFile => JSON.parse(readFileSync(runFile(runDir, 'summary'), 'utf8')) as RunSummaryFile;

describe('summary.json against the journal', () => {
  it("a budget set in the manifest is the listing's budget, from the summary and from the journal", { timeout: 60_000 }, async () => {
    const emu = await startEmulator({ port: 0, timeScale: 0.01, seed: 7, log: () => {} });
    try {
      const out = tempDir();
      const manifest = sheetsManifest(tempDir(), 2, { name: 'capped', extra: 'defaults:\n  budget_usd: 1.5' });
      expect(await main(['run', manifest, '--out', out, '--quiet'], io(emu.url))).toBe(0);
      const listing = await expectSameBothWays(findRunDir(out, 'capped'));
      expect(listing.budgetUsd).toBe(1.5);
      expect(readSummary(findRunDir(out, 'capped')).budgetUsd).toBe(1.5);
      // A flag given wins over the manifest's, and a resume given none keeps it.
      expect(await main(['resume', findRunDir(out, 'capped'), '--quiet', '--budget', '2'], io(emu.url))).toBe(0);
      expect((await expectSameBothWays(findRunDir(out, 'capped'))).budgetUsd).toBe(2);
      expect(await main(['resume', findRunDir(out, 'capped'), '--quiet'], io(emu.url))).toBe(0);
      expect((await expectSameBothWays(findRunDir(out, 'capped'))).budgetUsd).toBe(2);
    } finally {
      await emu.close();
    }
  });

  it('a completed run, a budget stop and a failed run list the same from either', { timeout: 120_000 }, async () => {
    const emu = await startEmulator({ port: 0, timeScale: 0.01, seed: 7, log: () => {} });
    const failing = await startEmulator({ port: 0, timeScale: 0.01, seed: 11, failureRate: 0.5, log: () => {} });
    try {
      const out = tempDir();
      const common = ['--out', out, '--quiet', '--concurrency', '2'];
      expect(await main(['run', sheetsManifest(tempDir(), 4, { name: 'done' }), ...common], io(emu.url))).toBe(0);
      expect(await main(['run', sheetsManifest(tempDir(), 8, { name: 'budget' }), ...common, '--budget', '0.2'], io(emu.url))).toBe(3);
      expect(await main(['run', sheetsManifest(tempDir(), 8, { name: 'failing' }), ...common], io(failing.url))).toBe(1);

      const done = await expectSameBothWays(findRunDir(out, 'done'));
      expect(done).toMatchObject({ status: 'completed', completed: 4, instances: 4, estimatedUsd: 0.2, netUsd: 0.2, budgetUsd: null });
      expect(done.startedAt).toBeGreaterThan(0);
      expect(done.finishedAt).toBeGreaterThanOrEqual(done.startedAt ?? Infinity);

      const budget = await expectSameBothWays(findRunDir(out, 'budget'));
      expect(budget).toMatchObject({ status: 'budget', instances: 8, budgetUsd: 0.2 });
      expect(budget.completed).toBeLessThan(8);

      // A summary that cannot be written (a directory in its place) neither stops nor fails the
      // run: the resume ends as before, and the listing replays the journal.
      const doneDir = findRunDir(out, 'done');
      rmSync(runFile(doneDir, 'summary'));
      mkdirSync(runFile(doneDir, 'summary'));
      expect(await main(['resume', doneDir, '--quiet'], io(emu.url))).toBe(0);
      expect(await readRunSummary(doneDir, () => Promise.resolve(false))).toBeUndefined();
      const { fromSummary, fromJournal } = await bothWays(doneDir);
      expect(fromSummary[0]).toEqual(fromJournal[0]);
      expect(fromSummary[0]).toMatchObject({ status: 'completed', completed: 4 });

      const failed = await expectSameBothWays(findRunDir(out, 'failing'));
      expect(failed.status).toBe('failed');
      expect(failed.failed).toBeGreaterThan(0);
      // Refunds are in the summary's money, in the one vocabulary.
      const money = readSummary(findRunDir(out, 'failing')).money;
      expect(money.refundedUsd).toBeGreaterThan(0);
      expect(money.committedUsd).toBe(money.netUsd + money.unknownUsd);
    } finally {
      await emu.close();
      await failing.close();
    }
  });

  it('an interrupted run, and the same run resumed, list the same from either', { timeout: 120_000 }, async () => {
    // Slow sheets (a second or so each), so the interrupt comes while some are in flight.
    const emu = await startEmulator({ port: 0, timeScale: 0.1, seed: 5, log: () => {} });
    try {
      const out = tempDir();
      const abort = new AbortController();
      const run = main(
        ['run', sheetsManifest(tempDir(), 6, { name: 'cut' }), '--out', out, '--quiet', '--concurrency', '2'],
        io(emu.url, abort.signal),
      );
      // Bounded: the first submit comes within 20 s.
      for (let i = 0; i < 200 && emuRequests(emu).length === 0; i++) await new Promise((r) => setTimeout(r, 100));
      abort.abort();
      expect(await run).not.toBe(0);
      const runDir = findRunDir(out, 'cut');
      const cut = await expectSameBothWays(runDir);
      expect(cut.status).toBe('interrupted');
      expect(cut.completed).toBeLessThan(6);

      expect(await main(['resume', runDir, '--quiet'], io(emu.url))).toBe(0);
      const resumed = await expectSameBothWays(runDir);
      expect(resumed).toMatchObject({ status: 'completed', completed: 6 });
      // The first start's time is kept across the resume.
      expect(resumed.startedAt).toBe(cut.startedAt);
      expect(readSummary(runDir).journalBytes).toBe(readFileSync(runFile(runDir, 'journal')).length);

      // A process killed while it ran leaves a summary that says `running`, with no lock held for
      // it: not trusted, the journal is replayed.
      writeFileSync(runFile(runDir, 'summary'), JSON.stringify({ ...readSummary(runDir), status: 'running', counts: {} }));
      expect(await readRunSummary(runDir, () => Promise.resolve(false))).toBeUndefined();
      const { fromSummary, fromJournal } = await bothWays(runDir);
      expect(fromSummary[0]).toEqual(fromJournal[0]);
      // An ended summary whose journal grew since (a start by an older genpipe) is not trusted either.
      writeFileSync(runFile(runDir, 'summary'), JSON.stringify({ ...readSummary(runDir), status: 'completed', journalBytes: 1 }));
      expect(await readRunSummary(runDir, () => Promise.resolve(false))).toBeUndefined();
    } finally {
      await emu.close();
    }
  });
});

describe('the summary writer', () => {
  const started = { type: 'run_started', runId: 'r', pipeline: 'p', planHash: 'h', at: 1_000 } as const;
  const intent = (i: number) =>
    ({ type: 'intent', instance: `s[seed=${i}]`, model: 'character-sheet', idempotencyKey: `k${i}`, bodyHash: 'b' }) as const;

  it('writes at most once a second while records come, and once more at the end', { timeout: 20_000 }, async () => {
    const writes: RunSummaryFile[] = [];
    const dir = tempDir();
    writeFileSync(runFile(dir, 'journal'), 'x'.repeat(42));
    // The run's fold, which the run feeds each record before it tells the writer.
    const fold = new RunFold([{ id: 's', count: 500, priceUsd: 0.05, model: 'character-sheet' }]);
    const writer = new RunSummaryWriter(dir, { pipeline: 'p', runId: 'r' }, fold, {
      write: async (_path, text) => {
        writes.push(JSON.parse(text) as RunSummaryFile);
      },
    });
    writer.journaled(started);
    const until = Date.now() + 1_500;
    // Bounded: 500 records over 1.5 s.
    for (let i = 0; i < 500 && Date.now() < until; i++) {
      fold.apply(intent(i));
      writer.journaled(intent(i));
      await new Promise((r) => setTimeout(r, 3));
    }
    expect(writes.length).toBeGreaterThanOrEqual(1);
    expect(writes.length).toBeLessThanOrEqual(3);
    expect(writes.every((w) => w.status === 'running' && w.journalBytes === null)).toBe(true);
    writer.journaled({ type: 'run_finished', outcome: 'completed', at: 2_000 });
    await writer.close();
    const last = writes.at(-1);
    expect(last).toMatchObject({ status: 'completed', startedAt: 1_000, finishedAt: 2_000, journalBytes: 42, instances: 500 });
    expect(last?.counts.not_started).toBeLessThan(500);
    expect(last?.models.map((m) => m.name)).toEqual(['character-sheet']);
  });

  it('lets a failed write go: the records are still taken and the end still resolves', async () => {
    let tries = 0;
    const writer = new RunSummaryWriter(tempDir(), { pipeline: 'p', runId: 'r' }, new RunFold(), {
      everyMs: 0,
      write: () => {
        tries++;
        return Promise.reject(new Error('disk full'));
      },
    });
    writer.journaled(started);
    await new Promise((r) => setTimeout(r, 20));
    expect(() => writer.journaled(intent(1))).not.toThrow();
    await expect(writer.close()).resolves.toBeUndefined();
    expect(tries).toBeGreaterThanOrEqual(2);
  });
});
