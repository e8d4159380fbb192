/**
 * What a run's page of `genpipe ui` shows: progress by step, the money with its budget, the cost
 * report's tables, the CSV rows set aside, spend over time, the retries, the time waited on
 * throttling, and the ETA while the run runs.
 *
 * The first screen never replays the journal of a run that keeps a summary: it reads the run's
 * summary.json (run/files/run-summary.ts: the run's own fold, kept current at most once a second
 * while it goes and at its end, a few KB whatever the run's size), read again each time it changes
 * while a page follows the run. A run without a summary to trust that is not running reads its
 * report.json (written at its end) when it is newer than the journal. Only a run with neither (one
 * from before summary.json) is summed from its journal by the report's own function
 * (summarizeCostReport).
 * Spend over time, the retries and the pace come from the journal's own records (run-series.ts),
 * read from where the last read stopped. A journal too large to read before the first screen
 * (SERIES_INLINE_BYTES) is read after it: the page gets the figures first, then the chart. The
 * time waited on throttling is the report's: a run's process keeps it, and report.json says it
 * once the start ends.
 */
import { runFile } from '../run/files/run-layout.js';
import { readFile, stat } from 'node:fs/promises';
import { committedUsd, summarizeCostReport, type CostSummary, type GroupLine } from '../report/cost-report.js';
import { sumsOfSummary, type RunSums, type SumsGroup } from '../report/run-list.js';
import { readRunSummary } from '../run/files/run-summary.js';
import { readPlanFile } from '../run/files/run-dir.js';
import { decisions } from '../review/review-store.js';
import { replayFile, resumeAction } from '../run/journal/run-state.js';
import { mayRemake, retryOf } from '../run/attempt/next-step.js';
import { rejectsCurrent } from '../run/attempt/remake.js';
import { attemptPrice } from '../run/attempt/attempt-money.js';
import { stepOfInstanceId } from '../plan/instance.js';
import { adapterFor } from '../models/registry.js';
import { retryStatusesOf, type RemakeSelection } from './remake.js';
import type { SkippedRow } from '../plan/skipped-rows.js';
import { formatCount, formatSpend, formatUsd } from '../util/format-usd.js';
import { etaText } from '../report/progress.js';
import { throttledSentence } from '../report/render.js';
import { JournalSeries, type JournalRetries, type SpendPoints } from './run-series.js';
import type { UiRun } from './run-watch.js';

/** A row of the report's step or model table, formatted by the one formatter. */
export interface MoneyRow {
  name: string;
  counts: GroupLine['counts'];
  /** The budget's measure (cost-report.ts committedUsd): the page's header says it, the report's tables do not. */
  committed: string;
  charged: string;
  refunded: string;
  net: string;
  unknown: string;
  unpriced: string;
}

export interface RunPageState {
  run: UiRun;
  steps: { id: string; model: string; count: number; counts: GroupLine['counts'] }[];
  tables: { steps: MoneyRow[]; models: MoneyRow[]; total: MoneyRow };
  skippedRows: SkippedRow[];
  /** Spend over time, from the journal's record times: seconds since 1970, and the committed, charged and net US$ at each. */
  series: SpendPoints;
  budgetUsd: number | null;
  /** Where the figures came from: `report.json`, `summary.json`, or the journal. */
  source: 'report.json' | 'summary.json' | 'journal';
  /** True while the chart, the retries and the pace are still being read from a large journal (they follow in a later state). */
  seriesPending: boolean;
  /** While the run runs: its ETA (progress's etaText), and the pace of its last start. */
  eta: { text: string; ended: number; total: number; perMinute: number | null } | null;
  /** The time the last start waited on throttling, as report.json and report.md say it; null until its report is written. */
  throttling: { ms: number; text: string } | null;
  /** nsfw re-rolls (the report's figure), and the attempts the journal records as sent again. */
  retries: JournalRetries & { rerolls: number; text: string };
}

function row(group: SumsGroup): MoneyRow {
  return {
    name: group.name,
    counts: group.counts,
    committed: formatUsd(committedUsd(group)),
    charged: formatUsd(group.estimatedUsd),
    refunded: formatUsd(group.refundedUsd),
    net: formatSpend({ netUsd: group.netUsd, unpricedInstances: group.unpricedInstances }),
    unknown: formatUsd(group.unknownUsd),
    unpriced: formatCount(group.unpricedInstances),
  };
}

type ReportFile = CostSummary & { instances?: unknown };

