/**
 * The credit-cost report of a run, computed from its journal and plan.json alone, so it can be
 * made for any run directory, finished or not. Billing follows spec §8:
 * - a submitted instance costs its estimate (the price table; US$0.05 per character sheet);
 * - the service's actual cost replaces the estimate where it reports one (agent llm_cost_usd);
 * - failed, nsfw and canceled requests, and failed agent turns, are refunded in full.
 * Money is counted per attempt (run/attempt/attempt-money.ts): an attempt left behind by a re-roll or a
 * `--retry` keeps what it cost, and an attempt whose end is unknown is shown apart (`unknownUsd`),
 * never in the net: the service's ledger lies within [net, net + unknown].
 */
import { readPlanFile, type PlanFile, type StepSinkRecord } from '../run/files/run-dir.js';
import { absorbSinkTotals, addSinkEntry, emptySinkTotals, sinkNotes, type SinkTotals } from '../sink/sink-totals.js';
import type { InstanceState } from '../run/journal/run-state.js';
import { moneyOf } from '../run/attempt/attempt-money.js';
import { stepOfInstanceId } from '../plan/instance.js';
import { instanceStates, plainState, type PlainOutcome } from './instance-lines.js';
import { jsonUsd } from '../util/format-usd.js';
import { submissionId } from '../models/submission.js';
import type { SkippedRow } from '../plan/skipped-rows.js';
import { runFile } from '../run/files/run-layout.js';
import { statusOf, type ReportStatus } from '../run/journal/run-fold.js';

export type { ReportStatus };

export interface Money {
  /** Sum of the estimates of the instances submitted. */
  estimatedUsd: number;
  /** Sum of the costs the service reported (agent turns); null when it reported none. */
  actualUsd: number | null;
  /** Refunds: failed, nsfw and canceled requests, failed agent turns. */
  refundedUsd: number;
  /** What the account pays for the attempts whose end is known: (actual where known, else estimated) minus refunds. */
  netUsd: number;
  /** Attempts whose end is unknown (sent, or maybe sent, never seen to end), at their price: the account pays between 0 and this on top of the net. */
  unknownUsd: number;
  /** Instances submitted whose price is unknown: their cost is not in these sums. */
  unpricedInstances: number;
}

export interface InstanceLine extends Money {
  instance: string;
  step: string;
  model: string;
  status: ReportStatus;
  requestId: string;
  /** nsfw attempts re-rolled before the last one (each refunded in full). */
  rerolls: number;
  /** Objects another object at their key kept out of the sink (nothing overwritten): present when some did. */
  uploadConflicts?: { uri: string; reason: string }[];
  /** Uploads whose bytes in the store could not be checked: present when some were. */
  unverifiedUploads?: { uri: string; reason: string }[];
}

export interface GroupLine extends Money {
  name: string;
  counts: Record<ReportStatus, number>;
  /** nsfw attempts re-rolled (refunded), over the group's instances. */
  rerolls: number;
  /** Net cost of the instances that were re-rolled: what re-rolling bought. */
  rerolledNetUsd: number;
}

/** The files of the steps with a storage sink: uploaded, and still to upload, with where they go. */
export interface ReportSinks extends SinkTotals {
  /** Each distinct sink of the run's steps, as plan.json records it. */
  locations: StepSinkRecord[];
}

export interface CostReport {
  pipeline: string;
  runId: string;
  creditsPerUsd: number;
  instances: InstanceLine[];
  steps: GroupLine[];
  models: GroupLine[];
  total: GroupLine;
  /** Present when a step of the run has a storage sink. */
  sink?: ReportSinks;
  /** The CSV rows the run set aside as invalid (plan.json), one entry per bad cell; present when there were some. */
  skippedRows?: SkippedRow[];
  /** How long the start that wrote the report waited on throttling in all, in ms (RunSummary.throttledMs); present when it did. */
  throttledMs?: number;
  /** The run's status, in the words `genpipe runs` uses (`completed`, `interrupted`...); present in a report written to the run's files. */
  status?: string;
}

const STATUSES: readonly ReportStatus[] = ['completed', 'reused', 'failed', 'nsfw', 'canceled', 'unknown', 'in_flight', 'not_started'];

/** Rounds to a millionth of a dollar, so sums of cents stay exact in JSON. */
const round = jsonUsd;

const requestIdOf = (entry: InstanceState): string => (entry.submission ? submissionId(entry.submission) : '');

/**
 * Committed, the budget's measure (spend.ts committedByJournal): what is charged or in flight,
 * plus the unknown. The same sum of every attempt's money as the budget a resume starts from.
 */
export function committedUsd(money: Pick<Money, 'netUsd' | 'unknownUsd'>): number {
  return round(money.netUsd + money.unknownUsd);
}

