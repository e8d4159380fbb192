/**
 * The invariants a settled random history must keep:
 * - A: with no attempt unknown, the reports' net (report.json total.netUsd, summed over the
 *   history's runs) is the emulator's ledger to the cent;
 * - B: with unknown attempts, the ledger lies within [net, net + unknown];
 * - at most one charge per attempt: no request charged twice, no Idempotency-Key on two requests,
 *   and no body paid for more often than the journals hold attempts (intents) that sent it;
 * - spend within the budget, plus the price of the attempts that may be in flight when it stopped;
 * - every command ended within its bound, with a documented exit code, never 70, never a stack trace.
 * Each broken rule is one sentence in `violations`.
 */
import type { Emulator } from '../../src/emulator/index.js';
import type { JournalRecord } from '../../src/run/journal/journal-records.js';
import { SHEET_PRICE } from './history-model.js';

/** Exit codes the README documents (src/session/exit-codes.ts), 70 (a bug) left out on purpose. */
export const DOCUMENTED_EXIT_CODES: ReadonlySet<number> = new Set([0, 1, 2, 3, 4, 5, 6, 130]);

export interface CommandLog {
  label: string;
  args: string[];
  code: number | null;
  signal: NodeJS.Signals | null;
  ms: number;
  timedOut: boolean;
  /** The history chose to kill it (a crash point or a kill -9 after a delay). */
  chosenKill: boolean;
  /** The history sent it Ctrl-C (SIGINT): it must still end by itself, with a documented code. */
  interrupted?: boolean;
  stderr: string;
}

export interface RunTotals {
  runDir: string;
  total: { netUsd: number; unknownUsd: number; counts: Record<string, number> } | undefined;
  settleCode: number | null;
  /**
   * Every budget in force over the run's life (the manifest's, each --budget given), with what
   * the history had spent when it was given: a budget under that stops the spending, no more.
   */
  budgets: { usd: number; spentBefore: number; startedBefore?: number | undefined }[];
  records: JournalRecord[];
}

interface EmuRow {
  request_id: string;
  key_id: string;
  idempotency_key: string | null;
  body_hash: string;
  status: string;
  charged_usd: number;
}

const cents = (usd: number): number => Math.round(usd * 100);

