/** The run state a resume rebuilds from journal records, and what it decides per instance. */
import { describe, expect, it } from 'vitest';
import type { JournalRecord } from '../../../src/run/journal/journal-records.js';
import { applyRecord, emptyRunState, resumeAction } from '../../../src/run/journal/run-state.js';

const HASH = 'a'.repeat(64);
const ID = 'ads[n=1]';

function stateOf(records: JournalRecord[]): ReturnType<typeof emptyRunState> {
  const state = emptyRunState();
  for (const record of records) applyRecord(state, record);
  return state;
}

const keylessIntent: JournalRecord = {
  type: 'intent',
  instance: ID,
  model: 'marketing-image',
  idempotencyKey: null,
  bodyHash: HASH,
  at: 1,
};
const keyedIntent: JournalRecord = { type: 'intent', instance: ID, model: 'character-sheet', idempotencyKey: 'k-1', bodyHash: HASH, at: 1 };

describe('resume decisions', () => {
  it('a keyless intent without an answer is unknown; with a keyed one it is resent with the same key', () => {
    expect(resumeAction(stateOf([keylessIntent]).instances.get(ID), false)).toEqual({ kind: 'unknown' });
    expect(resumeAction(stateOf([keyedIntent]).instances.get(ID), true)).toEqual({ kind: 'resubmit_same_key', key: 'k-1' });
  });

  it('an intent the service refused before creating anything (refused) is sent again as new', () => {
    const state = stateOf([keylessIntent, { type: 'refused', instance: ID, code: 'unauthorized', at: 2 }]);
    expect(resumeAction(state.instances.get(ID), false)).toEqual({ kind: 'fresh' });
  });

  it('a refused record never undoes an answer: a submitted or final instance stays as it was', () => {
    const submitted: JournalRecord = { type: 'submitted', instance: ID, handle: { kind: 'request', requestId: 'r-1' }, at: 2 };
    const refused: JournalRecord = { type: 'refused', instance: ID, code: 'unauthorized', at: 3 };
    expect(resumeAction(stateOf([keylessIntent, submitted, refused]).instances.get(ID), false)).toEqual({
      kind: 'reattach',
      submission: { kind: 'request', requestId: 'r-1' },
    });
    const final: JournalRecord = { type: 'status', instance: ID, status: 'completed', outputs: [], at: 4 };
    expect(resumeAction(stateOf([keylessIntent, submitted, final, refused]).instances.get(ID), false)).toEqual({
      kind: 'done',
      status: 'completed',
    });
  });
});