/** A group with nothing counted yet. */
export function emptyGroup(name: string): GroupLine {
  return {
    name,
    counts: Object.fromEntries(STATUSES.map((s) => [s, 0])) as Record<ReportStatus, number>,
    estimatedUsd: 0,
    actualUsd: null,
    refundedUsd: 0,
    netUsd: 0,
    unknownUsd: 0,
    unpricedInstances: 0,
    rerolls: 0,
    rerolledNetUsd: 0,
  };
}

/** Adds `m`'s sums into `group`'s, each rounded to a millionth. */
function addMoney(group: Money, m: Money): void {
  group.estimatedUsd = round(group.estimatedUsd + m.estimatedUsd);
  if (m.actualUsd !== null) group.actualUsd = round((group.actualUsd ?? 0) + m.actualUsd);
  group.refundedUsd = round(group.refundedUsd + m.refundedUsd);
  group.netUsd = round(group.netUsd + m.netUsd);
  group.unknownUsd = round(group.unknownUsd + m.unknownUsd);
  group.unpricedInstances += m.unpricedInstances;
}

function add(group: GroupLine, line: InstanceLine): void {
  group.counts[line.status]++;
  addMoney(group, line);
  group.rerolls += line.rerolls;
  if (line.rerolls > 0) group.rerolledNetUsd = round(group.rerolledNetUsd + line.netUsd);
}

/** One instance's line of the report, from its replayed state. */
export function lineOf(id: string, entry: InstanceState, stepInfo: ReadonlyMap<string, PlanFile['steps'][number]>): InstanceLine {
  const step = stepOfInstanceId(id);
  const info = stepInfo.get(step);
  const model = entry.intent?.model ?? info?.model ?? 'unknown';
  const status = statusOf(entry);
  const price = info?.price_usd ?? null;
  // Every attempt counts, the ones a re-roll or a retry left behind too (attempt-money.ts).
  const money = moneyOf(entry, price);
  const actual = entry.final?.actualCostUsd;
  const actualUsd = actual === undefined ? null : round(actual);
  const notes = info?.sink && (entry.sinkConflicts?.size || entry.sinkUnverified?.size) ? sinkNotes(id, entry) : undefined;
  const line: InstanceLine = {
    instance: id,
    step,
    model,
    status,
    requestId: requestIdOf(entry),
    rerolls: entry.rerolls,
    estimatedUsd: round(money.estimatedUsd),
    actualUsd,
    refundedUsd: round(money.refundedUsd),
    netUsd: round(money.chargedUsd),
    unknownUsd: round(money.unknownUsd),
    unpricedInstances: money.unpricedAttempts > 0 ? 1 : 0,
  };
  if (notes?.conflicts.length) line.uploadConflicts = notes.conflicts.map(({ uri, reason }) => ({ uri, reason }));
  if (notes?.unverified.length) line.unverifiedUploads = notes.unverified.map(({ uri, reason }) => ({ uri, reason }));
  return line;
}

/** The report without its instance lines: what a summary, a notification or `genpipe runs` needs. */
export type CostSummary = Omit<CostReport, 'instances'>;

/** Adds one group's sums and counts into another's (the halves of a report read by two threads). */
function absorb(group: GroupLine, other: GroupLine): void {
  for (const status of STATUSES) group.counts[status] += other.counts[status];
  addMoney(group, other);
  group.rerolls += other.rerolls;
  group.rerolledNetUsd = round(group.rerolledNetUsd + other.rerolledNetUsd);
}

/** A tally's sums as plain data, for another thread to absorb. */
export interface TallyGroups {
  steps: GroupLine[];
  models: GroupLine[];
  total: GroupLine;
  sink: SinkTotals | undefined;
}

/**
 * The sums of a report as its instance lines come, in id order: by step (the plan's first, in its
 * order), by model (as first met) and in total. Every sum is rounded to a millionth of a dollar
 * at each step, so the sums of two consecutive ranges of lines, added, are those of one pass.
 */
export class CostTally {
  readonly stepInfo: ReadonlyMap<string, PlanFile['steps'][number]>;
  readonly steps = new Map<string, GroupLine>();
  readonly models = new Map<string, GroupLine>();
  readonly total = emptyGroup('total');
  /** Uploaded and pending files of the steps with a sink; undefined when none has one. */
  readonly sink: SinkTotals | undefined;

  constructor(readonly plan: PlanFile) {
    this.stepInfo = new Map(plan.steps.map((s) => [s.id, s]));
    for (const s of plan.steps) this.steps.set(s.id, emptyGroup(s.id));
    this.sink = plan.steps.some((s) => s.sink !== undefined) ? emptySinkTotals() : undefined;
  }

  /** The line of an instance, counted. */
  line(id: string, entry: InstanceState): InstanceLine {
    return this.#count(lineOf(id, entry, this.stepInfo), entry);
  }

  /** Lines of plain outcomes by step, model and status, with another instance's id and request id. */
  readonly #plain = new Map<string, InstanceLine>();