export function checkInvariants(input: { emu: Emulator; keyId: string; runs: RunTotals[]; commands: CommandLog[]; concurrency: number }): {
  violations: string[];
  ledgerUsd: number;
  netUsd: number;
  unknownUsd: number;
} {
  const violations: string[] = [];
  const { emu, keyId, runs, commands } = input;

  for (const c of commands) {
    const what = `${c.label} (genpipe ${c.args.filter((a) => !a.startsWith('/')).join(' ')})`;
    if (c.timedOut) violations.push(`${what} did not end within its bound (${c.ms} ms)`);
    else if (c.code === 70) violations.push(`${what} exited 70 (a bug): ${lastLine(c.stderr)}`);
    else if (c.code !== null && !DOCUMENTED_EXIT_CODES.has(c.code)) violations.push(`${what} exited ${c.code}, not a documented exit code`);
    // Ctrl-C: a process that dies of the signal itself is what a shell shows as 130 too.
    else if (c.code === null && !c.chosenKill && !(c.interrupted && c.signal === 'SIGINT'))
      violations.push(`${what} ended by ${c.signal ?? 'nothing'} that the history did not send`);
    if (/\n\s+at .+:\d+:\d+\)?/.test(c.stderr)) violations.push(`${what} printed a stack trace: ${lastLine(c.stderr)}`);
  }

  // Reading the rows settles requests that ended (the emulator refunds lazily), so read them first.
  const rows = (emu.requests.inspect({ keyId }) as EmuRow[]).filter((r) => r.key_id === keyId);
  const ledgerMicros = emu.ledger.netMicros((e) => e.key_id === keyId);
  const ledgerUsd = ledgerMicros / 1e6;

  let netUsd = 0;
  let unknownUsd = 0;
  let inFlight = 0;
  let reported = true;
  for (const run of runs) {
    const name = run.runDir.split('/').at(-1);
    if (!run.total) {
      violations.push(`genpipe report --json of run ${name} printed no report`);
      reported = false;
      continue;
    }
    netUsd += run.total.netUsd;
    unknownUsd += run.total.unknownUsd;
    const left = run.total.counts.in_flight ?? 0;
    inFlight += left;
    // A settle that ended (0, 1 or 3) followed every attempt it had: none may be left in flight.
    if (left > 0 && (run.settleCode === 0 || run.settleCode === 1 || run.settleCode === 3))
      violations.push(`run ${name}: the settling resume exited ${run.settleCode} with ${left} attempts still in flight in its report`);
  }
  netUsd = Math.round(netUsd * 1e6) / 1e6;
  unknownUsd = Math.round(unknownUsd * 1e6) / 1e6;

  if (reported && inFlight === 0) {
    if (cents(unknownUsd) === 0) {
      if (cents(netUsd) !== cents(ledgerUsd))
        violations.push(
          `invariant A: the reports say net US$${netUsd.toFixed(2)}, the ledger US$${ledgerUsd.toFixed(2)} (no attempt unknown)`,
        );
    } else if (cents(ledgerUsd) < cents(netUsd) || cents(ledgerUsd) > cents(netUsd + unknownUsd)) {
      violations.push(
        `invariant B: the ledger US$${ledgerUsd.toFixed(2)} is outside [net US$${netUsd.toFixed(2)}, net + unknown US$${(netUsd + unknownUsd).toFixed(2)}]`,
      );
    }
  }

  // At most one charge per request: one reserve or charge each, and never more than its price.
  const perRequest = new Map<string, { taken: number; micros: number }>();
  for (const e of emu.ledger.entries) {
    if (e.key_id !== keyId || e.request_id === undefined) continue;
    const p = perRequest.get(e.request_id) ?? { taken: 0, micros: 0 };
    const micros = Math.round(e.usd * 1e6);
    if (e.kind === 'refund') p.micros -= micros;
    else {
      p.taken++;
      p.micros += micros;
    }
    perRequest.set(e.request_id, p);
  }
  const charged = new Set<string>();
  for (const row of rows) {
    const p = perRequest.get(row.request_id);
    if (!p) continue;
    if (p.taken > 1) violations.push(`request ${row.request_id} was charged ${p.taken} times`);
    if (p.micros > Math.round(row.charged_usd * 1e6))
      violations.push(`request ${row.request_id} cost US$${p.micros / 1e6}, more than its price US$${row.charged_usd}`);
    if (p.micros > 0) charged.add(row.request_id);
  }

  // No Idempotency-Key on two requests.
  const byKey = new Map<string, string>();
  for (const row of rows) {
    if (row.idempotency_key === null) continue;
    const other = byKey.get(row.idempotency_key);
    if (other !== undefined) violations.push(`Idempotency-Key ${row.idempotency_key} is on two requests (${other}, ${row.request_id})`);
    byKey.set(row.idempotency_key, row.request_id);
  }

  // No body paid for more often than the journals hold attempts that sent it.
  const intents = new Map<string, number>();
  for (const run of runs) for (const r of run.records) if (r.type === 'intent') intents.set(r.bodyHash, (intents.get(r.bodyHash) ?? 0) + 1);
  const paidBodies = new Map<string, number>();
  for (const row of rows) if (charged.has(row.request_id)) paidBodies.set(row.body_hash, (paidBodies.get(row.body_hash) ?? 0) + 1);
  for (const [hash, paid] of paidBodies) {
    const attempts = intents.get(hash) ?? 0;
    if (paid > attempts)
      violations.push(`a body (sha256 ${hash.slice(0, 12)}…) was paid for ${paid} times, for ${attempts} attempts in the journals`);
  }

  // The budget: over a history with one run, the ledger is that run's spend. It stays within the
  // largest budget the run was given (or what was spent already when a smaller one was given),
  // plus what the attempts in flight when it stopped may cost.
  const given = runs.length === 1 ? (runs[0]?.budgets ?? []).filter((b) => tookEffect(b, runs[0]?.records ?? [])) : [];
  if (given.length > 0) {
    const budget = Math.max(...given.map((b) => Math.max(b.usd, b.spentBefore)));
    const allowance = input.concurrency * SHEET_PRICE;
    if (cents(ledgerUsd) > cents(budget + allowance))
      violations.push(
        `spend US$${ledgerUsd.toFixed(2)} is over the budget US$${budget.toFixed(2)} plus ${input.concurrency} attempts in flight (US$${allowance.toFixed(2)})`,
      );
  }

  return { violations, ledgerUsd, netUsd, unknownUsd };
}

/** A resume's budget binds once its start journaled it (a run_started after the ones before the command, with that budget). */
function tookEffect(b: { usd: number; startedBefore?: number | undefined }, records: readonly JournalRecord[]): boolean {
  if (b.startedBefore === undefined) return true;
  return records
    .filter((r) => r.type === 'run_started')
    .slice(b.startedBefore)
    .some((r) => r.type === 'run_started' && r.options?.budgetUsd === b.usd);
}

const lastLine = (text: string): string => text.trim().split('\n').slice(-3).join(' | ');
