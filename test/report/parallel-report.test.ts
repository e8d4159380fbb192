// A big run's report is written by two threads, to halve its time: the journal's halves read by
// two, the instance lines before the middle id written by this thread and those after by a worker
// (src/report/write-report.ts, report-worker.ts). The files must be byte for byte those one thread
// writes. The sources' tests name the built worker; a threshold of 0 bytes makes every journal big.
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { writeCostReport } from '../../src/report/write-report.js';
import { buildCostReport, type CostReport } from '../../src/report/cost-report.js';
import { reportCsv, reportJson, reportMarkdown } from '../../src/report/render.js';
import { Journal } from '../../src/run/journal/journal.js';
import type { JournalRecord } from '../../src/run/journal/journal-records.js';
import { cleanTemps, tempDir } from '../run/runner-helpers.js';

afterAll(cleanTemps);

const worker = new URL('../../dist/report/report-worker.js', import.meta.url);
const HASH = 'b'.repeat(64);
const FILES = ['report.json', 'report.csv', 'report.md'];

const STEPS = [
  // With a storage sink: the report counts its uploaded and pending files.
  {
    id: 'sheets',
    model: 'character-sheet',
    price_usd: 0.05,
    sink: { uri: 's3://media/drops', public_url: 'https://cdn.example.com/drops' },
  },
  { id: 'ads', model: 'marketing-image', price_usd: null },
  { id: 'chat', model: 'agent', price_usd: 0.002 },
];

/** One instance's records: an outcome, sometimes a reported cost, a re-roll or a retry. */
const life = fc.record({
  step: fc.nat(3),
  seed: fc.nat(5000),
  ending: fc.constantFrom('completed', 'failed', 'nsfw', 'canceled', 'unknown', 'in_flight', 'rerolled', 'retried'),
  cost: fc.option(
    fc.integer({ min: 0, max: 999_999 }).map((n) => n / 1e6),
    { nil: undefined },
  ),
});

type Life = typeof life extends fc.Arbitrary<infer T> ? T : never;

function recordsOf(lives: readonly Life[], steps: readonly { id: string; model: string }[] = STEPS): JournalRecord[] {
  const out: JournalRecord[] = [];
  const seen = new Set<string>();
  for (const [n, l] of lives.entries()) {
    // A fourth step the plan does not name: counted under its own name.
    const step = steps[l.step]?.id ?? 'extra';
    const id = `${step}[seed=${l.seed}]`;
    if (seen.has(id)) continue;
    seen.add(id);
    const model = steps[l.step]?.model ?? 'soul';
    const intent: JournalRecord = { type: 'intent', instance: id, model, idempotencyKey: `k${n}`, bodyHash: HASH };
    const submitted: JournalRecord = { type: 'submitted', instance: id, handle: { kind: 'request', requestId: `r-${n}` } };
    const status = (s: 'completed' | 'failed' | 'nsfw' | 'canceled'): JournalRecord => ({
      type: 'status',
      instance: id,
      status: s,
      outputs: [],
      ...(l.cost === undefined ? {} : { actualCostUsd: l.cost }),
    });
    switch (l.ending) {
      case 'unknown':
        out.push(intent);
        break;
      case 'in_flight':
        out.push(intent, submitted);
        break;
      case 'rerolled':
        out.push(
          intent,
          submitted,
          status('nsfw'),
          { type: 'reroll', instance: id, attempt: 1, seed: 7 },
          intent,
          submitted,
          status('completed'),
        );
        break;
      case 'retried':
        out.push(
          intent,
          submitted,
          status('failed'),
          { type: 'retry', instance: id, attempt: 1, previous: 'failed' },
          intent,
          submitted,
          status('completed'),
        );
        break;
      default:
        out.push(intent, submitted, status(l.ending as 'completed' | 'failed' | 'nsfw' | 'canceled'));
    }
    if (l.ending === 'completed') {
      // Its file, then (by its seed) uploaded, uploaded with other bytes (the file was made again), or not yet.
      const sha256 = (l.seed % 16).toString(16).repeat(64);
      out.push({ type: 'downloaded', instance: id, output: 0, path: `outputs/${step}/${l.seed}.png`, sha256, size: 100 + l.seed });
      if (l.seed % 3 !== 0)
        out.push({
          type: 'sink_uploaded',
          instance: id,
          output: 0,
          bucket: 'media',
          key: `drops/${step}/${l.seed}.png`,
          size: 100 + l.seed,
          // Other bytes: a hash no download has (theirs are one digit 64 times; 'e' x 64 was seed 14's, mod 16).
          sha256: l.seed % 3 === 1 ? sha256 : `${'e'.repeat(63)}f`,
          etag: 'x',
        });
    }
  }
  return out;
}