  /**
   * The line of an instance whose outcome is plain (instance-lines.ts), counted: the first of each
   * step, model and status is replayed, the others copy its line with their own id and request id
   * (lineOf reads the id only for its step, and the request id only to show it). It adds nothing to
   * a storage sink's counts: those read downloads and uploads, and a plain outcome has neither.
   */
  plainLine(id: string, plain: PlainOutcome): InstanceLine {
    const step = stepOfInstanceId(id);
    // Instances of one step may differ in price (a price table): the price is part of the likeness.
    const key = `${step}\n${plain.model}\n${plain.status}\n${String(plain.priceUsd)}`;
    let like = this.#plain.get(key);
    if (!like) this.#plain.set(key, (like = lineOf(id, plainState(id, plain), this.stepInfo)));
    return this.#count(
      {
        instance: id,
        step: like.step,
        model: like.model,
        status: like.status,
        requestId: plain.requestId,
        rerolls: like.rerolls,
        estimatedUsd: like.estimatedUsd,
        actualUsd: like.actualUsd,
        refundedUsd: like.refundedUsd,
        netUsd: like.netUsd,
        unknownUsd: like.unknownUsd,
        unpricedInstances: like.unpricedInstances,
      },
      undefined,
    );
  }

  /** Adds a line to its step's, its model's and the total's sums; with a sink, its state's files too. */
  #count(line: InstanceLine, entry: InstanceState | undefined): InstanceLine {
    add(this.#group(this.steps, line.step), line);
    add(this.#group(this.models, line.model), line);
    add(this.total, line);
    if (entry && this.sink && this.stepInfo.get(line.step)?.sink) addSinkEntry(this.sink, entry, line.instance);
    return line;
  }

  /** The groups so far, as plain data (a worker thread's answer). */
  groups(): TallyGroups {
    return { steps: [...this.steps.values()], models: [...this.models.values()], total: this.total, sink: this.sink };
  }

  /** Adds the groups of the lines after this tally's (another thread's tally of them). */
  absorb(later: TallyGroups): void {
    for (const g of later.steps) absorb(this.#group(this.steps, g.name), g);
    for (const g of later.models) absorb(this.#group(this.models, g.name), g);
    absorb(this.total, later.total);
    if (this.sink && later.sink) absorbSinkTotals(this.sink, later.sink);
  }

  /** The summary, planned instances that never started counted too, so the report adds up to the plan. */
  summary(creditsPerUsd: number | undefined): CostSummary {
    const { plan, steps, models, total } = this;
    for (const s of plan.steps) {
      const group = steps.get(s.id) as GroupLine;
      const seen = STATUSES.reduce((n, st) => n + group.counts[st], 0);
      const missing = Math.max(0, s.count - seen);
      group.counts.not_started += missing;
      total.counts.not_started += missing;
      this.#group(models, s.model).counts.not_started += missing;
    }
    const locations = new Map<string, StepSinkRecord>();
    for (const s of plan.steps) if (s.sink) locations.set(JSON.stringify([s.sink.uri, s.sink.public_url ?? null]), s.sink);
    return {
      pipeline: plan.pipeline,
      runId: plan.runId,
      creditsPerUsd: creditsPerUsd ?? 100,
      steps: [...steps.values()],
      models: [...models.values()],
      total,
      ...(this.sink ? { sink: { ...this.sink, locations: [...locations.values()] } } : {}),
      ...(plan.skipped_rows?.length ? { skippedRows: plan.skipped_rows } : {}),
    };
  }

  #group(groups: Map<string, GroupLine>, name: string): GroupLine {
    let group = groups.get(name);
    if (!group) groups.set(name, (group = emptyGroup(name)));
    return group;
  }
}

/**
 * Builds the report of a run directory as the journal streams (memory bounded whatever the run's
 * size: instance-lines.ts), handing each instance's line to `onLine` in id order.
 */
export async function summarizeCostReport(
  runDir: string,
  options: { creditsPerUsd?: number } = {},
  onLine?: (line: InstanceLine) => void | Promise<void>,
): Promise<CostSummary> {
  const plan = await readPlanFile(runDir);
  const tally = new CostTally(plan);
  const sinks = plan.steps.some((step) => step.sink !== undefined);
  for await (const [id, entry] of instanceStates(runFile(runDir, 'journal'), { sinks, order: plan.steps })) {
    const line = tally.line(id, entry);
    await onLine?.(line);
  }
  return tally.summary(options.creditsPerUsd);
}

/** The whole report, instance lines in memory: for tests and small runs (writeCostReport streams). */
export async function buildCostReport(runDir: string, options: { creditsPerUsd?: number } = {}): Promise<CostReport> {
  const instances: InstanceLine[] = [];
  const summary = await summarizeCostReport(runDir, options, (line) => {
    instances.push(line);
  });
  return { ...summary, instances };
}
