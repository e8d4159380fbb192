/**
 * An instance whose only journal line is damaged, accepted with `--accept-corrupt`, may have been
 * an intent whose POST spent money: the runner never sends it again, and every reading of its
 * status says unknown, its money unknown. A damaged line that names no instance changes no status.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { encodeLine } from '../../../src/run/journal/journal.js';
import type { JournalRecord } from '../../../src/run/journal/journal-records.js';
import { RunFold, statusOf, type ReportStatus } from '../../../src/run/journal/run-fold.js';
import { replayFile, type InstanceState } from '../../../src/run/journal/run-state.js';
import { openJournalStore } from '../../../src/run/journal/run-store.js';
import { instanceStates } from '../../../src/report/instance-lines.js';

let dir: string;
let path: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'genpipe-damaged-status-'));
  path = join(dir, 'journal.jsonl');
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const HASH = 'b'.repeat(64);
const started: JournalRecord = { type: 'run_started', runId: 'run-1', pipeline: 'demo', planHash: 'p1', at: 1 };
const finished: JournalRecord = { type: 'run_finished', outcome: 'stopped', at: 9 };
const keyless = (instance: string, at = 2): JournalRecord => ({
  type: 'intent',
  instance,
  model: 'speak',
  idempotencyKey: null,
  bodyHash: HASH,
  at,
});
const line = (record: JournalRecord): Buffer => encodeLine(JSON.stringify(record));

/** `bytes` with one bit flipped where `needle` starts, plus `shift`: a damage whose checksum names the line's instance, if any. */
function flip(bytes: Buffer, needle: string, shift = 0): Buffer {
  const at = bytes.indexOf(needle);
  expect(at).toBeGreaterThanOrEqual(0);
  const out = Buffer.from(bytes);
  out[at + shift] = out[at + shift]! ^ 0x01;
  return out;
}

/** Each instance's status as statusOf reads `states`. */
function statuses(states: Iterable<[string, InstanceState]>): Record<string, ReportStatus> {
  return Object.fromEntries([...states].map(([id, entry]) => [id, statusOf(entry)]));
}

async function collect(states: AsyncIterable<[string, InstanceState]>): Promise<[string, InstanceState][]> {
  const out: [string, InstanceState][] = [];
  for await (const pair of states) out.push(pair);
  return out;
}

/**
 * ads[n=1]: its only line, an intent, damaged (one byte: the checksum names it). ads[n=2]: sent and
 * completed. Two damaged lines that name no instance: a line that is no journal line, and the
 * run's own run_finished record. ads[n=3] and ads[n=4]: never named.
 */
async function writeJournal(): Promise<void> {
  await writeFile(
    path,
    Buffer.concat([
      line(started),
      flip(line(keyless('ads[n=1]')), '"speak"', 2),
      Buffer.from('not a journal line\n'),
      line(keyless('ads[n=2]', 3)),
      line({ type: 'submitted', instance: 'ads[n=2]', handle: { kind: 'request', requestId: 'r-2' }, at: 4 }),
      line({ type: 'status', instance: 'ads[n=2]', status: 'completed', outputs: [], at: 5 }),
      flip(line(finished), '"stopped"', 3),
      line(started),
    ]),
  );
}

describe('an instance whose only journal line is damaged is unknown, never not started', () => {
  it('the fold a resume starts from (progress, the summary) counts it unknown, its price unknown; the nameless lines change no status', async () => {
    await writeJournal();
    const store = await openJournalStore(dir, { acceptCorrupt: true });
    try {
      // The nameless lines hold back every instance not yet submitted (resumeAction) ...
      expect(store.state.suspectAll).toBe(true);
      const fold = RunFold.of(store.state, [{ id: 'ads', count: 4, priceUsd: 0.04 }]);
      expect(fold.status('ads[n=1]')).toBe('unknown');
      expect(fold.status('ads[n=2]')).toBe('completed');
      // ... but they name none: the instances never named stay not started.
      expect(fold.status('ads[n=3]')).toBe('not_started');
      expect(fold.counts()).toMatchObject({ completed: 1, unknown: 1, not_started: 2 });
      // Its money: up to the step's price, unknown; never US$0 spent.
      expect(fold.money()).toMatchObject({ netUsd: 0.04, unknownUsd: 0.04, committedUsd: 0.08 });
      expect(fold.money('ads').unknownUsd).toBe(0.04);
    } finally {
      await store.close();
    }
  });

  it('the report, outputs.csv and the gallery read it unknown from the journal anew (projected and full parse), as does a replay', async () => {
    await writeJournal();
    const expected = { 'ads[n=1]': 'unknown', 'ads[n=2]': 'completed' };
    expect(statuses(await collect(instanceStates(path)))).toEqual(expected);
    expect(statuses(await collect(instanceStates(path, { fullParse: true })))).toEqual(expected);
    expect(statuses(await collect(instanceStates(path, { gallery: true })))).toEqual(expected);
    expect(statuses((await replayFile(path)).instances)).toEqual(expected);
    expect(statuses((await replayFile(path, { lean: true })).instances)).toEqual(expected);
  });

  it('a damaged line that names no instance, alone, leaves every status as the intact lines say', async () => {
    await writeFile(
      path,
      Buffer.concat([
        line(started),
        Buffer.from('not a journal line\n'),
        line(keyless('ads[n=2]', 3)),
        flip(line(finished), '"stopped"', 3),
        line(started),
      ]),
    );
    const store = await openJournalStore(dir, { acceptCorrupt: true });
    try {
      const fold = RunFold.of(store.state, [{ id: 'ads', count: 3, priceUsd: 0.04 }]);
      // ads[n=2]'s own unanswered keyless intent makes it unknown; the others were never named.
      expect(fold.counts()).toMatchObject({ unknown: 1, not_started: 2 });
      expect(fold.money().unknownUsd).toBe(0.04);
    } finally {
      await store.close();
    }
    expect(statuses(await collect(instanceStates(path)))).toEqual({ 'ads[n=2]': 'unknown' });
    expect(statuses((await replayFile(path)).instances)).toEqual({ 'ads[n=2]': 'unknown' });
  });
});
