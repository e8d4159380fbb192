/**
 * The one fold of a run's journal that its views read: each instance's status and money, and
 * their sums by step and in total. `genpipe report` reads the same statusOf and moneyOf over a
 * finished journal (report/cost-report.ts); a live run feeds a RunFold the records it journals
 * (the `instance_journaled` event), so progress says what the report will say.
 *
 * Each record costs O(1): the instance's state is replayed as the journal replays it (applyRecord),
 * and its status and money are read again (statusOf, moneyOf) and put in the sums in place of
 * what they were.
 */
import type { JournalRecord, JournalRecordOf, JournalRecordType, TerminalStatus } from './journal-records.js';
import type { Submission } from '../../models/adapter.js';
import { applyRecord, emptyRunState, instanceStatus, type InstanceState, type RunState } from './run-state.js';
import { moneyOf } from '../attempt/attempt-money.js';
import { stepOfInstanceId } from '../../plan/instance.js';
import { jsonUsd } from '../../util/format-usd.js';

export type ReportStatus = 'completed' | 'reused' | 'failed' | 'nsfw' | 'canceled' | 'unknown' | 'in_flight' | 'not_started';

export const REPORT_STATUSES: readonly ReportStatus[] = [
  'completed',
  'reused',
  'failed',
  'nsfw',
  'canceled',
  'unknown',
  'in_flight',
  'not_started',
];

/**
 * An instance's status in the report, from the one reading of its state that outputs.csv and the
 * gallery show too (run-state.ts instanceStatus): the service's final status once there is one,
 * so a completed instance whose files could not be fetched is completed everywhere.
 */
export function statusOf(entry: InstanceState): ReportStatus {
  const status = instanceStatus(entry);
  return status === 'pending' ? 'not_started' : status;
}

/** A step of the plan, as a fold needs it: how many instances it has, and its price (for attempts whose intent journaled none). */
export interface PlannedStep {
  id: string;
  count: number;
  priceUsd?: number | null | undefined;
  /** The step's model: an instance whose intent names none is counted under it, as the report counts it. */
  model?: string | undefined;
}

/** The money of a set of instances, in the report's words (cost-report.ts Money). */
export interface FoldMoney {
  estimatedUsd: number;
  refundedUsd: number;
  /** What the account pays for the attempts whose end is known: the report's net. */
  netUsd: number;
  unknownUsd: number;
  unpricedInstances: number;
  /** Net and unknown: what the run may have spent, the budget's measure (spend.ts). */
  committedUsd: number;
}

/** One instance's part of the sums, as a record leaves it. */
interface Line {
  status: ReportStatus;
  /** The model the report groups the instance under: its intent's, else its step's. */
  model: string;
  estimatedUsd: number;
  refundedUsd: number;
  netUsd: number;
  unknownUsd: number;
  unpriced: 0 | 1;
  /** nsfw attempts re-rolled with a new seed (the report's rerolls). */
  rerolls: number;
}

/** The records that can change an instance's status or money; the others (files, uploads, sinks) are not folded. */
const FOLDED: ReadonlySet<JournalRecordType> = new Set<JournalRecordType>([
  'intent',
  'submitted',
  'status',
  'failed',
  'refused',
  'forgotten',
  'reroll',
  'retry',
  'reused',
]);

const emptyCounts = (): Record<ReportStatus, number> =>
  Object.fromEntries(REPORT_STATUSES.map((s) => [s, 0])) as Record<ReportStatus, number>;

const emptyMoney = (): FoldMoney => ({ estimatedUsd: 0, refundedUsd: 0, netUsd: 0, unknownUsd: 0, unpricedInstances: 0, committedUsd: 0 });

/** Adds (`sign` 1) or takes away (-1) a line's money from a sum, each figure rounded to a millionth as the report's sums are. */
function addLine(money: FoldMoney, line: Line, sign: 1 | -1): void {
  money.estimatedUsd = jsonUsd(money.estimatedUsd + sign * line.estimatedUsd);
  money.refundedUsd = jsonUsd(money.refundedUsd + sign * line.refundedUsd);
  money.netUsd = jsonUsd(money.netUsd + sign * line.netUsd);
  money.unknownUsd = jsonUsd(money.unknownUsd + sign * line.unknownUsd);
  money.unpricedInstances += sign * line.unpriced;
  money.committedUsd = jsonUsd(money.netUsd + money.unknownUsd);
}