/** A run directory holding `records`, and a copy of it: one for each way of writing the report. */
async function runDirs(records: JournalRecord[], steps: readonly object[] = STEPS): Promise<[string, string]> {
  const base = tempDir('genpipe-parallel-report-');
  const one = join(base, 'one');
  mkdirSync(one);
  const plan = {
    pipeline: 'p',
    runId: '20261101T000000Z-0000',
    manifest: join(base, 'p.yaml'),
    planHash: 'x',
    createdAt: '2026-11-01T00:00:00.000Z',
    steps: steps.map((s) => ({ ...s, count: 6000, needs: [], for_each: null })),
    estimate: { known_usd: 0, unknown_instances: 0 },
  };
  writeFileSync(join(one, 'plan.json'), JSON.stringify(plan));
  const journal = await Journal.open(join(one, 'journal.jsonl'));
  // Interleaved as concurrent work writes them: every record of a step's instances, then the next step's.
  for (const r of records) await journal.append(r);
  await journal.close();
  const two = join(base, 'two');
  mkdirSync(two);
  for (const f of ['plan.json', 'journal.jsonl']) copyFileSync(join(one, f), join(two, f));
  return [one, two];
}

/**
 * The report's files are those of the report held in memory (buildCostReport), whose every line
 * comes from its instance's replayed state: a plain outcome's line copied from the first like it
 * (CostTally.plainLine) is the same.
 */
function expectReplayed(runDir: string, report: CostReport): void {
  // The written report says the run's status as its journal's run records give it (here: none, not started).
  const replayed: CostReport = { ...report, status: 'not started' };
  expect(readFileSync(join(runDir, 'report.json'), 'utf8')).toBe(reportJson(replayed));
  expect(readFileSync(join(runDir, 'report.csv'), 'utf8')).toBe(reportCsv(replayed));
  expect(readFileSync(join(runDir, 'report.md'), 'utf8')).toBe(reportMarkdown(replayed));
}

