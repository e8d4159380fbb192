// Pins reliability.md #6 ("terminal states are final"): once an instance's journal holds a final
// status, no later record (another status, an intent, a submitted, a failed) moves it out of it or
// changes what it was: not in the replayed state, not in what a resume decides, not in the cost
// report, not in a resumed run's results. Mutations this catches, in run-state.ts applyRecord:
// `entry.final ??= record` made `entry.final = record`, and `if (entry.final) return;` removed from
// the 'intent' or the 'submitted' case.
import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseCsv } from 'csv-parse/sync';
import { afterAll, describe, expect, it } from 'vitest';
import { buildCostReport } from '../../src/report/cost-report.js';
import { encodeLine } from '../../src/run/journal/journal.js';
import { TERMINAL_STATUSES, type JournalRecord, type JournalRecordOf, type TerminalStatus } from '../../src/run/journal/journal-records.js';
import { applyRecord, emptyRunState, replayFile, resumeAction, type RunState } from '../../src/run/journal/run-state.js';
import { runPlan } from '../../src/run/runner.js';
import { startEmulator } from '../../src/emulator/index.js';
import { closeRun, prepareRun, type InProcessRun, runOf } from './pin-helpers.js';
import { cleanTemps, emuRequests, tempDir } from './runner-helpers.js';

afterAll(cleanTemps);

const ID = 'sheets[seed=1]';
const HASH = 'a'.repeat(64);
const intent: JournalRecordOf<'intent'> = {
  type: 'intent',
  instance: ID,
  model: 'character-sheet',
  idempotencyKey: 'key-1',
  bodyHash: HASH,
  at: 1,
};
const submitted: JournalRecordOf<'submitted'> = { type: 'submitted', instance: ID, handle: { kind: 'request', requestId: 'req-1' }, at: 2 };
const statusRecord = (status: TerminalStatus, at: number): JournalRecordOf<'status'> => ({
  type: 'status',
  instance: ID,
  status,
  outputs: status === 'completed' ? [{ url: `https://cdn.test/${at}.png`, name: 'image-0', accept: ['image/png'] }] : [],
  ...(status === 'failed' ? { error: `failed at ${at}` } : {}),
  at,
});

/** Every kind of record that may come after a final status, other than a re-roll (which starts over). */
function laterRecords(final: TerminalStatus): { name: string; record: JournalRecord }[] {
  return [
    ...TERMINAL_STATUSES.filter((s) => s !== final).map((s) => ({ name: `a ${s} status`, record: statusRecord(s, 10) as JournalRecord })),
    { name: `a second ${final} status`, record: statusRecord(final, 11) },
    {
      name: 'an intent',
      record: { type: 'intent', instance: ID, model: 'character-sheet', idempotencyKey: 'key-2', bodyHash: 'b'.repeat(64), at: 12 },
    },
    { name: 'a submitted', record: { type: 'submitted', instance: ID, handle: { kind: 'request', requestId: 'req-2' }, at: 13 } },
    { name: 'a failed', record: { type: 'failed', instance: ID, code: 'server_error', message: 'late failure', at: 14 } },
  ];
}

function stateOf(records: readonly JournalRecord[]): RunState {
  const state = emptyRunState();
  for (const record of records) applyRecord(state, record);
  return state;
}

/** What applyRecord must leave as it was after `final`: the whole entry, field by field. */
function expectUnchanged(state: RunState, final: JournalRecordOf<'status'>, why: string): void {
  const entry = state.instances.get(ID);
  expect(entry, why).toBeDefined();
  expect(entry?.final, `${why}: the final status record`).toBe(final);
  expect(entry?.final?.status, why).toBe(final.status);
  expect(entry?.intent, `${why}: the intent`).toBe(intent);
  expect(entry?.submission, `${why}: the submission`).toEqual(submitted.handle);
  expect(entry?.submittedAt, why).toBe(2);
  expect(entry?.failed, `${why}: a failed record`).toBeUndefined();
  expect(resumeAction(entry, true), why).toEqual({ kind: 'done', status: final.status });
  expect(resumeAction(entry, false), why).toEqual({ kind: 'done', status: final.status });
}

