/**
 * Runs that did not start (a tick skipped for an overlap, refused for its configuration): one line
 * each in `<out>/<pipeline>/not-started.jsonl`, written by the session and listed by `genpipe runs`.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { RUN_FILES } from '../run/files/run-layout.js';

export const NOT_STARTED_FILE = RUN_FILES.notStarted;

export interface NotStartedRecord {
  /** A run id of the moment (same form as a run's), so these sort among the runs. */
  id: string;
  at: string;
  status: 'skipped' | 'refused';
  exit_code: number;
  /** One sentence, redacted. */
  reason: string;
  /** The run that held the lock, for a skip. */
  overlap_with?: string | undefined;
}

/** `refused: no service address is set`, `skipped: overlap with run X`: what `genpipe runs` shows. */
export function notStartedStatus(record: Pick<NotStartedRecord, 'status' | 'reason' | 'overlap_with'>): string {
  if (record.status === 'skipped') return `skipped: overlap with ${record.overlap_with ? `run ${record.overlap_with}` : 'another run'}`;
  const clause = (record.reason.split(/[:;]/)[0] ?? record.reason).replace(/\.$/, '').trim();
  return `refused: ${clause.charAt(0).toLowerCase()}${clause.slice(1)}`;
}

/** The records of one pipeline folder; a torn or foreign line is passed over. */
export async function readNotStarted(pipelineDir: string): Promise<NotStartedRecord[]> {
  let text: string;
  try {
    text = await readFile(join(pipelineDir, NOT_STARTED_FILE), 'utf8');
  } catch {
    return [];
  }
  const records: NotStartedRecord[] = [];
  for (const line of text.split('\n')) {
    try {
      const record = JSON.parse(line) as NotStartedRecord;
      if (typeof record.id === 'string' && (record.status === 'skipped' || record.status === 'refused')) records.push(record);
    } catch {
      // An empty or torn line.
    }
  }
  return records;
}
