import { describe, expect, it, vi } from 'vitest';
import type { RunEvent, RunSummary } from '../../src/run/events.js';
import type { JournalRecord } from '../../src/run/journal/journal-records.js';
import { applyRecord, emptyRunState } from '../../src/run/journal/run-state.js';
import { RunFold, type PlannedStep } from '../../src/run/journal/run-fold.js';
import { etaText, formatDuration, JsonLogs, LineProgress, summaryLine } from '../../src/report/progress.js';

const summary: RunSummary = {
  runId: '20261122T000000Z-abcd',
  runDir: 'runs/p/20261122T000000Z-abcd',
  pipeline: 'p',
  outcome: 'failed',
  counts: { completed: 2, failed: 1, nsfw: 0, canceled: 0, unknown: 0, pending: 0, rerolled: 0, reused: 0, inFlight: 0 },
  estimatedUsd: 0.15,
  durationMs: 1234,
};

const stepA = (count: number): PlannedStep[] => [{ id: 'a', count, priceUsd: 0.05 }];

/** The records of one attempt's life, as the run journals them. */
const intent = (instance: string, idempotencyKey: string | null = 'k'): JournalRecord => ({
  type: 'intent',
  instance,
  model: 'character-sheet',
  idempotencyKey,
  bodyHash: 'h',
  priceUsd: 0.05,
});
const submitted = (instance: string): JournalRecord => ({
  type: 'submitted',
  instance,
  handle: { kind: 'request', requestId: `req-${instance}` },
});
const status = (instance: string, s: 'completed' | 'failed'): JournalRecord => ({ type: 'status', instance, status: s, outputs: [] });

/** The event a run tells once a record about an instance is in its journal. */
const journaled = (record: JournalRecord): RunEvent => ({
  type: 'instance_journaled',
  step: 'a',
  instance: (record as { instance: string }).instance,
  record,
});

const started = (instances: number, extra: Partial<Extract<RunEvent, { type: 'run_started' }>> = {}): RunEvent => ({
  type: 'run_started',
  runId: summary.runId,
  runDir: summary.runDir,
  pipeline: 'p',
  instances,
  resumed: false,
  budgetUsd: undefined,
  steps: stepA(instances),
  ...extra,
});

/** A resume's run_started: the journal folded as it stands. */
function resumed(instances: number, records: JournalRecord[], extra: Partial<Extract<RunEvent, { type: 'run_started' }>> = {}): RunEvent {
  const state = emptyRunState();
  for (const record of records) applyRecord(state, record);
  return started(instances, { resumed: true, already: RunFold.of(state, stepA(instances)), runId: 'r', runDir: 'd', ...extra });
}

/** A run of two instances, 10 s apart: started, two submits, then one completed and one failed. */
const groups: RunEvent[][] = [
  [started(3)],
  [
    journaled(intent('a[s=1]')),
    journaled(submitted('a[s=1]')),
    { type: 'instance_submitted', step: 'a', instance: 'a[s=1]', model: 'character-sheet', estimatedUsd: 0.05 },
  ],
  [
    journaled(intent('a[s=2]')),
    journaled(submitted('a[s=2]')),
    { type: 'instance_submitted', step: 'a', instance: 'a[s=2]', model: 'character-sheet', estimatedUsd: 0.05 },
  ],
  [
    journaled(status('a[s=1]', 'completed')),
    { type: 'instance_finished', step: 'a', instance: 'a[s=1]', status: 'completed', estimatedUsd: 0.05 },
  ],
  [
    journaled(status('a[s=2]', 'failed')),
    { type: 'instance_finished', step: 'a', instance: 'a[s=2]', status: 'failed', estimatedUsd: 0.05, error: 'boom' },
  ],
];
const events: RunEvent[] = groups.flat();

function sink(): { out: string[]; err: string[]; output: { out: (t: string) => void; err: (t: string) => void } } {
  const out: string[] = [];
  const err: string[] = [];
  return { out, err, output: { out: (t) => out.push(t), err: (t) => err.push(t) } };
}

