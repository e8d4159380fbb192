// The summary a run ends with (the CLI's last line, and run_finished's summary in --json-logs)
// says what the report says: its counts, re-rolls and money are the run's fold of its journal, the
// very fold progress shows. Real runs against the emulator (in-process, port 0), ended every way:
// completed, stopped by the budget, failed and refunded (re-rolls among them), interrupted, resumed
// (instances replayed from the journal, re-rolls an earlier start made), and reused from an
// earlier run. For each, the summary,
// report.json and a progress view fed the run's events give the same figures.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../src/emulator/index.js';
import { LineProgress } from '../../src/report/progress.js';
import { REPORT_STATUSES, type ReportStatus } from '../../src/run/journal/run-fold.js';
import type { RunCounts, RunSummary } from '../../src/run/events.js';
import { resumeRun, startRun, type SessionOptions } from '../../src/session/run-session.js';
import { formatSpend } from '../../src/util/format-usd.js';
import { tempDir } from '../run/runner-helpers.js';

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0.3, log: () => {} });
});
afterAll(async () => {
  await emu.close();
});

/** A manifest of character sheets: `steps` maps a step to its sheet count and brief. */
function manifest(dir: string, name: string, steps: Record<string, { count: number; brief?: string }>, defaults = ''): string {
  const path = join(dir, `${name}.yaml`);
  const body = Object.entries(steps)
    .map(
      ([id, s]) =>
        `  ${id}:\n    model: character-sheet\n    matrix: { seed: { range: { from: 1, to: ${s.count} } } }\n    input: { tier: cats, seed: "{{ seed }}", brief: ${JSON.stringify(s.brief ?? 'a mascot')} }\n`,
    )
    .join('');
  writeFileSync(
    path,
    `version: 1\nname: ${name}\ndefaults:\n  polling: { initial_ms: 100, min_ms: 20, max_ms: 400 }\n${defaults}steps:\n${body}`,
  );
  return path;
}

interface ReportTotal {
  counts: Record<ReportStatus, number>;
  netUsd: number;
  unknownUsd: number;
  unpricedInstances: number;
  rerolls: number;
}

/** What one start said at its end, and what its report and a progress view say. */
interface Ended {
  exitCode: number;
  runDir: string;
  /** run_finished's summary as --json-logs printed it (json), or the summary line (text). */
  summary: RunSummary | undefined;
  line: string | undefined;
  report: ReportTotal;
  progress: { counts: Record<ReportStatus, number>; netUsd: number; unknownUsd: number; committedUsd: number };
}

/**
 * One start through the session, as the CLI runs it: `json` prints JSON events on out (the
 * summary is run_finished's), else the summary line. A progress view (the one the CLI shows outside
 * a terminal) is fed every event of the run, and read at the end.
 */
