// The settlement table (src/run/attempt/settle.ts), row by row against the money rules in words:
// a price is given back only when the service provably charged nothing (never sent, refused
// before creating anything) or refunds it (failed; nsfw and canceled as genpipe reads the
// service); it is kept for a charge, and for an attempt that may have reached the service.
import { describe, expect, it } from 'vitest';
import { GenpipeError } from '../../../src/api/errors.js';
import type { RunEvent } from '../../../src/run/events.js';
import type { AttemptFate, FateKind } from '../../../src/run/attempt/fate.js';
import { isFate } from '../../../src/run/attempt/fate.js';
import { moneyOfFate, SETTLEMENT, settle } from '../../../src/run/attempt/settle.js';
import { Spend } from '../../../src/run/attempt/spend.js';
import type { JournalRecord } from '../../../src/run/journal/journal-records.js';
import type { InstanceState } from '../../../src/run/journal/run-state.js';
import type { RunEffects } from '../../../src/run/run-context.js';
import type { StepPlan } from '../../../src/plan/plan.js';

/** One fate of each kind, and what the money rules say becomes of its price, with the reason. */
const CASES: Record<FateKind, { fate: AttemptFate; money: 'keep' | 'refund'; why: string }[]> = {
  completed: [{ fate: { kind: 'completed' }, money: 'keep', why: 'charged when accepted' }],
  refunded: [
    { fate: { kind: 'refunded', status: 'failed' }, money: 'refund', why: 'a failed generation is refunded' },
    { fate: { kind: 'refunded', status: 'nsfw' }, money: 'refund', why: 'nsfw read as refunded' },
    { fate: { kind: 'refunded', status: 'canceled' }, money: 'refund', why: 'canceled read as refunded' },
  ],
  rerolled: [{ fate: { kind: 'rerolled', attempt: 1, seed: 7 }, money: 'refund', why: 'the nsfw attempt is refunded' }],
  remade: [
    { fate: { kind: 'remade', attempt: 1, seed: 7, round: 1 }, money: 'keep', why: 'the rejected result was charged' },
    { fate: { kind: 'remade', attempt: 2, retry: 1, round: 1, judged: 'abc' }, money: 'keep', why: 'the rejected result was charged' },
  ],
  unknown: [{ fate: { kind: 'unknown', message: 'm' }, money: 'keep', why: 'it may have been charged' }],
  not_sent: [
    { fate: { kind: 'not_sent' }, money: 'refund', why: 'nothing reached the service' },
    { fate: { kind: 'not_sent', refused: 'insufficient_credits' }, money: 'refund', why: 'refused before anything was created' },
  ],
  left_for_resume: [{ fate: { kind: 'left_for_resume', code: 'network', message: 'm' }, money: 'keep', why: 'it may have arrived' }],
  in_flight: [{ fate: { kind: 'in_flight' }, money: 'keep', why: 'sent, not final' }],
  protocol: [
    { fate: { kind: 'protocol', keyed: true, message: 'm' }, money: 'refund', why: 'a keyed submit is resent with its key, paying once' },
    { fate: { kind: 'protocol', keyed: false, message: 'm' }, money: 'keep', why: 'a keyless submit may have been charged' },
  ],
  no_model_access: [
    { fate: { kind: 'no_model_access', sent: true }, money: 'refund', why: 'refused before anything was created' },
    { fate: { kind: 'no_model_access', sent: false }, money: 'refund', why: 'never sent' },
  ],
  refused: [{ fate: { kind: 'refused', code: 'bad_request', message: 'm' }, money: 'refund', why: 'refused before processing' }],
  failed_here: [{ fate: { kind: 'failed_here', code: 'not_found', message: 'm' }, money: 'keep', why: 'sent, and charged' }],
  files_missing: [
    {
      fate: { kind: 'files_missing', code: 'network', message: 'm', permanent: false },
      money: 'keep',
      why: 'completed',
    },
  ],
  upload_pending: [{ fate: { kind: 'upload_pending', message: 'm' }, money: 'keep', why: 'completed' }],
  upload_conflict: [
    {
      fate: { kind: 'upload_conflict', keys: ['s3://b/k'] },
      money: 'keep',
      why: 'completed: the file was made and paid for, only its delivery to that key was refused',
    },
  ],
  adopted: [
    {
      fate: { kind: 'adopted', submission: { kind: 'request', requestId: 'req-1' } },
      money: 'keep',
      why: 'charged when it was first sent, and counted since as its intent',
    },
  ],
  reused: [{ fate: { kind: 'reused', fromRunId: 'r' }, money: 'keep', why: 'nothing reserved, nothing to give back' }],
  failed_before: [{ fate: { kind: 'failed_before' }, money: 'keep', why: 'settled by an earlier start' }],
  ended_before: [{ fate: { kind: 'ended_before', status: 'nsfw' }, money: 'keep', why: 'settled by an earlier start' }],
  kept: [{ fate: { kind: 'kept', reason: 'r' }, money: 'keep', why: 'the result stays' }],
  interrupted: [
    { fate: { kind: 'interrupted' }, money: 'keep', why: 'it may be in flight' },
    { fate: { kind: 'interrupted', neverSent: true }, money: 'refund', why: 'withdrawn before any worker sent it' },
    { fate: { kind: 'interrupted', canceled: 'canceled on abort' }, money: 'refund', why: 'a cancel the service took' },
  ],
};

