// Which outputs of an instance still have to go to its sink, as the journal tells it:
// a `sink_uploaded` record settles the download with the same sha256, a file made again
// (a re-roll) is pending again, and the record is a journal record like any other.
import { describe, expect, it } from 'vitest';
import { JournalRecord, type JournalRecordOf } from '../../src/run/journal/journal-records.js';
import { applyRecord, emptyRunState, pendingSinkUploads, type InstanceState } from '../../src/run/journal/run-state.js';

const hash = (c: string): string => c.repeat(64);
const downloaded = (output: number, sha: string): JournalRecordOf<'downloaded'> => ({
  type: 'downloaded',
  instance: 'a',
  output,
  path: `outputs/s/a+${output}.png`,
  sha256: sha,
  size: 10,
});
const uploaded = (output: number, sha: string): JournalRecordOf<'sink_uploaded'> => ({
  type: 'sink_uploaded',
  instance: 'a',
  output,
  bucket: 'b',
  key: `p/s/a+${output}.png`,
  size: 10,
  sha256: sha,
  etag: 'e',
});

describe('pending sink uploads', () => {
  it('are the downloads without a sink_uploaded record of the same bytes, in output order', () => {
    const state = emptyRunState();
    for (const record of [downloaded(1, hash('b')), downloaded(0, hash('a')), uploaded(1, hash('b'))])
      applyRecord(state, JournalRecord.parse(record));
    const entry = state.instances.get('a') as InstanceState;
    expect(pendingSinkUploads(entry).map((d) => d.output)).toEqual([0]);
    applyRecord(state, uploaded(0, hash('a')));
    expect(pendingSinkUploads(entry)).toEqual([]);
  });

  it('a re-roll starts over: its new file is pending even under the same name', () => {
    const state = emptyRunState();
    for (const record of [
      downloaded(0, hash('a')),
      uploaded(0, hash('a')),
      { type: 'reroll', instance: 'a', attempt: 1 } as const,
      downloaded(0, hash('c')),
    ])
      applyRecord(state, record);
    expect(pendingSinkUploads(state.instances.get('a') as InstanceState).map((d) => d.sha256)).toEqual([hash('c')]);
    // An upload of other bytes than the download does not settle it.
    applyRecord(state, uploaded(0, hash('a')));
    expect(pendingSinkUploads(state.instances.get('a') as InstanceState)).toHaveLength(1);
  });

  it('the journal refuses a sink_uploaded record without its key or with a bad sha256', () => {
    expect(JournalRecord.safeParse(uploaded(0, hash('a'))).success).toBe(true);
    expect(JournalRecord.safeParse({ ...uploaded(0, hash('a')), key: '' }).success).toBe(false);
    expect(JournalRecord.safeParse({ ...uploaded(0, 'nothex') }).success).toBe(false);
  });
});
