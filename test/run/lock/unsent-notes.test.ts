// A holder displaced right after journaling an intent sends nothing and may not write the journal;
// it leaves a note instead (src/run/lock/unsent-notes.ts), and the next holder sends that instance as
// new rather than leaving it unknown (the promise: "40 keyless images cost exactly 40
// requests", which a takeover landing between an intent and its POST used to make 39, with one
// image unknown). In process against the emulator on 127.0.0.1, with a fence that fails on cue.
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../../src/emulator/index.js';
import { buildCostReport } from '../../../src/report/cost-report.js';
import { emptyRunState, applyRecord } from '../../../src/run/journal/run-state.js';
import type { JournalRecord } from '../../../src/run/journal/journal-records.js';
import { runPlan } from '../../../src/run/runner.js';
import { releaseUnsent, UNSENT_DIR } from '../../../src/run/lock/unsent-notes.js';
import { closeRun, prepareRun, runOf, type InProcessRun } from '../pin-helpers.js';
import { journalOf, tempDir } from '../runner-helpers.js';

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterAll(async () => {
  await emu.close();
});

function posters(dir: string, name: string, count: number): string {
  const path = join(dir, `${name}.yaml`);
  writeFileSync(
    path,
    `version: 1\nname: ${name}\nprices: { soul-standard: 0.03 }\nsteps:\n  p:\n    model: soul-standard\n    matrix: { n: { range: { from: 1, to: ${count} } } }\n    input: { prompt: "Unsent poster {{ n }}", aspect_ratio: "1:1", resolution: 1080p }\n`,
  );
  return path;
}

/** A fence that holds for its first `holds` checks, then is lost (another process took the run over). */
function fenceFailingAfter(holds: number): { check(): Promise<boolean>; signal: AbortSignal } {
  const lost = new AbortController();
  let checks = 0;
  return {
    signal: lost.signal,
    check: async () => {
      if (++checks <= holds) return true;
      if (!lost.signal.aborted) lost.abort(new Error('taken over'));
      return false;
    },
  };
}

const requestsOf = (run: InProcessRun): number => run.agent.exchanges.filter((e) => e.method === 'POST').length;

describe('an intent a displaced holder never sent', () => {
  for (const withNote of [true, false]) {
    it(
      withNote
        ? 'is noted by that holder, and the next holder sends it as new: 3 keyless posters, 3 requests, report = ledger'
        : 'without its note stays unknown and is never sent (the note is what tells the new holder)',
      { timeout: 30_000 },
      async () => {
        let run: InProcessRun | undefined;
        try {
          run = await prepareRun(emu, posters(tempDir(), withNote ? 'noted' : 'unnoted', 3));
          const spentBefore = emu.ledger.netMicros(() => true) / 1e6;
          // Every append is fenced too: check 1 is run_started's, check 2 comes before the first
          // intent, check 3 is the intent's append, check 4 right after it: lost there.
          await runPlan({ ...runOf(run), signal: new AbortController().signal, concurrency: 1, fence: fenceFailingAfter(3) }).catch(
            () => undefined,
          );
          expect(requestsOf(run)).toBe(0);
          const intents = journalOf(run.runDir).records.filter((r) => r.type === 'intent');
          expect(intents).toHaveLength(1);
          expect(existsSync(join(run.runDir, UNSENT_DIR))).toBe(true);
          if (!withNote) rmSync(join(run.runDir, UNSENT_DIR), { recursive: true });
          const summary = await runPlan({ ...runOf(run), signal: new AbortController().signal, concurrency: 1 });
          expect(requestsOf(run)).toBe(withNote ? 3 : 2);
          expect(summary.counts.completed).toBe(withNote ? 3 : 2);
          expect(summary.counts.unknown).toBe(withNote ? 0 : 1);
          // The notes are read once and removed.
          if (withNote) expect(readdirSync(join(run.runDir, UNSENT_DIR))).toEqual([]);
          const report = await buildCostReport(run.runDir);
          expect(report.total.netUsd).toBeCloseTo(emu.ledger.netMicros(() => true) / 1e6 - spentBefore, 6);
          expect(report.total.unknownUsd).toBeCloseTo(withNote ? 0 : 0.03, 6);
        } finally {
          await closeRun(run);
        }
      },
    );
  }

  it('a note that no longer names the current attempt (sent since, retried, another body) is dropped, not applied', async () => {
    const dir = tempDir();
    const hash = 'a'.repeat(64);
    const records: JournalRecord[] = [
      { type: 'intent', instance: 'p[n=1]', model: 'soul-standard', idempotencyKey: null, bodyHash: hash },
      { type: 'submitted', instance: 'p[n=1]', handle: { kind: 'request', requestId: 'r1' } },
      { type: 'intent', instance: 'p[n=2]', model: 'soul-standard', idempotencyKey: null, bodyHash: hash },
      { type: 'intent', instance: 'p[n=3]', model: 'soul-standard', idempotencyKey: null, bodyHash: hash },
      { type: 'intent', instance: 'p[n=4]', model: 'soul-standard', idempotencyKey: null, bodyHash: hash },
    ];
    const state = emptyRunState();
    for (const r of records) applyRecord(state, r);
    const note = (instance: string, over: object = {}): string =>
      JSON.stringify({ instance, bodyHash: hash, retries: 0, rerolls: 0, ...over });
    const notes = join(dir, UNSENT_DIR);
    mkdirSync(notes);
    writeFileSync(
      join(notes, '1-a.jsonl'),
      [note('p[n=1]'), note('p[n=2]', { bodyHash: 'b'.repeat(64) }), note('p[n=3]', { retries: 1 }), note('p[n=4]'), '{"torn'].join('\n'),
    );
    const appended: JournalRecord[] = [];
    const released = await releaseUnsent(dir, state, async (record) => {
      appended.push(record);
    });
    expect(released).toBe(1);
    expect(appended).toEqual([{ type: 'refused', instance: 'p[n=4]', code: 'not_sent' }]);
    expect(readdirSync(notes)).toEqual([]);
  });
});
