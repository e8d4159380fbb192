/**
 * The ledger of attempts: the one place where what became of an attempt (fate.ts) is settled. For
 * each kind of fate one row says what happens to the attempt's reserved price (kept or refunded),
 * which record is journaled and which event is told; a few rows also apply a failure policy or
 * stop the run. Nothing else in the run refunds a reservation (a lint rule holds that), so "where
 * is an attempt's money decided" has one answer: this table. Nothing here counts instances: the
 * summary's counts are the run's fold of the journal (run-fold.ts), as the report's are.
 *
 * Money rules (service spec §8): a submit is charged when it is accepted and refunded when the
 * generation fails. genpipe also reads nsfw and canceled results as refunded: the spec states
 * refunds only for failed generations and agent turns, and the service's ledger agrees with that
 * reading in every test against the emulator. Anything that provably never reached the service, or
 * that the service refused before creating it, was never charged. An attempt whose fate is unknown
 * keeps its price: it may have been charged.
 */
import type { StepPlan } from '../../plan/plan.js';
import type { RunEvent } from '../events.js';
import type { JournalRecord } from '../journal/journal-records.js';
import type { RunEffects } from '../run-context.js';
import type { AttemptFate, FateKind, FateOf } from './fate.js';
import { toldPrice } from './attempt-money.js';
import type { Reservation } from './spend.js';
import { noModelAccessSentence } from './step-refusals.js';

/** The attempt being settled: its instance, and the price it holds (none before it reserved one). */
export interface Settling {
  readonly fx: RunEffects;
  readonly step: StepPlan;
  readonly instance: string;
  readonly reservation?: Reservation | undefined;
}

interface Row<K extends FateKind> {
  /** What becomes of the attempt's reserved price. */
  money: 'keep' | 'refund' | ((fate: FateOf<K>) => 'keep' | 'refund');
  /** The record journaled, and whether it is synced before the run goes on. */
  record?: (fate: FateOf<K>, s: Settling) => { record: JournalRecord; durable: boolean; bestEffort?: boolean } | undefined;
  event?: (fate: FateOf<K>, s: Settling) => RunEvent | undefined;
  /** A policy the fate sets off: failure counting, a stop of the run. */
  then?: (fate: FateOf<K>, s: Settling) => void;
}

/** The attempt's price: what it reserved, else what its intent journaled (attempt-money.ts toldPrice). */
const priceHeld = (s: Settling): number | undefined => s.reservation?.priceUsd ?? toldPrice(s.fx.state.instances, s.instance, s.step);

/** A reused result's event, told with a fate that says more of it (an upload pending, a conflict). */
const reusedEvent = (fate: { reusedFrom?: string | undefined }, s: Settling): RunEvent | undefined =>
  fate.reusedFrom === undefined
    ? undefined
    : { type: 'instance_reused', step: s.step.id, instance: s.instance, fromRunId: fate.reusedFrom };

const leftForResume = (message: string): string => `${message} (left for a resume)`;