describe('a report written by two threads', () => {
  // 25 runs of two reports each, one through a worker thread: 10.7 s alone on a slow half hour, 20 s
  // beside another test file, and past 60 s in a whole suite beside two CPU-bound processes
  // (2026-11-27, the third loaded CI run): a bound for a hang, not a speed, so 180 s.
  it('is byte for byte the report one thread writes: lines, sums by step and model, totals (property)', { timeout: 180_000 }, async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(life, { minLength: 1, maxLength: 120 }), async (lives) => {
        const [one, two] = await runDirs(recordsOf(lives));
        const single = await writeCostReport(one, { threads: { parallelMinBytes: Number.MAX_SAFE_INTEGER } });
        const double = await writeCostReport(two, { threads: { worker, parallelMinBytes: 0, evenSplit: true } });
        expect(double).toEqual(single);
        // The sink's counts, as sink-totals.ts makes them from the same instances in memory.
        const sheets = lives.filter((l, i) => l.step === 0 && lives.findIndex((o) => o.step === 0 && o.seed === l.seed) === i);
        const done = sheets.filter((l) => l.ending === 'completed');
        expect(single.sink).toMatchObject({
          uploadedFiles: done.filter((l) => l.seed % 3 === 1).length,
          pendingFiles: done.filter((l) => l.seed % 3 !== 1).length,
          pendingBytes: done.filter((l) => l.seed % 3 !== 1).reduce((n, l) => n + 100 + l.seed, 0),
          locations: [STEPS[0]?.sink],
        });
        for (const f of FILES) expect(readFileSync(join(two, f), 'utf8')).toBe(readFileSync(join(one, f), 'utf8'));
        expectReplayed(one, await buildCostReport(one));
        // Nothing left over: no part or temporary file.
        expect(readdirSync(two).sort()).toEqual(['journal.jsonl', 'plan.json', ...FILES].sort());
      }),
      { numRuns: 25 },
    );
  });

  it('an instance whose outcome is plain has the line its replayed state gives: copied from the first like it, with its own id and request id (property)', async () => {
    // No storage sink: a completed instance's download is no fact of its outcome, so every
    // instance that ends without a reported cost is plain (instance-lines.ts PlainOutcome). Two
    // steps of one model at two prices: a line is copied only from one of its own step.
    const steps = [
      { id: 'sheets', model: 'character-sheet', price_usd: 0.05 },
      { id: 'portraits', model: 'character-sheet', price_usd: 0.08 },
      { id: 'chat', model: 'agent', price_usd: 0.002 },
    ];
    const plainLife = fc.record({
      step: fc.nat(3),
      seed: fc.nat(5000),
      ending: fc.constantFrom('completed', 'failed', 'nsfw', 'canceled'),
      cost: fc.constant(undefined),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(plainLife, { minLength: 2, maxLength: 200, size: 'medium' }), async (lives) => {
        const [one] = await runDirs(recordsOf(lives, steps), steps);
        await writeCostReport(one, { threads: { parallelMinBytes: Number.MAX_SAFE_INTEGER } });
        expectReplayed(one, await buildCostReport(one));
      }),
      { numRuns: 15 },
    );
  });

  it("two processes writing one run's report at once (a displaced holder and the one that took over) both finish, each with its own temporary files", async () => {
    const lives = Array.from({ length: 300 }, (_, n) => ({ step: n % 3, seed: n, ending: 'completed' as const, cost: undefined }));
    const [one] = await runDirs(recordsOf(lives));
    // Before, both wrote report.json.tmp: the second rename found it gone (ENOENT, exit 70).
    const [a, b] = await Promise.all(
      Array.from({ length: 2 }, () => writeCostReport(one, { threads: { parallelMinBytes: Number.MAX_SAFE_INTEGER } })),
    );
    expect(b).toEqual(a);
    expect(readdirSync(one).sort()).toEqual(['journal.jsonl', 'plan.json', ...FILES].sort());
  });

  it('hands the lines from the middle id on to the worker: a worker that fails them fails the report, and no report file is left', async () => {
    const lives = Array.from({ length: 40 }, (_, n) => ({ step: n % 3, seed: n, ending: 'completed' as const, cost: undefined }));
    const [, two] = await runDirs(recordsOf(lives));
    // The real worker for the journal's second half, a failing one for the report's last lines.
    const dir = tempDir('genpipe-tail-worker-');
    const failing = join(dir, 'tail-fails.mjs');
    writeFileSync(
      failing,
      `import { parentPort } from 'node:worker_threads';\nparentPort.on('message', (task) => { if (task.kind === 'tail') throw new Error('disk full'); });\nawait import(${JSON.stringify(worker.href)});\n`,
    );
    await expect(
      writeCostReport(two, { threads: { worker: new URL(`file://${failing}`), parallelMinBytes: 0, evenSplit: true } }),
    ).rejects.toThrow("Writing the report's last instances in another thread failed: disk full");
    expect(readdirSync(two).sort()).toEqual(['journal.jsonl', 'plan.json']);
    expect(existsSync(join(two, 'report.json'))).toBe(false);
  });
});
