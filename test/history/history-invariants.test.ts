// The random-history checker can fail: against a real emulator, a body paid for twice with one
// attempt journaled, a report whose net is not the ledger, an unknown attempt that does not cover
// the gap, a spend over the budget, and a command that exited 70 or outlived its bound are each
// named. (The history test passing means something only if these do.)
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import type { JournalRecord } from '../../src/run/journal/journal-records.js';
import { checkInvariants, type CommandLog, type RunTotals } from './history-invariants.js';
import { HF_KEY, KEY_ID } from './processes.js';

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterAll(async () => {
  await emu.close();
});

/** A keyless Soul Standard submit (US$0.03), as genpipe would send it. */
async function submitPoster(prompt: string): Promise<void> {
  const response = await fetch(`${emu.url}/vendor-ai/soul/standard`, {
    method: 'POST',
    headers: { authorization: `Key ${HF_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, aspect_ratio: '1:1', resolution: '1080p' }),
  });
  expect(response.status).toBeLessThan(300);
}

const ok: CommandLog = { label: '1. run', args: ['run'], code: 0, signal: null, ms: 10, timedOut: false, chosenKill: false, stderr: '' };
const total = (netUsd: number, unknownUsd = 0): RunTotals['total'] => ({ netUsd, unknownUsd, counts: { completed: 1 } });
const intentFor = (bodyHash: string): JournalRecord => ({
  type: 'intent',
  instance: 'p[n=1]',
  model: 'soul-standard',
  idempotencyKey: null,
  bodyHash,
});

describe('the random-history checker', () => {
  it('names a body paid twice for one attempt, a report that is not the ledger, and a budget overrun', async () => {
    await submitPoster('Poster 1');
    await submitPoster('Poster 1');
    const rows = emu.requests.inspect({}) as { body_hash: string }[];
    expect(rows).toHaveLength(2);
    const hash = rows[0]?.body_hash as string;
    const run: RunTotals = {
      runDir: '/tmp/r',
      total: total(0.03),
      settleCode: 0,
      budgets: [{ usd: 0.01, spentBefore: 0 }],
      records: [intentFor(hash)],
    };
    const { violations, ledgerUsd } = checkInvariants({ emu, keyId: KEY_ID, runs: [run], commands: [ok], concurrency: 0 });
    expect(ledgerUsd).toBe(0.06);
    expect(violations).toEqual([
      'invariant A: the reports say net US$0.03, the ledger US$0.06 (no attempt unknown)',
      `a body (sha256 ${hash.slice(0, 12)}…) was paid for 2 times, for 1 attempts in the journals`,
      'spend US$0.06 is over the budget US$0.01 plus 0 attempts in flight (US$0.00)',
    ]);
    // Two attempts journaled, the second unknown: both payments are accounted for (invariant B holds).
    const covered: RunTotals = { ...run, total: total(0.03, 0.03), budgets: [], records: [intentFor(hash), intentFor(hash)] };
    expect(checkInvariants({ emu, keyId: KEY_ID, runs: [covered], commands: [ok], concurrency: 0 }).violations).toEqual([]);
    // An unknown attempt too small to cover the gap breaks invariant B.
    const short: RunTotals = { ...covered, total: total(0.02, 0.02) };
    expect(checkInvariants({ emu, keyId: KEY_ID, runs: [short], commands: [ok], concurrency: 0 }).violations).toEqual([
      'invariant B: the ledger US$0.06 is outside [net US$0.02, net + unknown US$0.04]',
    ]);
  });

  it("a resume's budget binds once its start journaled it: a command interrupted before it started gave the run no budget (soak seed 60368)", async () => {
    // The two posters the emulator holds (paid, US$0.06 in all), as two journaled attempts.
    if ((emu.requests.inspect({}) as unknown[]).length === 0) for (const n of [1, 2]) await submitPoster(`Poster ${n}`);
    const hash = (emu.requests.inspect({}) as { body_hash: string }[])[0]?.body_hash as string;
    const started = (budgetUsd: number | null): JournalRecord =>
      ({ type: 'run_started', runId: 'r', pipeline: 'p', planHash: 'h', options: { budgetUsd } }) as unknown as JournalRecord;
    const paid = [intentFor(hash), intentFor(hash)];
    const base: RunTotals = { runDir: 'r', total: total(0.06, 0), settleCode: 0, budgets: [], records: [] };
    // Given to a resume that journaled nothing (Ctrl-C before it started): later plain resumes owe it nothing.
    const notStarted: RunTotals = {
      ...base,
      budgets: [{ usd: 0.01, spentBefore: 0, startedBefore: 1 }],
      records: [started(null), ...paid],
    };
    expect(checkInvariants({ emu, keyId: KEY_ID, runs: [notStarted], commands: [ok], concurrency: 0 }).violations).toEqual([]);
    // Journaled by the start it was given to: it binds.
    const bound: RunTotals = { ...notStarted, records: [started(null), started(0.01), ...paid] };
    expect(checkInvariants({ emu, keyId: KEY_ID, runs: [bound], commands: [ok], concurrency: 0 }).violations).toEqual([
      'spend US$0.06 is over the budget US$0.01 plus 0 attempts in flight (US$0.00)',
    ]);
  });

  it('names a command that exited 70, one that outlived its bound, and one that printed a stack trace', () => {
    const commands: CommandLog[] = [
      { ...ok, label: '2. resume', args: ['resume'], code: 70, stderr: 'genpipe: internal error: boom' },
      { ...ok, label: '3. resume', args: ['resume'], code: null, signal: 'SIGKILL', timedOut: true, ms: 90_000 },
      { ...ok, label: '4. run', args: ['run'], code: 1, stderr: 'TypeError: x\n    at f (/src/a.js:1:2)' },
    ];
    const { violations } = checkInvariants({ emu, keyId: '11111111-1111-4111-8111-111111111111', runs: [], commands, concurrency: 0 });
    expect(violations).toEqual([
      '2. resume (genpipe resume) exited 70 (a bug): genpipe: internal error: boom',
      '3. resume (genpipe resume) did not end within its bound (90000 ms)',
      '4. run (genpipe run) printed a stack trace: TypeError: x |     at f (/src/a.js:1:2)',
    ]);
  });
});