async function start(
  what: { manifest: string } | { resume: string },
  mode: 'json' | 'text',
  options: SessionOptions = {},
  onEvent?: () => void,
): Promise<Ended> {
  const out: string[] = [];
  const progress = new LineProgress({ out: () => {}, err: () => {} }, { quiet: true });
  let runDir = 'resume' in what ? what.resume : '';
  const session: SessionOptions = {
    out: (t) => out.push(t),
    err: () => {},
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` },
    quiet: true,
    jsonLogs: mode === 'json',
    yes: true,
    onRunDir: (dir) => {
      runDir = dir;
      return Promise.resolve();
    },
    onEvent: (event) => {
      progress.listener(event);
      onEvent?.();
    },
    ...options,
  };
  const result = 'manifest' in what ? await startRun(what.manifest, session) : await resumeRun(what.resume, session);
  const said = out.join('\n');
  const finished = said
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { type: string; summary?: RunSummary })
    .find((e) => e.type === 'run_finished');
  const line = said.split('\n').find((l) => / \S+: \w+; \d+ completed/.test(l));
  const report = (JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { total: ReportTotal }).total;
  const money = progress.fold.money();
  return {
    exitCode: result.exitCode,
    runDir,
    summary: finished?.summary,
    line,
    report,
    progress: { counts: progress.fold.counts(), netUsd: money.netUsd, unknownUsd: money.unknownUsd, committedUsd: money.committedUsd },
  };
}

/** The summary's counts in the report's words. */
function asReportCounts(c: RunCounts): Record<ReportStatus, number> {
  return {
    completed: c.completed,
    reused: c.reused,
    failed: c.failed,
    nsfw: c.nsfw,
    canceled: c.canceled,
    unknown: c.unknown,
    in_flight: c.inFlight,
    not_started: c.pending,
  };
}

/** The counts of a summary line (`… interrupted; 8 completed, 0 failed, …, 8 in flight, 4 not started; …`), in the report's words. */
function lineCounts(line: string): { counts: Record<ReportStatus, number>; rerolls: number; net: string } {
  const counts = Object.fromEntries(REPORT_STATUSES.map((s) => [s, 0])) as Record<ReportStatus, number>;
  const words: Record<string, ReportStatus> = { 'in flight': 'in_flight', 'not started': 'not_started' };
  const part = line.split('; ')[1] ?? '';
  for (const m of part.matchAll(/(\d+) (completed|failed|nsfw|canceled|unknown|reused|in flight|not started)\b/g)) {
    const word = m[2] as string;
    counts[words[word] ?? (word as ReportStatus)] = Number(m[1]);
  }
  return { counts, rerolls: Number(/(\d+) re-rolled/.exec(part)?.[1] ?? 0), net: /; net (.*?); [\d.]+ s/.exec(line)?.[1] ?? '(none)' };
}

/** The summary, report.json and progress agree on every count and on the money. */
function expectAgreement(e: Ended, mode: 'json' | 'text'): void {
  const r = e.report;
  // Progress folds the journal with the report's own functions.
  expect(e.progress.counts).toEqual(r.counts);
  expect(e.progress.netUsd).toBeCloseTo(r.netUsd, 9);
  expect(e.progress.unknownUsd).toBeCloseTo(r.unknownUsd, 9);
  if (mode === 'json') {
    const s = e.summary;
    expect(s, 'run_finished in --json-logs').toBeDefined();
    if (!s) return;
    expect(asReportCounts(s.counts)).toEqual(r.counts);
    expect(s.counts.rerolled).toBe(r.rerolls);
    expect(s.money?.netUsd).toBeCloseTo(r.netUsd, 9);
    expect(s.money?.unknownUsd).toBeCloseTo(r.unknownUsd, 9);
    expect(s.money?.unpricedInstances).toBe(r.unpricedInstances);
    // What is committed: the net and what may have been charged, as progress says it.
    expect(s.estimatedUsd).toBeCloseTo(e.progress.committedUsd, 9);
    expect(s.estimatedUsd).toBeCloseTo(r.netUsd + r.unknownUsd, 9);
  } else {
    expect(e.line, 'the summary line').toBeDefined();
    const said = lineCounts(e.line ?? '');
    expect(said.counts).toEqual(r.counts);
    expect(said.rerolls).toBe(r.rerolls);
    expect(said.net).toBe(formatSpend(r));
  }
}

describe("the summary's counts and money are the report's and progress's", () => {
  for (const mode of ['json', 'text'] as const) {
    it(`completed, failed with refunds and re-rolls, stopped by the budget (${mode})`, { timeout: 90_000 }, async () => {
      const dir = tempDir();
      const out = join(dir, 'runs');
      const done = await start({ manifest: manifest(dir, `done-${mode}`, { s: { count: 4 } }) }, mode, { outDir: out });
      expect(done.exitCode).toBe(0);
      expect(done.report.counts.completed).toBe(4);
      expectAgreement(done, mode);

      // Failed requests are refunded; an nsfw one is re-rolled three times (each refunded), then stays nsfw.
      const mixed = manifest(
        dir,
        `mixed-${mode}`,
        { ok: { count: 2 }, bad: { count: 2, brief: '[emulator:fail] broken' }, flagged: { count: 1, brief: '[emulator:nsfw] flagged' } },
        '  on_nsfw: reroll\n',
      );
      const failed = await start({ manifest: mixed }, mode, { outDir: out });
      expect(failed.exitCode).toBe(1);
      expect(failed.report.counts).toMatchObject({ completed: 2, failed: 2, nsfw: 1 });
      expect(failed.report.rerolls).toBe(3);
      expectAgreement(failed, mode);
      // Resumed with nothing to send: every instance is replayed from the journal, and the re-rolls
      // an earlier start made are the run's, as the report counts them.
      const replayed = await start({ resume: failed.runDir }, mode);
      expect(replayed.exitCode).toBe(1);
      expect(replayed.report.rerolls).toBe(3);
      expectAgreement(replayed, mode);

      const budget = await start(
        { manifest: manifest(dir, `budget-${mode}`, { s: { count: 6 } }, '  concurrency: 1\n  budget_usd: 0.1\n') },
        mode,
        {
          outDir: out,
        },
      );
      expect(budget.exitCode).toBe(3);
      expect(budget.report.counts.not_started).toBeGreaterThan(0);
      expectAgreement(budget, mode);
    });

    it(`interrupted, then resumed, then reused by a new run (${mode})`, { timeout: 120_000 }, async () => {
      const dir = tempDir();
      const out = join(dir, 'runs');
      const path = manifest(dir, `ctrl-c-${mode}`, { s: { count: 20 } });
      const stop = new AbortController();
      // Ctrl-C once four sheets are at the service, so some are in flight and most never started.
      const interrupted = await start({ manifest: path }, mode, { outDir: out, concurrency: 4, signal: stop.signal }, () => {
        if (emu.requests.active >= 4) stop.abort();
      });
      expect(interrupted.exitCode).toBe(130);
      expect(interrupted.report.counts.in_flight + interrupted.report.counts.unknown).toBeGreaterThan(0);
      expect(interrupted.report.counts.not_started).toBeGreaterThan(0);
      expectAgreement(interrupted, mode);

      // The resume replays what the journal holds (the completed ones, those in flight) and finishes the rest.
      const resumed = await start({ resume: interrupted.runDir }, mode);
      expect(resumed.exitCode).toBe(0);
      expect(resumed.report.counts.completed).toBe(20);
      expectAgreement(resumed, mode);

      // A new run of the same manifest reuses every result: nothing sent, US$0 for it.
      const reused = await start({ manifest: path }, mode, { outDir: out, reuse: true });
      expect(reused.exitCode).toBe(0);
      expect(reused.report.counts.reused).toBe(20);
      expect(reused.report.netUsd).toBe(0);
      expectAgreement(reused, mode);
    });
  }
});