interface StepSums {
  planned: number;
  /** Instances the journal names, by status. */
  counts: Record<ReportStatus, number>;
  seen: number;
  money: FoldMoney;
  rerolls: number;
}

/** The sums of a model: the report's table by model. */
interface ModelSums {
  counts: Record<ReportStatus, number>;
  money: FoldMoney;
}

export class RunFold {
  /** The replayed state of the instances, kept lean: only what status and money read. */
  readonly #state: RunState = emptyRunState();
  readonly #steps = new Map<string, StepSums>();
  readonly #prices = new Map<string, number | null | undefined>();
  readonly #stepModels = new Map<string, string>();
  readonly #models = new Map<string, ModelSums>();
  readonly #total = emptyMoney();
  #rerolls = 0;
  readonly #lean = new LeanRecords();

  /** `steps`: the plan's (tellStarted), so that instances never started are counted. */
  constructor(steps: readonly PlannedStep[] = []) {
    this.tellStarted(steps);
  }

  /** The plan's steps: their instance counts (not started until a record names them) and their prices. */
  tellStarted(steps: readonly PlannedStep[]): void {
    for (const step of steps) {
      this.#sums(step.id).planned = step.count;
      this.#prices.set(step.id, step.priceUsd);
      if (step.model !== undefined) {
        this.#stepModels.set(step.id, step.model);
        this.#modelSums(step.model);
      }
    }
  }

  /** The fold of a replayed state (a resume's journal as it stands), its own copy: later records change it alone. */
  static of(state: RunState, steps: readonly PlannedStep[] = []): RunFold {
    return RunFold.#into(new RunFold(steps), state);
  }