describe('progress outside a TTY', () => {
  it("counts unknown submits apart from failures, as the report does, and a resume tells the journal's unknown ones once", () => {
    const s = sink();
    const progress = new LineProgress(s.output, { quiet: true });
    // One completed, one keyless intent never answered: unknown.
    progress.listener(resumed(4, [intent('a[s=1]'), submitted('a[s=1]'), status('a[s=1]', 'completed'), intent('a[s=2]', null)]));
    expect(progress.line()).toMatch(/^progress: 2\/4 done \(0 failed, 1 unknown\)/);
    // The resume tells the journal's unknown instance again: not a second one, and not a failure.
    progress.listener({ type: 'instance_unknown', step: 'a', instance: 'a[s=2]', message: 'm' });
    expect(progress.line()).toMatch(/^progress: 2\/4 done \(0 failed, 1 unknown\)/);
    // One being sent is in flight; once the run says its fate is unknown, it is counted so.
    progress.listener(journaled(intent('a[s=3]', null)));
    expect(progress.line()).toMatch(/^progress: 2\/4 done \(0 failed, 1 unknown\), 1 in flight/);
    progress.listener({ type: 'instance_unknown', step: 'a', instance: 'a[s=3]', message: 'm' });
    expect(progress.line()).toMatch(/^progress: 3\/4 done \(0 failed, 2 unknown\), 0 in flight/);
  });

  it('on a resume, starts from where the journal stands: counts, spend, and an ETA paced by this process alone', () => {
    const s = sink();
    let clock = 0;
    const progress = new LineProgress(s.output, { quiet: false, intervalMs: 60_000, now: () => clock });
    const records: JournalRecord[] = [];
    const life = (n: number, end?: 'completed' | 'failed'): void => {
      records.push(intent(`a[s=${n}]`), submitted(`a[s=${n}]`));
      if (end) records.push(status(`a[s=${n}]`, end));
    };
    for (let n = 1; n <= 240; n++) life(n, 'completed');
    for (let n = 241; n <= 243; n++) life(n, 'failed');
    for (let n = 244; n <= 245; n++) life(n);
    progress.listener(resumed(300, records));
    // 240 charged and 2 in flight at US$0.05; the 3 failed are refunded.
    expect(progress.line()).toBe('progress: 243/300 done (3 failed), 2 in flight, committed US$12.10, ETA --');
    clock = 1_000;
    progress.listener(journaled(intent('a[s=246]')));
    progress.listener(journaled(submitted('a[s=246]')));
    clock = 11_000;
    progress.listener(journaled(status('a[s=246]', 'completed')));
    // One finished in the 10 s since this process's first submit; 56 are left: 560 s at that pace.
    expect(progress.line()).toBe('progress: 244/300 done (3 failed), 2 in flight, committed US$12.15, ETA 9m20s');
  });

  it('shows the budget the run_started event tells, the one the run runs under', () => {
    const s = sink();
    const progress = new LineProgress(s.output, { quiet: false, intervalMs: 60_000, now: () => 0 });
    progress.listener(started(2, { resumed: true, budgetUsd: 5 }));
    progress.listener(journaled(intent('a[s=1]')));
    progress.listener(journaled(submitted('a[s=1]')));
    expect(progress.line()).toBe('progress: 0/2 done (0 failed), 1 in flight, committed US$0.05 of US$5.00 budget, ETA --');
  });

  it('a completed instance whose files failed (a sink upload pending, a download) is said, and counted done once, never also failed, as the report counts it', () => {
    const s = sink();
    const progress = new LineProgress(s.output, { quiet: false, intervalMs: 60_000, now: () => 0 });
    progress.listener(started(4));
    for (const n of [1, 2, 3])
      for (const record of [intent(`a[s=${n}]`), submitted(`a[s=${n}]`), status(`a[s=${n}]`, 'completed')])
        progress.listener(journaled(record));
    progress.listener({
      type: 'instance_failed',
      step: 'a',
      instance: 'a[s=1]',
      code: 'upload_pending',
      message: 'the store is down',
      completed: true,
    });
    progress.listener({
      type: 'instance_failed',
      step: 'a',
      instance: 'a[s=2]',
      code: 'network',
      message: 'the download failed',
      completed: true,
    });
    expect(progress.line()).toMatch(/^progress: 3\/4 done \(0 failed\), 0 in flight/);
    expect(s.err.slice(-2)).toEqual(['a[s=1]: the store is down', 'a[s=2]: the download failed']);
    // A download refused for good is journaled as a failure after the completed status: still done, and charged.
    progress.listener(journaled({ type: 'failed', instance: 'a[s=2]', code: 'not_found', message: 'gone' }));
    expect(progress.line()).toMatch(/^progress: 3\/4 done \(0 failed\), 0 in flight, committed US\$0.15/);
    // An instance refused before anything was made is failed, and costs nothing.
    progress.listener(journaled(intent('a[s=4]')));
    progress.listener(journaled({ type: 'refused', instance: 'a[s=4]', code: 'invalid_input' }));
    progress.listener(journaled({ type: 'failed', instance: 'a[s=4]', code: 'invalid_input', message: 'refused' }));
    expect(progress.line()).toMatch(/^progress: 4\/4 done \(1 failed\), 0 in flight, committed US\$0.15/);
  });

  it('prints what a resume changed of the options the run recorded', () => {
    const s = sink();
    const progress = new LineProgress(s.output, { quiet: true });
    progress.listener({ type: 'options_changed', changes: ['budget: US$1.00 → US$5.00'] });
    expect(s.err).toEqual(['resuming with changed options: budget: US$1.00 → US$5.00']);
  });

  it('says what runs, reports failures as they happen, and prints one concise progress line', () => {
    const s = sink();
    // Each event comes 10 s after the one before: the first submit at 20 s, the last finish at 50 s.
    let clock = 0;
    const progress = new LineProgress(s.output, { quiet: false, intervalMs: 60_000, now: () => clock });
    for (const group of groups) {
      clock += 10_000;
      for (const e of group) progress.listener(e);
    }
    expect(s.err).toEqual([`running p: 3 instance(s) in ${summary.runDir}`, 'a[s=2]: failed: boom']);
    // 2 finished in the 30 s since the first submit: the last one takes another 15 s.
    // The failed request is refunded (§8): committed is what the account may pay, US$0.05.
    expect(progress.line()).toBe('progress: 2/3 done (1 failed), 0 in flight, committed US$0.05, ETA 15s');
    progress.listener({ type: 'run_finished', summary });
    expect(s.out).toEqual([summaryLine(summary)]);
    expect(s.out[0]).toBe(
      'p 20261122T000000Z-abcd: failed; 2 completed, 1 failed, 0 nsfw, 0 canceled; committed US$0.15; 1.2 s; runs/p/20261122T000000Z-abcd',
    );
  });

  it('the last line says the report\'s net, unknown and unpriced apart, whatever way the run ended; "interrupted" for a signal; a stop sentence printed as it happened is not printed again', () => {
    const base = {
      runId: 'r',
      runDir: 'runs/p/r',
      pipeline: 'p',
      outcome: 'aborted' as const,
      estimatedUsd: 0.4,
      durationMs: 1000,
      counts: { completed: 8, failed: 0, nsfw: 0, canceled: 0, unknown: 0, pending: 2, rerolled: 0, reused: 0, inFlight: 0 },
      message: 'Interrupted: stopped submitting.',
    };
    // No report (another process holds the run): what the run committed, named so.
    expect(summaryLine(base)).toContain('; committed US$0.40;');
    // With the report: its net, never the committed estimate, whatever is unknown or in flight.
    const money = { netUsd: 0.35, unknownUsd: 0.05, unpricedInstances: 0 };
    expect(summaryLine({ ...base, money })).toContain('; net US$0.35 + up to US$0.05 unknown;');
    expect(summaryLine({ ...base, outcome: 'budget', counts: { ...base.counts, inFlight: 2 }, money })).toContain(
      '; net US$0.35 + up to US$0.05 unknown;',
    );
    expect(summaryLine({ ...base, outcome: 'completed', money: { netUsd: 1.839963 } })).toContain('; net US$1.84;');
    expect(summaryLine({ ...base, outcome: 'failed', money: { netUsd: 0.1, unpricedInstances: 2 } })).toContain(
      '; net US$0.10 + 2 unpriced;',
    );
    expect(summaryLine({ ...base, money })).toMatch(/^p r: interrupted; /);
    expect(summaryLine(base).split('\n')).toEqual([expect.stringContaining('p r: interrupted'), 'Interrupted: stopped submitting.']);
    expect(summaryLine(base, 'Interrupted: stopped submitting.').split('\n')).toHaveLength(1);
    // Through a progress sink: run_stopping prints it on stderr, the summary does not repeat it.
    const s = sink();
    const progress = new LineProgress(s.output, { quiet: true });
    progress.listener({ type: 'run_stopping', reason: 'aborted', message: base.message });
    progress.listener({ type: 'run_finished', summary: base });
    expect([...s.err, ...s.out].join('\n').split('Interrupted:')).toHaveLength(2);
  });

  it('prints a progress line every intervalMs (--progress-interval), and none after the run ends', () => {
    vi.useFakeTimers();
    try {
      const s = sink();
      const progress = new LineProgress(s.output, { quiet: false, intervalMs: 30_000 });
      progress.listener(events[0]!);
      vi.advanceTimersByTime(29_999);
      expect(s.err.filter((l) => l.startsWith('progress: '))).toHaveLength(0);
      vi.advanceTimersByTime(60_001);
      expect(s.err.filter((l) => l.startsWith('progress: '))).toHaveLength(3);
      progress.listener({ type: 'run_finished', summary });
      vi.advanceTimersByTime(120_000);
      expect(s.err.filter((l) => l.startsWith('progress: '))).toHaveLength(3);
    } finally {
      vi.useRealTimers();
    }
  });

  it('--quiet prints only errors and the summary', () => {
    const s = sink();
    const progress = new LineProgress(s.output, { quiet: true });
    for (const e of events) progress.listener(e);
    progress.listener({ type: 'run_finished', summary });
    expect(s.err).toEqual(['a[s=2]: failed: boom']);
    expect(s.out).toHaveLength(1);
  });
});

