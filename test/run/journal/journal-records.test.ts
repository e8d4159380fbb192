// The hand check of the records a run writes most (surelyValidRecord) against the schema it
// stands in for: it may send a valid record on to zod, but it must never pass one that zod
// refuses. Each field of each record is replaced by values of every kind and removed, and the
// two are compared; a mismatch names the record.
import { describe, expect, it } from 'vitest';
import { JournalRecord, surelyValidRecord } from '../../../src/run/journal/journal-records.js';

const HASH = 'a'.repeat(64);
const valid: Record<string, Record<string, unknown>> = {
  intent: {
    type: 'intent',
    instance: 's[seed=1]',
    model: 'character-sheet',
    idempotencyKey: 'gp2-1',
    bodyHash: HASH,
    priceUsd: 0.05,
    at: 5,
  },
  keyless: { type: 'intent', instance: 's[seed=1]', model: 'speak', idempotencyKey: null, bodyHash: HASH, priceUsd: null },
  olderJournal: { type: 'intent', instance: 's[seed=1]', model: 'speak', idempotencyKey: null, bodyHash: HASH },
  submitted: { type: 'submitted', instance: 's[seed=1]', handle: { kind: 'request', requestId: 'r-1' }, at: 6 },
  status: {
    type: 'status',
    instance: 's[seed=1]',
    status: 'completed',
    outputs: [{ url: 'http://127.0.0.1/cdn/a.png', name: 'image-0', accept: ['image/png'], contentType: 'image/png' }],
    result: { request_id: 'r-1', images: [{ url: 'http://127.0.0.1/cdn/a.png' }] },
    durationMs: 57,
    actualCostUsd: 0.25,
    error: 'none',
    at: 7,
  },
  downloaded: { type: 'downloaded', instance: 's[seed=1]', output: 0, path: 'outputs/s/a.png', sha256: HASH, size: 1387, at: 8 },
};

/** Values of every kind a field could be given by mistake. */
const KINDS: unknown[] = [
  undefined,
  null,
  '',
  'x',
  'completed',
  'request',
  HASH,
  HASH.toUpperCase(),
  '/abs',
  'a/../b',
  'a\\b',
  'a\0b',
  0,
  -1,
  1.5,
  2 ** 53,
  Number.NaN,
  Number.POSITIVE_INFINITY,
  true,
  [],
  [1],
  ['x'],
  [undefined],
  {},
  { url: '' },
  { url: 'u' },
  { kind: 'request', requestId: '' },
  { kind: 'job_set', jobSetId: 'j' },
  Object.create(null),
  new Date(0),
];

const show = (value: unknown): string => (typeof value === 'object' && value !== null ? JSON.stringify(value) : String(value));

/** Every record made by replacing one field (nested ones included) with each kind of value. */
function* mutations(record: Record<string, unknown>, path: string[] = []): Generator<[string, Record<string, unknown>]> {
  for (const key of Object.keys(record)) {
    for (const value of KINDS) yield [`${[...path, key].join('.')} = ${show(value)}`, { ...record, [key]: value }];
    const { [key]: _removed, ...rest } = record;
    yield [`${[...path, key].join('.')} removed`, rest];
    const inner = record[key];
    if (Array.isArray(inner) && typeof inner[0] === 'object') {
      for (const [label, mutated] of mutations(inner[0] as Record<string, unknown>, [...path, key, '0']))
        yield [label, { ...record, [key]: [mutated] }];
      // eslint-disable-next-line no-sparse-arrays -- the hole is the mutation under test
      yield [`${[...path, key].join('.')} with a hole`, { ...record, [key]: [inner[0], , inner[0]] }];
    } else if (inner !== null && typeof inner === 'object' && !Array.isArray(inner)) {
      for (const [label, mutated] of mutations(inner as Record<string, unknown>, [...path, key]))
        yield [label, { ...record, [key]: mutated }];
    }
  }
}

describe('surelyValidRecord', () => {
  it('passes the valid records a run writes, each of which the schema accepts too', () => {
    for (const [name, record] of Object.entries(valid)) {
      expect(JournalRecord.safeParse(record).success, name).toBe(true);
      expect(surelyValidRecord(record), name).toBe(true);
    }
  });

  it('never passes a record the schema refuses, whatever one field is changed to', () => {
    let refused = 0;
    let checked = 0;
    for (const [name, record] of Object.entries(valid)) {
      for (const [label, mutated] of mutations(record)) {
        checked++;
        const zod = JournalRecord.safeParse(mutated).success;
        if (!zod) refused++;
        if (!zod && surelyValidRecord(mutated)) expect.fail(`${name}: ${label} passed the hand check, and the schema refuses it`);
      }
    }
    // The mutations are mostly refusals, so the comparison has teeth.
    expect(checked).toBeGreaterThan(1_000);
    expect(refused / checked).toBeGreaterThan(0.5);
  });

  it('sends every other record type, and other handle kinds, on to the schema', () => {
    expect(surelyValidRecord({ type: 'run_started', runId: 'r', pipeline: 'p', planHash: 'h' })).toBe(false);
    expect(surelyValidRecord({ type: 'failed', instance: 'x', code: 'c', message: 'm' })).toBe(false);
    expect(surelyValidRecord({ ...valid.submitted, handle: { kind: 'job_set', jobSetId: 'j' } })).toBe(false);
  });
});
