/**
 * What a run's page of `genpipe ui` shows: progress by step, the money with its budget, the cost
 * report's tables, the CSV rows set aside, and spend over time.
 *
 * The first screen never replays the journal of a run that keeps a summary: it reads the run's
 * summary.json (run/files/run-summary.ts: the run's own fold, kept current at most once a second
 * while it goes and at its end, a few KB whatever the run's size), read again each time it changes
 * while a page follows the run. A run without a summary to trust that is not running reads its
 * report.json (written at its end) when it is newer than the journal. Only a run with neither (one
 * from before summary.json) is summed from its journal by the report's own function
 * (summarizeCostReport).
 * Spend over time is what the ui saw while it followed the run (a point per change, at most
 * MAX_POINTS, thinned by half when full): a run that ended before shows its start and its end.
 */
import { runFile } from '../run/files/run-layout.js';
import { readFile, stat } from 'node:fs/promises';
import { summarizeCostReport, type CostSummary, type GroupLine, type InstanceLine } from '../report/cost-report.js';
import { sumsOfSummary, type RunSums, type SumsGroup } from '../report/run-list.js';
import { readRunSummary } from '../run/files/run-summary.js';
import { readPlanFile } from '../run/files/run-dir.js';
import { readReview } from '../review/review-store.js';
import type { SkippedRow } from '../plan/skipped-rows.js';
import { formatCount, formatSpend, formatUsd } from '../util/format-usd.js';
import type { UiRun } from './run-watch.js';

export const MAX_POINTS = 2_000;

/** A row of the report's step or model table, formatted by the one formatter. */
export interface MoneyRow {
  name: string;
  counts: GroupLine['counts'];
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
  /** Spend over time: seconds since 1970, and the committed, charged and net US$ at each. */
  series: { t: number[]; committed: number[]; charged: number[]; net: number[] };
  budgetUsd: number | null;
  /** Where the figures came from: `report.json`, `summary.json`, or the journal. */
  source: 'report.json' | 'summary.json' | 'journal';
}

function row(group: SumsGroup): MoneyRow {
  return {
    name: group.name,
    counts: group.counts,
    charged: formatUsd(group.estimatedUsd),
    refunded: formatUsd(group.refundedUsd),
    net: formatSpend({ netUsd: group.netUsd, unpricedInstances: group.unpricedInstances }),
    unknown: formatUsd(group.unknownUsd),
    unpriced: formatCount(group.unpricedInstances),
  };
}

/** report.json without its instance lines, when it is there and newer than the journal. */
async function readReport(dir: string): Promise<CostSummary | undefined> {
  const [report, journal] = await Promise.all([
    stat(runFile(dir, 'reportJson')).catch(() => undefined),
    stat(runFile(dir, 'journal')).catch(() => undefined),
  ]);
  if (report === undefined || (journal !== undefined && journal.mtimeMs > report.mtimeMs)) return undefined;
  try {
    const parsed = JSON.parse(await readFile(runFile(dir, 'reportJson'), 'utf8')) as CostSummary & { instances?: unknown };
    delete parsed.instances;
    return parsed.total === undefined ? undefined : parsed;
  } catch {
    return undefined;
  }
}

/** One run's page state, kept while pages follow it. */
export class RunFollower {
  readonly #series: RunPageState['series'] = { t: [], committed: [], charged: [], net: [] };
  #state: RunPageState | undefined;

  constructor(readonly dir: string) {}

  /** The state for `run` (the watch's latest listing of it): summed again only when the listing changed. */
  async state(run: UiRun): Promise<RunPageState> {
    if (this.#state !== undefined && this.#state.run === run) return this.#state;
    const plan = await readPlanFile(this.dir);
    // A running run's summary is trusted because the watch saw its lock held for it (readRunSummary).
    const fromSummary = await readRunSummary(this.dir, () => Promise.resolve(run.running));
    // report.json holds every instance's line: read only for a run without a summary.
    const fromReport = fromSummary || run.running ? undefined : await readReport(this.dir);
    const summary: RunSums & { skippedRows?: CostSummary['skippedRows'] } = fromSummary
      ? sumsOfSummary(fromSummary)
      : (fromReport ?? (await summarizeCostReport(this.dir)));
    const now = Date.now() / 1000;
    if (this.#series.t.length === 0 && run.startedAt !== null) this.#push(run.startedAt / 1000, 0, 0, 0);
    const at = run.running || run.finishedAt === null ? now : run.finishedAt / 1000;
    this.#push(Math.max(at, this.#series.t.at(-1) ?? at), summary.total.estimatedUsd, summary.total.estimatedUsd, summary.total.netUsd);
    const byStep = new Map(summary.steps.map((s) => [s.name, s]));
    this.#state = {
      run,
      steps: plan.steps.map((s) => ({ id: s.id, model: s.model, count: s.count, counts: (byStep.get(s.id) ?? summary.total).counts })),
      tables: { steps: summary.steps.map(row), models: summary.models.map(row), total: row(summary.total) },
      skippedRows: summary.skippedRows ?? plan.skipped_rows ?? [],
      series: {
        t: [...this.#series.t],
        committed: [...this.#series.committed],
        charged: [...this.#series.charged],
        net: [...this.#series.net],
      },
      budgetUsd: run.budgetUsd,
      source: fromSummary ? 'summary.json' : fromReport ? 'report.json' : 'journal',
    };
    return this.#state;
  }

  #push(t: number, committed: number, charged: number, net: number): void {
    const s = this.#series;
    if (s.t.length > 0 && s.committed.at(-1) === committed && s.net.at(-1) === net && s.charged.at(-1) === charged && s.t.length > 1) {
      s.t[s.t.length - 1] = t;
      return;
    }
    s.t.push(t);
    s.committed.push(committed);
    s.charged.push(charged);
    s.net.push(net);
    if (s.t.length > MAX_POINTS)
      for (const list of [s.t, s.committed, s.charged, s.net])
        list.splice(0, list.length, ...list.filter((_, i) => i % 2 === 0 || i === list.length - 1));
  }
}

/** What a remake of `selection` would start again: the instances, and their estimate at their steps' prices. */
export interface RemakeEstimate {
  selection: ('rejected' | 'failed')[];
  instances: string[];
  estimateUsd: number;
  unpriced: number;
  text: string;
}

const FAILED = new Set(['failed', 'nsfw', 'canceled']);
const MAX_LISTED = 50;

export async function remakeEstimate(dir: string, selection: readonly ('rejected' | 'failed')[]): Promise<RemakeEstimate> {
  const plan = await readPlanFile(dir);
  const prices = new Map(plan.steps.map((s) => [s.id, s.price_usd]));
  const review = await readReview(dir);
  const picked: InstanceLine[] = [];
  await summarizeCostReport(dir, {}, (line) => {
    const rejected = selection.includes('rejected') && review[line.instance]?.decision === 'rejected' && line.status === 'completed';
    const failed = selection.includes('failed') && FAILED.has(line.status);
    if (rejected || failed) picked.push(line);
  });
  let estimateUsd = 0;
  let unpriced = 0;
  for (const line of picked) {
    const price = prices.get(line.step);
    if (price === null || price === undefined) unpriced++;
    else estimateUsd += price;
  }
  const text = `${formatCount(picked.length)} instance${picked.length === 1 ? '' : 's'}: ${formatSpend({ netUsd: estimateUsd, unpricedInstances: unpriced })}`;
  return { selection: [...selection], instances: picked.slice(0, MAX_LISTED).map((l) => l.instance), estimateUsd, unpriced, text };
}
