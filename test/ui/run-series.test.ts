// Spend over time on a run's page comes from the journal's own record times: a hand-written
// journal gives the points it should, the last one equal to the report's committed, charged and net;
// a journal read in parts (a line still being written, two reads at once) gives what one read gives; and a
// large run keeps no more than its points' cap, from its first record to its last.
import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { committedUsd, summarizeCostReport } from '../../src/report/cost-report.js';
import { encodeJournalRecord, Journal } from '../../src/run/journal/journal.js';
import type { JournalRecord } from '../../src/run/journal/journal-records.js';
import { JournalSeries } from '../../src/ui/run-series.js';
import { RunFollower } from '../../src/ui/run-state.js';
import { uiRun } from '../../src/ui/run-watch.js';
import { runListing } from '../../src/report/run-list.js';
import { cleanTemps, tempDir } from '../run/runner-helpers.js';

afterAll(() => cleanTemps());

const HASH = 'c'.repeat(64);
const T0 = Date.UTC(2026, 11, 4, 12, 0, 0);
const at = (s: number): number => T0 + s * 1000;
const OPTIONS = {
  budgetUsd: 1,
  reuse: false,
  retryBudget: null,
  confirmOverUsd: null,
  retry: [],
  retryRound: 0,
  executor: 'local',
};

function runDir(count: number, dir = join(tempDir('genpipe-series-'), 'run')): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'plan.json'),
    JSON.stringify({
      pipeline: 'p',
      runId: 'r1',
      manifest: 'p.yaml',
      planHash: HASH,
      createdAt: new Date(0).toISOString(),
      steps: [{ id: 'a', model: 'character-sheet', count, needs: [], for_each: null, price_usd: 0.05 }],
      estimate: { known_usd: 0, unknown_instances: 0 },
    }),
  );
  return dir;
}

async function write(dir: string, records: JournalRecord[]): Promise<void> {
  const journal = await Journal.open(join(dir, 'journal.jsonl'));
  for (const record of records) await journal.append(record);
  await journal.close();
}

const started = (s: number): JournalRecord => ({
  type: 'run_started',
  at: at(s),
  runId: 'r1',
  pipeline: 'p',
  planHash: HASH,
  options: OPTIONS,
});
const intent = (id: string, s: number): JournalRecord => ({
  type: 'intent',
  at: at(s),
  instance: id,
  model: 'character-sheet',
  idempotencyKey: `k-${id}-${s}`,
  bodyHash: HASH,
  priceUsd: 0.05,
});
const submitted = (id: string, s: number): JournalRecord => ({
  type: 'submitted',
  at: at(s),
  instance: id,
  handle: { kind: 'request', requestId: `req-${id}-${s}` },
});
const status = (id: string, s: number, st: 'completed' | 'nsfw'): JournalRecord => ({
  type: 'status',
  at: at(s),
  instance: id,
  status: st,
  outputs: st === 'completed' ? [{ url: `https://cdn.example.test/${s}.png` }] : [],
});

/** One completed, one nsfw then retried (round 1) and left unknown (its intent, no answer), one never started. */
const RECORDS: JournalRecord[] = [
  started(0),
  intent('a[n=1]', 1),
  submitted('a[n=1]', 2),
  status('a[n=1]', 3, 'completed'),
  intent('a[n=2]', 4),
  submitted('a[n=2]', 5),
  status('a[n=2]', 6, 'nsfw'),
  { type: 'retry', at: at(7), instance: 'a[n=2]', attempt: 1, previous: 'nsfw', round: 1 },
  intent('a[n=2]', 8),
  { type: 'run_finished', at: at(9), outcome: 'failed' },
];