  /** Another fold that starts where this one stands (each reader of a run's events feeds its own). */
  copy(): RunFold {
    const fold = new RunFold();
    for (const [id, sums] of this.#steps) fold.#sums(id).planned = sums.planned;
    for (const [id, price] of this.#prices) fold.#prices.set(id, price);
    for (const [id, model] of this.#stepModels) fold.#stepModels.set(id, model);
    for (const model of this.#models.keys()) fold.#modelSums(model);
    return RunFold.#into(fold, this.#state);
  }

  static #into(fold: RunFold, state: RunState): RunFold {
    for (const [id, entry] of state.instances) {
      const copy = fold.#lean.copy(entry);
      fold.#state.instances.set(id, copy);
      fold.#count(id, undefined, copy);
    }
    return fold;
  }

  /** Folds one record in: O(1). */
  apply(record: JournalRecord): void {
    const instance = (record as { instance?: unknown }).instance;
    if (!FOLDED.has(record.type) || typeof instance !== 'string') return;
    const entry = this.#state.instances.get(instance);
    // What the instance added to the sums before the record, read before the record changes it.
    const before = entry && this.#lineOf(instance, entry);
    if (!entry) this.#state.instances.set(instance, newEntry());
    applyRecord(this.#state, record);
    const after = this.#state.instances.get(instance)!;
    this.#lean.slim(after);
    this.#count(instance, before, after);
  }

  /** An instance's status as the report says it; not_started for one no record names. */
  status(id: string): ReportStatus {
    const entry = this.#state.instances.get(id);
    return entry ? statusOf(entry) : 'not_started';
  }

  /** Counts by status, of a step or of the run, with the plan's instances no record names counted not started. */
  counts(step?: string): Record<ReportStatus, number> {
    const out = emptyCounts();
    for (const [id, sums] of this.#steps) {
      if (step !== undefined && id !== step) continue;
      for (const s of REPORT_STATUSES) out[s] += sums.counts[s];
      out.not_started += Math.max(0, sums.planned - sums.seen);
    }
    return out;
  }

  /** The steps the fold knows: the plan's, and any a record named. */
  steps(): string[] {
    return [...this.#steps.keys()];
  }

  /** nsfw attempts re-rolled with a new seed, of a step or of the run: the report's rerolls. */
  rerolls(step?: string): number {
    return step === undefined ? this.#rerolls : (this.#steps.get(step)?.rerolls ?? 0);
  }

  /** The money of a step, or of the run. */
  money(step?: string): FoldMoney {
    const money = step === undefined ? this.#total : this.#steps.get(step)?.money;
    return { ...(money ?? emptyMoney()) };
  }

  /**
   * The sums by model, as the report's table by model has them: each instance under its intent's
   * model (else its step's), and the plan's instances no record names counted not started under
   * their step's model. The plan's models first, in the plan's order, then any other as first met.
   */
  models(): { name: string; counts: Record<ReportStatus, number>; money: FoldMoney }[] {
    const missing = new Map<string, number>();
    for (const [id, sums] of this.#steps) {
      const model = this.#stepModels.get(id) ?? 'unknown';
      const left = Math.max(0, sums.planned - sums.seen);
      if (left > 0 || this.#stepModels.has(id)) missing.set(model, (missing.get(model) ?? 0) + left);
    }
    const out: { name: string; counts: Record<ReportStatus, number>; money: FoldMoney }[] = [];
    for (const [name, sums] of this.#models) {
      const counts = { ...sums.counts };
      counts.not_started += missing.get(name) ?? 0;
      missing.delete(name);
      out.push({ name, counts, money: { ...sums.money } });
    }
    for (const [name, left] of missing) out.push({ name, counts: { ...emptyCounts(), not_started: left }, money: emptyMoney() });
    return out;
  }

  /** In JSON (a `--json-logs` line): where each step stands, and the money, never the instances. */
  toJSON(): { steps: Record<string, Record<ReportStatus, number>>; money: FoldMoney } {
    return { steps: Object.fromEntries(this.steps().map((id) => [id, this.counts(id)])), money: this.money() };
  }

  #sums(step: string): StepSums {
    let sums = this.#steps.get(step);
    if (!sums) this.#steps.set(step, (sums = { planned: 0, counts: emptyCounts(), seen: 0, money: emptyMoney(), rerolls: 0 }));
    return sums;
  }

  #modelSums(model: string): ModelSums {
    let sums = this.#models.get(model);
    if (!sums) this.#models.set(model, (sums = { counts: emptyCounts(), money: emptyMoney() }));
    return sums;
  }

  #lineOf(id: string, entry: InstanceState): Line {
    const step = stepOfInstanceId(id);
    return lineOf(entry, this.#prices.get(step), this.#stepModels.get(step));
  }

  /** Puts an instance's status and money in the sums in place of what it added `before` (nothing: new to the fold). */
  #count(id: string, before: Line | undefined, entry: InstanceState | undefined): void {
    if (!entry) return;
    const line = this.#lineOf(id, entry);
    const sums = this.#sums(stepOfInstanceId(id));
    if (before) {
      sums.counts[before.status]--;
      sums.rerolls -= before.rerolls;
      this.#rerolls -= before.rerolls;
      addLine(sums.money, before, -1);
      addLine(this.#total, before, -1);
      const was = this.#modelSums(before.model);
      was.counts[before.status]--;
      addLine(was.money, before, -1);
    } else sums.seen++;
    sums.counts[line.status]++;
    sums.rerolls += line.rerolls;
    this.#rerolls += line.rerolls;
    addLine(sums.money, line, 1);
    addLine(this.#total, line, 1);
    const model = this.#modelSums(line.model);
    model.counts[line.status]++;
    addLine(model.money, line, 1);
  }
}

/** An instance's part of the sums: the figures of its report line (cost-report.ts lineOf). */
function lineOf(entry: InstanceState, priceUsd: number | null | undefined, stepModel: string | undefined): Line {
  const money = moneyOf(entry, priceUsd);
  return {
    status: statusOf(entry),
    model: entry.intent?.model ?? stepModel ?? 'unknown',
    estimatedUsd: jsonUsd(money.estimatedUsd),
    refundedUsd: jsonUsd(money.refundedUsd),
    netUsd: jsonUsd(money.chargedUsd),
    unknownUsd: jsonUsd(money.unknownUsd),
    unpriced: money.unpricedAttempts > 0 ? 1 : 0,
    rerolls: entry.rerolls,
  };
}

/*
 * A fold keeps of an attempt's records only the fields its status and money are read from
 * (statusOf, moneyOf, settleAttempt): the intent's price and model, the final status and the cost
 * the service reported, and whether there was a submission or a failure. A live run folds every
 * record it journals, in its own fold and in each view's. Holding the whole records there (keys,
 * body hashes, request ids, output URLs) for every instance made most of a large run's memory.
 * The stand-ins below take the records' place inside a fold only, which never hands them out; a
 * stand-in has no `type`, which tells it from a record.
 */

/** Kept of a submission: that there was one. */
const SENT = Object.freeze({}) as Submission;
/** Kept of a failure: that there was one. */
const FAILED = Object.freeze({}) as JournalRecordOf<'failed'>;

/**
 * A new instance's state in a fold, with every field a folded record sets on most instances
 * already in its first shape: V8 keeps such fields in the object, and stores a field added later
 * apart, in an array of its own.
 */
function newEntry(): InstanceState {
  return {
    intent: undefined,
    submission: undefined,
    submittedAt: undefined,
    final: undefined,
    failed: undefined,
    rerolls: 0,
    retries: 0,
    reusedFrom: undefined,
    reusedInput: undefined,
    suspect: undefined,
    earlier: undefined,
  };
}

/** One fold's stand-ins, each shared by the instances it stands for (most of a run's have one price and model). */
class LeanRecords {
  /** By model, then by price: found without building a key for each record. */
  readonly #intents = new Map<string, Map<number | null | undefined, JournalRecordOf<'intent'>>>();
  readonly #finals = new Map<TerminalStatus, JournalRecordOf<'status'>>();

  /**
   * A fold's own copy of a replayed instance (later records change it, never the original),
   * without the files and uploads that status and money never read.
   */
  copy(entry: InstanceState): InstanceState {
    const copy = newEntry();
    copy.intent = entry.intent;
    copy.submission = entry.submission;
    copy.final = entry.final;
    copy.failed = entry.failed;
    copy.rerolls = entry.rerolls;
    copy.retries = entry.retries;
    copy.reusedFrom = entry.reusedFrom;
    copy.suspect = entry.suspect;
    copy.earlier = entry.earlier && { ...entry.earlier };
    this.slim(copy);
    return copy;
  }

  /** Puts stand-ins in place of the records an instance's state holds, and drops what no fold reads. */
  slim(entry: InstanceState): void {
    const { intent, submission, final, failed } = entry;
    if (intent && 'type' in intent) entry.intent = this.#intent(intent.priceUsd, intent.model);
    if (submission && submission !== SENT) entry.submission = SENT;
    if (final && 'type' in final) entry.final = this.#final(final);
    if (failed && failed !== FAILED) entry.failed = FAILED;
    if (entry.submittedAt !== undefined) entry.submittedAt = undefined;
    if (entry.reusedInput !== undefined) entry.reusedInput = undefined;
  }

  #intent(priceUsd: number | null | undefined, model: string): JournalRecordOf<'intent'> {
    let prices = this.#intents.get(model);
    if (!prices) this.#intents.set(model, (prices = new Map()));
    let lean = prices.get(priceUsd);
    if (!lean) prices.set(priceUsd, (lean = Object.freeze({ priceUsd, model }) as JournalRecordOf<'intent'>));
    return lean;
  }

  #final(final: JournalRecordOf<'status'>): JournalRecordOf<'status'> {
    if (final.actualCostUsd !== undefined) return { status: final.status, actualCostUsd: final.actualCostUsd } as JournalRecordOf<'status'>;
    let lean = this.#finals.get(final.status);
    if (!lean) this.#finals.set(final.status, (lean = Object.freeze({ status: final.status }) as JournalRecordOf<'status'>));
    return lean;
  }
}