export const SETTLEMENT: { readonly [K in FateKind]: Row<K> } = {
  completed: { money: 'keep' },
  // Failed, nsfw and canceled requests are refunded (see the file comment on nsfw and canceled).
  refunded: {
    money: 'refund',
    then: (_fate, s) => s.fx.noteFailure(s.step, s.instance),
  },
  rerolled: {
    money: 'refund',
    record: (fate, s) => ({
      record: { type: 'reroll', instance: s.instance, attempt: fate.attempt, seed: fate.seed },
      durable: true,
    }),
    event: (fate, s) => ({
      type: 'instance_rerolled',
      step: s.step.id,
      instance: s.instance,
      attempt: fate.attempt,
      seed: fate.seed,
      estimatedUsd: priceHeld(s),
    }),
  },
  // The completed attempt stays paid for: the remake is a new attempt with its own price.
  remade: {
    money: 'keep',
    record: (fate, s) => ({
      record:
        fate.seed === undefined
          ? {
              type: 'retry',
              instance: s.instance,
              attempt: fate.retry,
              previous: 'rejected',
              round: fate.round,
              ...(fate.judged === undefined ? {} : { judged: fate.judged }),
            }
          : { type: 'reroll', instance: s.instance, attempt: fate.attempt, seed: fate.seed, round: fate.round },
      durable: true,
    }),
  },
  unknown: {
    money: 'keep',
    // A status answer about another request: journaled, so a resume does not follow it again.
    record: (fate, s) =>
      fate.forgotten === undefined
        ? undefined
        : { record: { type: 'forgotten', instance: s.instance, why: fate.forgotten }, durable: true },
    event: (fate, s) => ({ type: 'instance_unknown', step: s.step.id, instance: s.instance, message: fate.message }),
  },
  not_sent: {
    money: 'refund',
    // Refused by the credentials: counted where the run's stop is recorded (RunEffects.credentialsRefused).
    record: (fate, s) =>
      fate.refused === undefined ? undefined : { record: { type: 'refused', instance: s.instance, code: fate.refused }, durable: false },
    then: (fate, s) => {
      if (fate.credentials) s.fx.credentialsRefused(fate.credentials);
      if (fate.stop) s.fx.stopRun(fate.stop.reason, fate.stop.message);
    },
  },
  // It may have reached the service (a keyed submit failing in transit): its price stays counted,
  // as a resume counts its unanswered intent, so the budget never forgets a possible charge.
  left_for_resume: {
    money: 'keep',
    event: (fate, s) => ({
      type: 'instance_failed',
      step: s.step.id,
      instance: s.instance,
      code: fate.code,
      message: leftForResume(fate.message),
    }),
  },
  in_flight: {
    money: 'keep',
    event: (fate, s) =>
      fate.failure && {
        type: 'instance_failed',
        step: s.step.id,
        instance: s.instance,
        code: fate.failure.code,
        message: leftForResume(fate.failure.message),
      },
    then: (fate, s) => {
      if (fate.credentials) s.fx.credentialsRefused(fate.credentials);
    },
  },
  // Keyed: nothing is counted, and the refused record has a resume send it again with its key.
  // Keyless: it may have spent, so it is unknown, its price kept. Either way it counts towards the
  // run's stop after three such answers in a row.
  protocol: {
    money: (fate) => (fate.keyed ? 'refund' : 'keep'),
    record: (fate, s) => (fate.keyed ? { record: { type: 'refused', instance: s.instance, code: 'protocol' }, durable: true } : undefined),
    event: (fate, s) =>
      fate.keyed
        ? { type: 'instance_failed', step: s.step.id, instance: s.instance, code: 'protocol', message: leftForResume(fate.message) }
        : { type: 'instance_unknown', step: s.step.id, instance: s.instance, message: fate.message },
    then: (_fate, s) => s.fx.protocolAnswer(),
  },
  // Never charged; pending, so a resume sends the step once the account has the model. Said once.
  no_model_access: {
    money: 'refund',
    record: (fate, s) =>
      fate.sent ? { record: { type: 'refused', instance: s.instance, code: 'model_access' }, durable: true } : undefined,
    event: (fate, s) =>
      fate.sent
        ? {
            type: 'instance_failed',
            step: s.step.id,
            instance: s.instance,
            code: 'model_access',
            message: noModelAccessSentence(s.fx, s.step),
          }
        : undefined,
  },
  // fail() counts, journals and tells the failure, and applies the failure policies.
  refused: { money: 'refund', then: (fate, s) => s.fx.fail(s.step, s.instance, fate.code, fate.message) },
  failed_here: { money: 'keep', then: (fate, s) => s.fx.fail(s.step, s.instance, fate.code, fate.message) },
  // Counted as its status, as the report counts it; the files it lacks are said apart.
  files_missing: {
    money: 'keep',
    then: (fate, s) => s.fx.filesMissing(s.step, s.instance, fate.code, fate.message, fate.permanent),
  },
  upload_pending: {
    money: 'keep',
    event: reusedEvent,
    then: (fate, s) => s.fx.uploadPending(s.step, s.instance, fate.message),
  },
  // Completed and paid for: the object another run left at the key is kept, counted apart (exit 1).
  upload_conflict: {
    money: 'keep',
    event: reusedEvent,
    then: (fate, s) => {
      s.fx.uploadConflict(s.step, s.instance, fate.keys);
      if (fate.pending !== undefined) s.fx.uploadPending(s.step, s.instance, fate.pending);
    },
  },
  // Charged when it was first sent, and counted since as its intent: kept, counted when it ends.
  adopted: {
    money: 'keep',
    record: (fate, s) => ({
      record: { type: 'submitted', instance: s.instance, handle: fate.submission, adopted: true },
      durable: true,
    }),
  },
  reused: {
    money: 'keep',
    event: (fate, s) => ({ type: 'instance_reused', step: s.step.id, instance: s.instance, fromRunId: fate.fromRunId }),
  },
  failed_before: {
    money: 'keep',
    then: (_fate, s) => {
      s.fx.failures++;
    },
  },
  ended_before: { money: 'keep' },
  // Counted where it stands (the driver finishes it as it was); the run ends failed, one line each.
  kept: {
    money: 'keep',
    event: (fate, s) => ({ type: 'instance_skipped', step: s.step.id, instance: s.instance, reason: fate.reason }),
    then: (_fate, s) => {
      s.fx.notRemade++;
    },
  },
  interrupted: {
    money: (fate) => (fate.neverSent || fate.canceled !== undefined ? 'refund' : 'keep'),
    record: (fate, s) => {
      // Withdrawn from the queue before any worker began to send it: never sent, and journaled so,
      // so a resume sends it as new, never as unknown. Best effort: the run is stopping.
      if (fate.neverSent) return { record: { type: 'refused', instance: s.instance, code: 'not_sent' }, durable: true, bestEffort: true };
      if (fate.canceled !== undefined)
        return { record: { type: 'status', instance: s.instance, status: 'canceled', outputs: [], error: fate.canceled }, durable: true };
      return undefined;
    },
    event: (fate, s) =>
      fate.canceled === undefined
        ? undefined
        : {
            type: 'instance_finished',
            step: s.step.id,
            instance: s.instance,
            status: 'canceled',
            estimatedUsd: priceHeld(s),
            error: fate.canceled,
          },
  },
};

/** What the row for `fate` does with the attempt's money (for the table's test and for settle). */
export function moneyOfFate(fate: AttemptFate): 'keep' | 'refund' {
  const row = SETTLEMENT[fate.kind] as Row<FateKind>;
  return typeof row.money === 'function' ? row.money(fate as never) : row.money;
}

/** Settles an attempt's fate by its row: money, record, event and policy, in that order. */
export async function settle(s: Settling, fate: AttemptFate): Promise<void> {
  const row = SETTLEMENT[fate.kind] as Row<FateKind>;
  const f = fate as never;
  if (moneyOfFate(fate) === 'refund') s.reservation?.refund();
  const written = row.record?.(f, s);
  if (written) {
    const logged = s.fx.log(written.record, written.durable);
    await (written.bestEffort ? logged.catch(() => undefined) : logged);
  }
  const event = row.event?.(f, s);
  if (event) s.fx.emit(event);
  row.then?.(f, s);
}
