/**
 * A run's store: its records and the state replayed from them, always in step. The local store is
 * `journal.jsonl` in the run directory (see journal.ts for durability, torn tails and damage); a
 * fleet coordinator keeps the same journal, so the store is one interface with one implementation
 * today.
 */
import type { JournalRecord } from './journal-records.js';
import { Journal, type CorruptLine, type JournalFile } from './journal.js';
import { applyRecord, emptyRunState, markCorrupt, type RunState } from './run-state.js';
import { runFile } from '../files/run-layout.js';

export interface RunStore {
  readonly state: RunState;
  /** False when the run existed before (a resume). */
  readonly created: boolean;
  /** Applies the record to the state, then writes it (synced first when `durable`). */
  append(record: JournalRecord, durable: boolean): Promise<void>;
  close(): Promise<void>;
}

export interface OpenRunStoreOptions {
  /** Go past damaged lines (see Journal.open); each one makes the instances it could be unknown. */
  acceptCorrupt?: boolean | undefined;
  onCorrupt?: ((corrupt: CorruptLine) => void) | undefined;
  /** Told how long each fsync of the journal took, in ms (a run's metrics). */
  onSync?: ((ms: number) => void) | undefined;
}

/** Opens (or creates) the journal of `runDir`, replaying it as it is read, never holding its records. */
export async function openJournalStore(runDir: string, options: OpenRunStoreOptions = {}): Promise<RunStore> {
  const state = emptyRunState();
  const journal = await Journal.open(runFile(runDir, 'journal'), {
    onRecord: (record) => applyRecord(state, record),
    // Refused unless accepted; accepted, the instance a corrupt line may have been is unknown, never fresh.
    acceptCorrupt: options.acceptCorrupt === true,
    onCorrupt: (corrupt) => {
      markCorrupt(state, corrupt.instance);
      options.onCorrupt?.(corrupt);
    },
    ...(options.onSync ? { wrapFile: (file: JournalFile) => timedSyncs(file, options.onSync as (ms: number) => void) } : {}),
  });
  return {
    state,
    created: journal.created,
    append: (record, durable) => {
      applyRecord(state, record);
      return journal.append(record, { durable });
    },
    close: () => journal.close(),
  };
}

/** The file, each of its syncs timed: `onSync` is told how long each one that succeeded took. */
function timedSyncs(file: JournalFile, onSync: (ms: number) => void): JournalFile {
  return {
    write: (data) => file.write(data),
    close: () => file.close(),
    sync: async () => {
      const started = performance.now();
      await file.sync();
      onSync(performance.now() - started);
    },
  };
}