describe('ETA', () => {
  it('is -- until an instance finishes, then the time left at the pace so far', () => {
    expect(etaText(0, 10, 1_000, 50_000)).toBe('--');
    expect(etaText(3, 10, undefined, 50_000)).toBe('--');
    expect(etaText(4, 10, 0, 60_000)).toBe('1m30s');
    expect(etaText(10, 10, 0, 60_000)).toBe('0s');
  });

  it('reads as seconds, minutes and seconds, or hours and minutes', () => {
    expect(formatDuration(42_400)).toBe('42s');
    expect(formatDuration(187_000)).toBe('3m07s');
    expect(formatDuration(7_500_000)).toBe('2h05m');
    expect(formatDuration(-5)).toBe('0s');
  });

  it('a line before anything finished says ETA --', () => {
    const s = sink();
    const progress = new LineProgress(s.output, { quiet: true, now: () => 5 });
    for (const e of groups.slice(0, 3).flat()) progress.listener(e);
    expect(progress.line()).toBe('progress: 0/3 done (0 failed), 2 in flight, committed US$0.10, ETA --');
  });
});

describe('--json-logs', () => {
  it('prints one JSON event per line, with a time', () => {
    const s = sink();
    const logs = new JsonLogs(s.output, { quiet: false });
    for (const e of [...events, { type: 'run_finished', summary } as const]) logs.listener(e);
    const parsed = s.out.map((line) => JSON.parse(line) as { type: string; time: string });
    expect(parsed.map((p) => p.type)).toEqual([
      'run_started',
      'instance_submitted',
      'instance_submitted',
      'instance_finished',
      'instance_finished',
      'run_finished',
    ]);
    expect(parsed.every((p) => !Number.isNaN(Date.parse(p.time)))).toBe(true);
  });

  it("prints no journaled record (journal.jsonl holds them), and a resume's run_started says where its journal stands, not its instances", () => {
    const s = sink();
    const logs = new JsonLogs(s.output, { quiet: false });
    logs.listener(resumed(3, [intent('a[s=1]'), submitted('a[s=1]'), status('a[s=1]', 'completed')]));
    logs.listener(journaled(intent('a[s=2]')));
    expect(s.out).toHaveLength(1);
    const line = JSON.parse(s.out[0]!) as { already: { steps: Record<string, Record<string, number>>; money: Record<string, number> } };
    expect(line.already.steps.a).toMatchObject({ completed: 1, not_started: 2 });
    expect(line.already.money).toMatchObject({ netUsd: 0.05, committedUsd: 0.05 });
    expect(s.out[0]).not.toContain('req-a[s=1]');
  });

  it('with --quiet, only failures and the summary', () => {
    const s = sink();
    const logs = new JsonLogs(s.output, { quiet: true });
    for (const e of [...events, { type: 'run_finished', summary } as const]) logs.listener(e);
    expect(s.out.map((line) => (JSON.parse(line) as { type: string }).type)).toEqual(['instance_finished', 'run_finished']);
  });
});