const STEP = { id: 'sheets', model: 'character-sheet', priceUsd: 0.05 } as unknown as StepPlan;

/** The effects settle() may touch, recording what it did (an in-memory RunEffects for a pure table). */
function recorder(entry: InstanceState | undefined = undefined) {
  const seen = {
    records: [] as { record: JournalRecord; durable: boolean }[],
    events: [] as RunEvent[],
    calls: [] as string[],
  };
  const fx = {
    state: { instances: new Map(entry ? [['sheets[n=1]', entry]] : []) },
    failures: 0,
    log: (record: JournalRecord, durable = false) => {
      seen.records.push({ record, durable });
      return Promise.resolve();
    },
    emit: (event: RunEvent) => seen.events.push(event),
    noteFailure: () => seen.calls.push('noteFailure'),
    fail: () => seen.calls.push('fail'),
    filesMissing: () => seen.calls.push('filesMissing'),
    uploadPending: () => seen.calls.push('uploadPending'),
    uploadConflict: (_step: unknown, _id: string, keys: readonly string[]) => seen.calls.push(`uploadConflict:${keys.join(',')}`),
    stopRun: (reason: string) => seen.calls.push(`stop:${reason}`),
    protocolAnswer: () => seen.calls.push('protocolAnswer'),
    plan: { loaded: { source: { locate: () => ({ file: 'm.yaml', line: 5, col: 12 }) } } },
    credentialsRefused: () => {
      seen.calls.push('credentials');
      return true;
    },
  } as unknown as RunEffects;
  return { fx, seen };
}

