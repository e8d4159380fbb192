/** The run state a resume rebuilds from journal records, and what it decides per instance. */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { moneyOf } from '../../../src/run/attempt/attempt-money.js';
import { encodeLine } from '../../../src/run/journal/journal.js';
import type { JournalRecord } from '../../../src/run/journal/journal-records.js';
import { applyRecord, emptyRunState, replayFile, resumeAction } from '../../../src/run/journal/run-state.js';
import { cleanTemps, tempDir } from '../runner-helpers.js';

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

describe('a lean replay (the readers of outcomes)', () => {
  it("keeps each intent's journaled price, so its money equals a whole replay's", async () => {
    const prices: [string, number | null][] = [
      ['ads[n=1]', 0.0865],
      ['ads[n=2]', 0.0438],
      ['ads[n=3]', null],
    ];
    const records: JournalRecord[] = prices.map(([instance, priceUsd]) => ({
      type: 'intent',
      instance,
      model: 'marketing-image',
      idempotencyKey: null,
      bodyHash: HASH,
      priceUsd,
    }));
    const path = join(tempDir(), 'journal.jsonl');
    writeFileSync(path, Buffer.concat(records.map((r) => encodeLine(JSON.stringify(r)))));
    const whole = await replayFile(path);
    const lean = await replayFile(path, { lean: true });
    for (const [id] of prices) {
      const entry = lean.instances.get(id);
      expect(entry, id).toBeDefined();
      // The step's price (null: a step priced per instance) never stands in for the journaled one.
      expect(moneyOf(entry!, null), id).toEqual(moneyOf(whole.instances.get(id)!, null));
    }
    expect(moneyOf(lean.instances.get('ads[n=1]')!, null).unknownUsd).toBe(0.0865);
    expect(moneyOf(lean.instances.get('ads[n=3]')!, null).unpricedAttempts).toBe(1);
    cleanTemps();
  });
});