describe('applyRecord: a final status is never overwritten', () => {
  for (const final of TERMINAL_STATUSES) {
    for (const later of laterRecords(final)) {
      it(`${final}, then ${later.name}`, () => {
        const first = statusRecord(final, 3);
        expectUnchanged(stateOf([intent, submitted, first, later.record]), first, `${final} then ${later.name}`);
      });
    }

    it(`${final}, then every later record at once, in both orders`, () => {
      const first = statusRecord(final, 3);
      const later = laterRecords(final).map((l) => l.record);
      expectUnchanged(stateOf([intent, submitted, first, ...later]), first, 'in order');
      expectUnchanged(stateOf([intent, submitted, first, ...later.reverse()]), first, 'reversed');
    });
  }

  it('replayFile, whole and lean, keeps the first final status and the first request id', async () => {
    const path = join(tempDir(), 'journal.jsonl');
    const records: JournalRecord[] = [intent, submitted, statusRecord('completed', 3), ...laterRecords('completed').map((l) => l.record)];
    writeFileSync(path, Buffer.concat(records.map((r) => encodeLine(JSON.stringify(r)))));
    const whole = (await replayFile(path)).instances.get(ID);
    expect(whole?.final?.status).toBe('completed');
    expect(whole?.final?.at).toBe(3);
    expect(whole?.submission).toEqual({ kind: 'request', requestId: 'req-1' });
    expect(whole?.intent?.idempotencyKey).toBe('key-1');
    expect(whole?.failed).toBeUndefined();
    const lean = (await replayFile(path, { lean: true })).instances.get(ID);
    expect(lean?.final?.status).toBe('completed');
    expect(lean?.submission).toEqual({ kind: 'request', requestId: 'req-1' });
    expect(lean?.intent).toBeDefined();
    expect(lean?.failed).toBeUndefined();
  });
});

describe('a finished run: records journaled after the final statuses change nothing', () => {
  it('the cost report, a resume, its counts and outputs.csv still see the first final statuses', { timeout: 60_000 }, async () => {
    const emu = await startEmulator({ port: 0, timeScale: 0.001, seed: 17, log: () => {} });
    let run: InProcessRun | undefined;
    try {
      const dir = tempDir();
      const manifest = join(dir, 'finals.yaml');
      writeFileSync(
        manifest,
        `version: 1
name: finals
steps:
  sheets:
    model: character-sheet
    matrix:
      brief: ["fine", "fine too", "[emulator:fail] broken", "[emulator:nsfw] flagged"]
    input: { tier: cats, seed: 7, brief: "{{ brief }}" }
`,
      );
      run = await prepareRun(emu, manifest);
      const options = { ...runOf(run), concurrency: 4, ratePerSecond: 10_000, poll: { floorMs: 1, baseMs: 2, capMs: 20 } };
      const first = await runPlan({ ...options, signal: new AbortController().signal });
      expect(first.counts).toMatchObject({ completed: 2, failed: 1, nsfw: 1 });
      const journalPath = join(run.runDir, 'journal.jsonl');
      const before = await buildCostReport(run.runDir);
      const csvBefore = readFileSync(join(run.runDir, 'outputs.csv'), 'utf8');
      const requestsBefore = emuRequests(emu).length;
      expect(requestsBefore).toBe(4);

      // Forge what a late or duplicate delivery, an out-of-order status or a confused writer could
      // leave: for every instance, a contradicting status, a second intent, a second submitted and
      // a failed record, all after its final status.
      const finals = new Map<string, TerminalStatus>();
      for (const line of readFileSync(journalPath, 'utf8').split('\n').filter(Boolean)) {
        const record = JSON.parse(line.slice(9)) as JournalRecord;
        if (record.type === 'status') finals.set(record.instance, record.status);
      }
      expect([...finals.values()].sort()).toEqual(['completed', 'completed', 'failed', 'nsfw']);
      const forged: JournalRecord[] = [];
      for (const [instance, status] of finals) {
        forged.push(
          {
            type: 'status',
            instance,
            status: status === 'completed' ? 'failed' : 'completed',
            outputs: [],
            error: 'forged',
            at: Date.now(),
          },
          {
            type: 'intent',
            instance,
            model: 'character-sheet',
            idempotencyKey: `forged-${instance}`,
            bodyHash: 'c'.repeat(64),
            at: Date.now(),
          },
          { type: 'submitted', instance, handle: { kind: 'request', requestId: `forged-${instance}` }, at: Date.now() },
          { type: 'failed', instance, code: 'server_error', message: 'forged', at: Date.now() },
        );
      }
      appendFileSync(journalPath, Buffer.concat(forged.map((r) => encodeLine(JSON.stringify(r)))));

      const after = await buildCostReport(run.runDir);
      expect(after.instances, 'the cost report per instance (status, request id, money)').toEqual(before.instances);
      expect(after.total).toEqual(before.total);

      // A resume replays the same journal: nothing to send, nothing to download, the same counts.
      const resumed = await runPlan({ ...options, signal: new AbortController().signal });
      expect(resumed.counts).toEqual(first.counts);
      expect(emuRequests(emu)).toHaveLength(requestsBefore);
      const rows = (text: string): Record<string, string>[] => parseCsv(text, { columns: true }) as Record<string, string>[];
      expect(rows(readFileSync(join(run.runDir, 'outputs.csv'), 'utf8')), 'outputs.csv after the resume').toEqual(rows(csvBefore));
      expect((await buildCostReport(run.runDir)).instances).toEqual(before.instances);
    } finally {
      await closeRun(run);
      await emu.close();
    }
  });
});