describe('the settlement table', () => {
  it('has a row for every kind of fate, and the cases cover every row', () => {
    expect(Object.keys(SETTLEMENT).sort()).toEqual(Object.keys(CASES).sort());
  });

  for (const [kind, cases] of Object.entries(CASES)) {
    for (const { fate, money, why } of cases) {
      it(`${kind} ${JSON.stringify(fate)}: ${money} (${why})`, async () => {
        expect(isFate(fate)).toBe(true);
        expect(moneyOfFate(fate)).toBe(money);
        // settle() does what the row says with a real reservation of the run's budget.
        const spend = new Spend(1);
        const reservation = spend.reserve(0.05);
        expect(spend.committedUsd).toBe(0.05);
        const { fx } = recorder();
        await settle({ fx, step: STEP, instance: 'sheets[n=1]', reservation }, fate);
        expect(spend.committedUsd).toBe(money === 'refund' ? 0 : 0.05);
      });
    }
  }

  it('journals what a resume must know, synced where losing it would cost', async () => {
    const cases: [AttemptFate, JournalRecord['type'] | undefined, boolean][] = [
      [{ kind: 'rerolled', attempt: 2, seed: 9 }, 'reroll', true],
      [{ kind: 'remade', attempt: 2, seed: 9, round: 3 }, 'reroll', true],
      // A model without a seed: a new attempt, journaled (synced) before its intent and POST.
      [{ kind: 'remade', attempt: 2, retry: 1, round: 3, judged: 'abc' }, 'retry', true],
      [{ kind: 'unknown', message: 'm', forgotten: 'another request' }, 'forgotten', true],
      [{ kind: 'not_sent', refused: 'not_sent' }, 'refused', false],
      [{ kind: 'interrupted', neverSent: true }, 'refused', true],
      [{ kind: 'interrupted', canceled: 'c' }, 'status', true],
      [{ kind: 'unknown', message: 'm' }, undefined, false],
      // Answered as refused, so a resume sends it again, as new (a keyed one with the same key).
      [{ kind: 'protocol', keyed: true, message: 'm' }, 'refused', true],
      [{ kind: 'protocol', keyed: false, message: 'm' }, undefined, false],
      [{ kind: 'no_model_access', sent: true }, 'refused', true],
      [{ kind: 'no_model_access', sent: false }, undefined, false],
      [{ kind: 'completed' }, undefined, false],
    ];
    for (const [fate, type, durable] of cases) {
      const { fx, seen } = recorder();
      await settle({ fx, step: STEP, instance: 'sheets[n=1]' }, fate);
      expect(
        seen.records.map((r) => r.record.type),
        JSON.stringify(fate),
      ).toEqual(type === undefined ? [] : [type]);
      if (type !== undefined) expect(seen.records[0]?.durable).toBe(durable);
    }
  });

  it('applies the failure policies and stops where the fate says', async () => {
    const cases: [AttemptFate, string[]][] = [
      [{ kind: 'refunded', status: 'failed' }, ['noteFailure']],
      [{ kind: 'refused', code: 'bad_request', message: 'm' }, ['fail']],
      [{ kind: 'failed_here', code: 'not_found', message: 'm' }, ['fail']],
      [{ kind: 'files_missing', code: 'c', message: 'm', permanent: true }, ['filesMissing']],
      [{ kind: 'upload_pending', message: 'm' }, ['uploadPending']],
      [{ kind: 'upload_conflict', keys: ['s3://b/k1', 's3://b/k2'] }, ['uploadConflict:s3://b/k1,s3://b/k2']],
      // A conflict and another file left pending: both told, each counted apart.
      [{ kind: 'upload_conflict', keys: ['s3://b/k'], pending: 'm' }, ['uploadConflict:s3://b/k', 'uploadPending']],
      [{ kind: 'not_sent', stop: { reason: 'budget', message: 'm' } }, ['stop:budget']],
      [{ kind: 'in_flight', credentials: new GenpipeError('unauthorized', 'no') }, ['credentials']],
      [{ kind: 'protocol', keyed: true, message: 'm' }, ['protocolAnswer']],
      [{ kind: 'protocol', keyed: false, message: 'm' }, ['protocolAnswer']],
      [{ kind: 'completed' }, []],
    ];
    for (const [fate, calls] of cases) {
      const { fx, seen } = recorder();
      await settle({ fx, step: STEP, instance: 'sheets[n=1]' }, fate);
      expect(seen.calls, fate.kind).toEqual(calls);
    }
  });

  it('a refund is given once, however often it is settled', async () => {
    const spend = new Spend(undefined);
    const reservation = spend.reserve(0.05);
    const { fx } = recorder();
    await settle({ fx, step: STEP, instance: 'sheets[n=1]', reservation }, { kind: 'refunded', status: 'failed' });
    await settle({ fx, step: STEP, instance: 'sheets[n=1]', reservation }, { kind: 'refunded', status: 'failed' });
    expect(spend.committedUsd).toBe(0);
  });
});