/** report.json without its instance lines, with its file's time; undefined when there is none. */
async function readReport(dir: string): Promise<{ report: ReportFile; mtimeMs: number } | undefined> {
  const file = await stat(runFile(dir, 'reportJson')).catch(() => undefined);
  if (file === undefined) return undefined;
  try {
    const parsed = JSON.parse(await readFile(runFile(dir, 'reportJson'), 'utf8')) as ReportFile;
    delete parsed.instances;
    return parsed.total === undefined ? undefined : { report: parsed, mtimeMs: file.mtimeMs };
  } catch {
    return undefined;
  }
}

/** The report's figures, when report.json is newer than the journal. */
async function currentReport(dir: string, read: { report: ReportFile; mtimeMs: number } | undefined): Promise<CostSummary | undefined> {
  if (read === undefined) return undefined;
  const journal = await stat(runFile(dir, 'journal')).catch(() => undefined);
  return journal !== undefined && journal.mtimeMs > read.mtimeMs ? undefined : read.report;
}

/**
 * The time waited on throttling as the report of the last start says it: read from a report.json
 * written at or after the run's last finish (the start's end writes it then; a notification's
 * record may follow it in the journal). Null while the run runs, and when no report says it.
 */
function throttlingOf(run: UiRun, read: { report: ReportFile; mtimeMs: number } | undefined): RunPageState['throttling'] {
  if (run.running || read === undefined || run.finishedAt === null || read.mtimeMs < run.finishedAt) return null;
  return throttlingText(read.report.throttledMs ?? 0);
}

const throttlingText = (ms: number): RunPageState['throttling'] => ({
  ms,
  text: ms > 0 ? throttledSentence(ms) : 'No request waited on throttling.',
});

/** A journal up to this size is read for the chart before the first screen; a larger one after it. */
export const SERIES_INLINE_BYTES = 4 << 20;

function retriesText(r: JournalRetries & { rerolls: number }): string {
  const rounds = r.rounds === 1 ? '1 --retry round' : `${formatCount(r.rounds)} --retry rounds`;
  return `${formatCount(r.rerolls)} re-rolled, ${formatCount(r.retried)} retried (${rounds}), ${formatCount(r.resubmitted)} unknown resubmitted`;
}

/** One run's page state, kept while pages follow it. */
export class RunFollower {
  #series: JournalSeries | undefined;
  #state: RunPageState | undefined;
  /** The chart's first read of a large journal, under way after the first screen. */
  #reading: Promise<void> | undefined;
  #seriesDone = false;

  constructor(
    readonly dir: string,
    /** The largest journal read for the chart before the first screen. */
    readonly inlineBytes = SERIES_INLINE_BYTES,
  ) {}

  /**
   * True when the series is read up to the journal's end now. A journal larger than
   * SERIES_INLINE_BYTES is read the first time in the background: `onLater` is called once it is,
   * and the next state has the chart.
   */
  async #seriesRead(series: JournalSeries, run: UiRun, onLater: (() => void) | undefined): Promise<boolean> {
    if (!this.#seriesDone) {
      const size = (await stat(runFile(this.dir, 'journal')).catch(() => undefined))?.size ?? 0;
      if (size > this.inlineBytes) {
        if (this.#reading === undefined)
          this.#reading = series.update().then(
            () => {
              this.#seriesDone = true;
              this.#state = undefined;
              onLater?.();
            },
            () => {
              this.#reading = undefined;
            },
          );
        return false;
      }
    }
    await series.update();
    this.#seriesDone = true;
    // A run that ended needs no fold: its points stay, and a resume reads the journal again.
    if (!run.running) series.release();
    return true;
  }

  /**
   * The state for `run` (the watch's latest listing of it): summed again only when the listing
   * changed, or once the chart of a large journal is read (then `onLater` is called).
   */
  async state(run: UiRun, onLater?: () => void): Promise<RunPageState> {
    if (this.#state !== undefined && this.#state.run === run) return this.#state;
    const plan = await readPlanFile(this.dir);
    // A running run's summary is trusted because the watch saw its lock held for it (readRunSummary).
    const fromSummary = await readRunSummary(this.dir, () => Promise.resolve(run.running));
    // report.json holds every instance's line: read only for a run without a summary. A running
    // run's report.json is an earlier start's: neither its figures nor its wait are read.
    const read = run.running || fromSummary ? undefined : await readReport(this.dir);
    const fromReport = fromSummary ? undefined : await currentReport(this.dir, read);
    const summary: RunSums & { skippedRows?: CostSummary['skippedRows'] } = fromSummary
      ? sumsOfSummary(fromSummary)
      : (fromReport ?? (await summarizeCostReport(this.dir)));
    const rerolls = fromSummary ? fromSummary.rerolls : ((summary.total as Partial<GroupLine>).rerolls ?? 0);
    const series = (this.#series ??= new JournalSeries(
      runFile(this.dir, 'journal'),
      plan.steps.map((s) => ({ id: s.id, count: s.count, priceUsd: s.price_usd })),
    ));
    const seriesPending = !(await this.#seriesRead(series, run, onLater));
    const eta = run.running && !seriesPending ? etaOf(series, Date.now()) : null;
    const byStep = new Map(summary.steps.map((s) => [s.name, s]));
    const retries = { ...series.retries, rerolls };
    this.#state = {
      run,
      steps: plan.steps.map((s) => ({ id: s.id, model: s.model, count: s.count, counts: (byStep.get(s.id) ?? summary.total).counts })),
      tables: { steps: summary.steps.map(row), models: summary.models.map(row), total: row(summary.total) },
      skippedRows: summary.skippedRows ?? plan.skipped_rows ?? [],
      series: series.points,
      budgetUsd: run.budgetUsd,
      source: fromSummary ? 'summary.json' : fromReport ? 'report.json' : 'journal',
      seriesPending,
      eta,
      throttling:
        fromSummary && !run.running && fromSummary.throttledMs !== null ? throttlingText(fromSummary.throttledMs) : throttlingOf(run, read),
      retries: { ...retries, text: seriesPending ? 'counted once the journal is read' : retriesText(retries) },
    };
    return this.#state;
  }
}