describe("a run page's spend over time", () => {
  it('of a journal over the inline size comes after the first screen: figures first, then the chart, and onLater is told', async () => {
    const root = tempDir('genpipe-follow-');
    const dir = runDir(3, join(root, 'p', 'r1'));
    await write(dir, RECORDS);
    const listing = await runListing(root, 'p', 'r1');
    expect(listing).toBeDefined();
    const run = uiRun(listing!, '0/p/r1', undefined);
    const follower = new RunFollower(dir, 0);
    let told: () => void = () => {};
    const later = new Promise<void>((resolve) => (told = resolve));
    const first = await follower.state(run, () => told());
    expect(first.seriesPending).toBe(true);
    expect(first.series.t).toEqual([]);
    expect(first.eta).toBeNull();
    // The figures are there at once, from the report's own sums.
    const report = await summarizeCostReport(dir);
    expect(first.tables.total.counts).toEqual(report.total.counts);
    await later;
    const second = await follower.state(run);
    expect(second.seriesPending).toBe(false);
    expect(second.series.t).toHaveLength(9);
    expect(second.retries).toMatchObject({ retried: 1, rounds: 1 });
    // Under the inline size, the first state has the chart: the same points.
    const inline = await new RunFollower(dir).state(run);
    expect(inline.seriesPending).toBe(false);
    expect(inline.series).toEqual(second.series);
  });

  it('is the fold of the records at their own times, ending at the report', async () => {
    const dir = runDir(3);
    await write(dir, RECORDS);
    const series = new JournalSeries(join(dir, 'journal.jsonl'), [{ id: 'a', count: 3, priceUsd: 0.05 }]);
    await series.update();
    const p = series.points;
    // The status of a[n=1] changes no money: no point at 3 s.
    expect(p.t).toEqual([0, 1, 2, 4, 5, 6, 7, 8, 9].map((s) => at(s) / 1000));
    expect(p.committed).toEqual([0, 0.05, 0.05, 0.1, 0.1, 0.05, 0.05, 0.1, 0.1]);
    expect(p.charged).toEqual([0, 0.05, 0.05, 0.1, 0.1, 0.1, 0.05, 0.1, 0.1]);
    expect(p.net).toEqual([0, 0, 0.05, 0.05, 0.1, 0.05, 0.05, 0.05, 0.05]);
    // While the unknown intent of a[n=2] stands, committed (net plus unknown) is above the net.
    const report = await summarizeCostReport(dir);
    expect(p.committed.at(-1)).toBe(committedUsd(report.total));
    expect(p.charged.at(-1)).toBe(report.total.estimatedUsd);
    expect(p.net.at(-1)).toBe(report.total.netUsd);
    expect(report.total.unknownUsd).toBe(0.05);
    expect(series.retries).toEqual({ retried: 1, resubmitted: 0, rounds: 1 });
    // a[n=1] has ended, of three; a[n=2]'s intent, unanswered, is being sent as progress counts it. The start sent its first at 1 s.
    expect(series.pace).toEqual({ ended: 1, before: 0, total: 3, startedAt: at(1) });
  });

  it('read in parts, a line still being written left for the next read, gives what one read gives', async () => {
    const dir = runDir(3);
    const journal = join(dir, 'journal.jsonl');
    await write(dir, RECORDS.slice(0, 4));
    const series = new JournalSeries(journal, [{ id: 'a', count: 3, priceUsd: 0.05 }]);
    await series.update();
    expect(series.points.t).toEqual([0, 1, 2].map((s) => at(s) / 1000));
    const rest = RECORDS.slice(4)
      .map((r) => encodeJournalRecord(r))
      .join('');
    const cut = rest.length - 20;
    appendFileSync(journal, rest.slice(0, cut));
    // Two pages asking at once: one read after the other, each record folded once.
    await Promise.all([series.update(), series.update()]);
    expect(series.retries).toEqual({ retried: 1, resubmitted: 0, rounds: 1 });
    // run_finished is not whole yet: not read.
    expect(series.points.t.at(-1)).toBe(at(8) / 1000);
    appendFileSync(journal, rest.slice(cut));
    await series.update();
    const whole = new JournalSeries(journal, [{ id: 'a', count: 3, priceUsd: 0.05 }]);
    await whole.update();
    expect(series.points).toEqual(whole.points);
    expect(series.retries).toEqual({ retried: 1, resubmitted: 0, rounds: 1 });
    expect(series.points.t.at(-1)).toBe(at(9) / 1000);
    // Let go once the run ended: the points stay, and nothing is read again while the journal stands.
    series.release();
    await series.update();
    expect(series.points).toEqual(whole.points);
    expect(series.pace).toBeUndefined();
  });

  it('a resume: its pace starts from what had ended before it', async () => {
    const dir = runDir(3);
    await write(dir, [...RECORDS, started(20), submitted('a[n=2]', 21), status('a[n=2]', 22, 'completed'), intent('a[n=3]', 23)]);
    const series = new JournalSeries(join(dir, 'journal.jsonl'), [{ id: 'a', count: 3, priceUsd: 0.05 }]);
    await series.update();
    // Before it, a[n=1] completed and a[n=2] unknown had ended; a[n=2] then completed, and a[n=3] is being sent.
    expect(series.pace).toEqual({ ended: 2, before: 2, total: 3, startedAt: at(23) });
  });

  it('a large run keeps at most its cap of points, from its first record to its last, and ends at the report', async () => {
    const n = 3_000;
    const dir = runDir(n);
    const records: JournalRecord[] = [started(0)];
    for (let i = 1; i <= n; i++)
      records.push(intent(`a[n=${i}]`, 3 * i), submitted(`a[n=${i}]`, 3 * i + 1), status(`a[n=${i}]`, 3 * i + 2, 'completed'));
    records.push({ type: 'run_finished', at: at(3 * n + 3), outcome: 'completed' });
    await write(dir, records);
    const series = new JournalSeries(join(dir, 'journal.jsonl'), [{ id: 'a', count: n, priceUsd: 0.05 }], { maxPoints: 100 });
    await series.update();
    const p = series.points;
    expect(p.t.length).toBeLessThanOrEqual(100);
    expect(p.t.length).toBeGreaterThan(40);
    expect(p.t[0]).toBe(at(0) / 1000);
    expect(p.t.at(-1)).toBe(at(3 * n + 3) / 1000);
    for (let i = 1; i < p.t.length; i++) expect(p.t[i]!).toBeGreaterThan(p.t[i - 1]!);
    const report = await summarizeCostReport(dir);
    expect(p.committed.at(-1)).toBe(committedUsd(report.total));
    expect(p.net.at(-1)).toBe(150);
    // Spread over the run, not bunched at its end: a point in each tenth of it.
    const span = p.t.at(-1)! - p.t[0]!;
    for (let tenth = 0; tenth < 10; tenth++)
      expect(p.t.some((t) => t - p.t[0]! >= (tenth * span) / 10 && t - p.t[0]! <= ((tenth + 1) * span) / 10)).toBe(true);
  });
});
