// `--adopt INSTANCE=ID`, checked against the plan and the journal before anything is written or
// sent: each refusal is one sentence (exit 2), and only an unanswered submit is adopted.
import { describe, expect, it } from 'vitest';
import { GenpipeError } from '../../../src/api/errors.js';
import { checkAdoptions, parseAdoption } from '../../../src/run/attempt/adopt.js';
import { applyRecord, emptyRunState } from '../../../src/run/journal/run-state.js';
import type { JournalRecord } from '../../../src/run/journal/journal-records.js';
import type { Plan } from '../../../src/plan/plan.js';

const HASH = 'a'.repeat(64);
const PLAN = { steps: [{ id: 'ads', model: 'marketing-image' }] } as unknown as Plan;
const intent = (instance: string): JournalRecord => ({
  type: 'intent',
  instance,
  model: 'marketing-image',
  idempotencyKey: null,
  bodyHash: HASH,
});

function state() {
  const s = emptyRunState();
  const records: JournalRecord[] = [
    intent('ads[n=1]'),
    intent('ads[n=2]'),
    { type: 'submitted', instance: 'ads[n=2]', handle: { kind: 'request', requestId: 'r2' } },
    intent('ads[n=3]'),
    { type: 'submitted', instance: 'ads[n=3]', handle: { kind: 'request', requestId: 'r3' } },
    { type: 'status', instance: 'ads[n=3]', status: 'completed', outputs: [] },
  ];
  for (const r of records) applyRecord(s, r);
  return s;
}

describe('--adopt INSTANCE=REQUEST_ID', () => {
  it('takes the id after the last "=" (an instance id holds "=" itself), and refuses a malformed pair', () => {
    expect(parseAdoption('ads[n=1]=3f2a-9c')).toEqual({ instance: 'ads[n=1]', id: '3f2a-9c' });
    for (const bad of ['ads', 'ads[n=1]=', '=r1', 'ads[n=1]=r 1', "ads[n=1]='r1'"])
      expect(() => parseAdoption(bad), bad).toThrow(/^--adopt takes INSTANCE=REQUEST_ID/);
  });

  it('adopts an unanswered submit as the request it names', () => {
    expect([...checkAdoptions(PLAN, state(), [{ instance: 'ads[n=1]', id: 'r1' }])]).toEqual([
      ['ads[n=1]', { kind: 'request', requestId: 'r1' }],
    ]);
  });

  it('refuses, with one sentence, every instance that has no unanswered submit', () => {
    const cases: [string, RegExp][] = [
      ['ads[n=2]', /the journal already holds the request id of its submit/],
      ['ads[n=3]', /the instance already ended completed/],
      ['ads[n=4]', /the run's plan has no instance of that id/],
      ['other[n=1]', /the run's plan has no instance of that id/],
    ];
    for (const [instance, said] of cases) {
      let error: unknown;
      try {
        checkAdoptions(PLAN, state(), [{ instance, id: 'rx' }]);
      } catch (e) {
        error = e;
      }
      expect(error, instance).toBeInstanceOf(GenpipeError);
      expect((error as GenpipeError).code).toBe('invalid_input');
      expect((error as Error).message).toMatch(said);
      expect((error as Error).message).toMatch(/\. Nothing was sent\.$/);
    }
    expect(() =>
      checkAdoptions(PLAN, state(), [
        { instance: 'ads[n=1]', id: 'r1' },
        { instance: 'ads[n=1]', id: 'r9' },
      ]),
    ).toThrow(/named twice/);
  });
});