/** The ETA of a running run, as progress says it (etaText), from the pace of its last start. */
function etaOf(series: JournalSeries, now: number): RunPageState['eta'] {
  const pace = series.pace;
  if (pace === undefined) return null;
  const finished = pace.ended - pace.before;
  const minutes = pace.startedAt === undefined ? 0 : (now - pace.startedAt) / 60_000;
  return {
    text: etaText(finished, pace.total - pace.before, pace.startedAt, now),
    ended: pace.ended,
    total: pace.total,
    perMinute: minutes > 0 && finished > 0 ? Math.round((finished / minutes) * 10) / 10 : null,
  };
}

/**
 * What a remake of `selection` would start again, by the runner's own rules: a `--retry` round's
 * new attempt (retryOf, for the statuses the remake passes), and a rejected result that was not
 * remade since its rejection (mayRemake and rejectsCurrent), but for a conversational model's (an
 * agent turn), which the remake keeps as it was. Each is priced as its last attempt
 * was journaled (a table or formula price is the instance's own), else at its step's price.
 */
export interface RemakeEstimate {
  selection: RemakeSelection[];
  instances: string[];
  estimateUsd: number;
  unpriced: number;
  text: string;
}

const MAX_LISTED = 50;

export async function remakeEstimate(dir: string, selection: readonly RemakeSelection[]): Promise<RemakeEstimate> {
  const plan = await readPlanFile(dir);
  const stepIndex = new Map(plan.steps.map((s, i) => [s.id, i]));
  const retry = new Set(retryStatusesOf(selection));
  const state = await replayFile(runFile(dir, 'journal'));
  // The round the remake's start records: each `--retry` given is a new one (resolved-options.ts).
  const round = (state.options?.retryRound ?? 0) + 1;
  const rejected = retry.has('rejected') ? await decisions(dir, 'rejected') : new Map<string, string | undefined>();
  // A conversational model's rejected turn is kept as it was, and nothing is sent for it: a turn
  // cannot be made again without its whole conversation (run/attempt/remake.ts).
  const remakable = plan.steps.map((s) => adapterFor(s.model)?.conversational !== true);
  const picked: { id: string; step: number; price: number | null }[] = [];
  for (const [id, entry] of state.instances) {
    const step = stepIndex.get(stepOfInstanceId(id));
    if (step === undefined) continue;
    // Whether the model resends an unanswered intent with its key decides only resend-or-unknown,
    // and the remake retries neither: false here counts the same instances.
    const retried = retryOf(resumeAction(entry, false, state.suspectAll), entry, retry, round) !== undefined;
    const remade = !retried && remakable[step] === true && mayRemake(entry, retry) && rejectsCurrent(rejected, id, entry, round);
    if (retried || remade) picked.push({ id, step, price: attemptPrice(entry, plan.steps[step]?.price_usd) });
  }
  picked.sort((a, b) => a.step - b.step);
  let estimateUsd = 0;
  let unpriced = 0;
  for (const { price } of picked) {
    if (price === null) unpriced++;
    else estimateUsd += price;
  }
  const text = `${formatCount(picked.length)} instance${picked.length === 1 ? '' : 's'}: ${formatSpend({ netUsd: estimateUsd, unpricedInstances: unpriced })}`;
  return { selection: [...selection], instances: picked.slice(0, MAX_LISTED).map((p) => p.id), estimateUsd, unpriced, text };
}
