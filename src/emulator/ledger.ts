/**
 * The ledger (§8 billing rule 5): every reserve, charge and refund, each referenced by request id or
 * message id, and the balances they lead to. Amounts are kept in integer micro-dollars (US$1e-6) so
 * that sums are exact to the cent; credits are derived at the configured rate (default 100 per US$).
 */
import type { AccountSpec } from './accounts.js';
import type { ModelId } from './models.js';
import type { StateEvent, StateJournal } from './state-journal.js';

export type LedgerKind = 'reserve' | 'charge' | 'refund';

export interface LedgerEntry {
  seq: number;
  at: string;
  key_id: string;
  kind: LedgerKind;
  usd: number;
  credits: number;
  request_id?: string;
  message_id?: string;
  reason: string;
}

export interface AccountState {
  keyId: string;
  secret: string;
  agentEnabled: boolean;
  /** Models with access (§5); undefined: every model. */
  models: ReadonlySet<ModelId> | undefined;
  initialMicros: number;
  balanceMicros: number;
}

export const usdToMicros = (usd: number): number => Math.round(usd * 1_000_000);
const round6 = (n: number): number => Math.round(n * 1e6) / 1e6;

export class Ledger {
  readonly creditsPerUsd: number;
  readonly accounts = new Map<string, AccountState>();
  readonly entries: LedgerEntry[] = [];
  /** `--state`: every movement is written there too. */
  journal: StateJournal | undefined;

  constructor(accounts: readonly AccountSpec[], creditsPerUsd: number) {
    this.creditsPerUsd = creditsPerUsd;
    for (const a of accounts) {
      const micros = Math.round((a.credits / creditsPerUsd) * 1_000_000);
      this.accounts.set(a.keyId, {
        keyId: a.keyId,
        secret: a.secret,
        agentEnabled: a.agentEnabled,
        models: a.models === undefined ? undefined : new Set(a.models),
        initialMicros: micros,
        balanceMicros: micros,
      });
    }
  }

  creditsOf(micros: number): number {
    return round6((micros / 1_000_000) * this.creditsPerUsd);
  }

  balanceMicros(keyId: string): number {
    return this.accounts.get(keyId)?.balanceMicros ?? 0;
  }

  /** Records one movement. `micros` is positive; reserve and charge take it from the balance, refund gives it back. */
  record(
    keyId: string,
    kind: LedgerKind,
    micros: number,
    ref: { requestId?: string | undefined; messageId?: string | undefined },
    reason: string,
  ): LedgerEntry | undefined {
    if (micros <= 0) return undefined;
    const account = this.accounts.get(keyId);
    if (!account) return undefined;
    account.balanceMicros += kind === 'refund' ? micros : -micros;
    const entry: LedgerEntry = {
      seq: this.entries.length + 1,
      at: new Date().toISOString(),
      key_id: keyId,
      kind,
      usd: round6(micros / 1_000_000),
      credits: this.creditsOf(micros),
      reason,
    };
    if (ref.requestId !== undefined) entry.request_id = ref.requestId;
    if (ref.messageId !== undefined) entry.message_id = ref.messageId;
    this.entries.push(entry);
    this.journal?.write({ t: 'ledger', entry });
    return entry;
  }

  /** Replays a movement from the state file (`--state`): the entry as it was, and its balance effect. */
  restore(event: StateEvent): void {
    const entry = event.entry as LedgerEntry;
    const account = this.accounts.get(entry.key_id);
    if (account) account.balanceMicros += (entry.kind === 'refund' ? 1 : -1) * Math.round(entry.usd * 1_000_000);
    this.entries.push({ ...entry, seq: this.entries.length + 1 });
  }

  /** Reserves and charges minus refunds, in micro-dollars, over the entries that match. */
  netMicros(filter: (e: LedgerEntry) => boolean = () => true): number {
    let total = 0;
    for (const e of this.entries) {
      if (!filter(e)) continue;
      const micros = Math.round(e.usd * 1_000_000);
      total += e.kind === 'refund' ? -micros : micros;
    }
    return total;
  }

  /** The `/_emulator/ledger` document. */
  toJSON(keyId?: string): unknown {
    const accounts = [...this.accounts.values()]
      .filter((a) => keyId === undefined || a.keyId === keyId)
      .map((a) => ({
        key_id: a.keyId,
        agent_enabled: a.agentEnabled,
        initial_credits: this.creditsOf(a.initialMicros),
        balance_credits: this.creditsOf(a.balanceMicros),
        balance_usd: round6(a.balanceMicros / 1_000_000),
        spent_usd: round6((a.initialMicros - a.balanceMicros) / 1_000_000),
      }));
    return {
      credits_per_usd: this.creditsPerUsd,
      accounts,
      entries: keyId === undefined ? this.entries : this.entries.filter((e) => e.key_id === keyId),
    };
  }
}
