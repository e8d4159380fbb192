/**
 * What a run's sinks hold and still owe, as the journal tells it: uploaded and pending files and
 * bytes, for the report, notifications and the end-of-run sentence ("3 uploads pending: ..."),
 * and the objects to name: conflicts (another object at the key, not overwritten) and uploads
 * whose bytes the store could not be made to vouch for (unverified). Give it the instances of the
 * steps that have a sink.
 */
import { pendingSinkUploads, sinkConflicts, sinkUnverified, type InstanceState } from '../run/journal/run-state.js';
import { formatBytes } from '../util/format-bytes.js';

/** An object the report names: its instance, `s3://BUCKET/KEY`, and why, in words. */
export interface SinkNote {
  instance: string;
  uri: string;
  reason: string;
}

export interface SinkTotals {
  uploadedFiles: number;
  uploadedBytes: number;
  pendingFiles: number;
  pendingBytes: number;
  /** Instances with at least one pending upload: "completed, upload pending". */
  pendingInstances: number;
  /** Outputs kept out by another object at their key (`on_conflict: fail`): nothing overwritten, the run exits 1. */
  conflictFiles: number;
  /** Outputs kept out on purpose (`on_conflict: skip`): the other object stays. */
  skippedFiles: number;
  /** Uploaded outputs whose bytes in the store could not be checked. */
  unverifiedFiles: number;
  /** The first LISTED_NOTES conflicts and skips, in instance order (report.json's instance lines name every one). */
  conflicts: SinkNote[];
  /** The first LISTED_NOTES unverified uploads, in instance order. */
  unverified: SinkNote[];
}

/** Objects named in the totals, of each kind: a report of a million instances stays small. */
export const LISTED_NOTES = 50;

export const emptySinkTotals = (): SinkTotals => ({
  uploadedFiles: 0,
  uploadedBytes: 0,
  pendingFiles: 0,
  pendingBytes: 0,
  pendingInstances: 0,
  conflictFiles: 0,
  skippedFiles: 0,
  unverifiedFiles: 0,
  conflicts: [],
  unverified: [],
});

type SinkEntry = Pick<InstanceState, 'downloads' | 'sinkUploads'> & Partial<Pick<InstanceState, 'sinkConflicts' | 'sinkUnverified'>>;

/** An instance's conflicts and unverified uploads, as the report names them. */
export function sinkNotes(id: string, entry: SinkEntry): { conflicts: SinkNote[]; unverified: SinkNote[] } {
  const conflicts = sinkConflicts(entry).map((r) => ({
    instance: id,
    uri: `s3://${r.bucket}/${r.key}`,
    reason:
      r.action === 'skipped'
        ? `another object (${formatBytes(r.existingSize)}) is at the key; kept there (on_conflict: skip)`
        : `another object (${formatBytes(r.existingSize)}) is at the key; not overwritten`,
  }));
  const unverified = sinkUnverified({ sinkUploads: entry.sinkUploads, sinkUnverified: entry.sinkUnverified }).map((r) => ({
    instance: id,
    uri: `s3://${r.bucket}/${r.key}`,
    reason: r.reason,
  }));
  return { conflicts, unverified };
}

/** Counts one instance (of a step with a sink) into `totals`; `id` names it in the notes. */
export function addSinkEntry(totals: SinkTotals, entry: SinkEntry, id = ''): void {
  const pending = pendingSinkUploads(entry);
  totals.pendingFiles += pending.length;
  for (const download of pending) totals.pendingBytes += download.size;
  if (pending.length > 0) totals.pendingInstances++;
  for (const [output, download] of entry.downloads ?? []) {
    const record = entry.sinkUploads?.get(output);
    if (record && record.sha256 === download.sha256) {
      totals.uploadedFiles++;
      totals.uploadedBytes += record.size;
    }
  }
  if (!entry.sinkConflicts?.size && !entry.sinkUnverified?.size) return;
  for (const record of sinkConflicts(entry)) {
    if (record.action === 'skipped') totals.skippedFiles++;
    else totals.conflictFiles++;
  }
  const notes = sinkNotes(id, entry);
  totals.unverifiedFiles += notes.unverified.length;
  listed(totals.conflicts, notes.conflicts);
  listed(totals.unverified, notes.unverified);
}

/** Appends `more` to `notes` up to LISTED_NOTES. */
function listed(notes: SinkNote[], more: readonly SinkNote[]): void {
  for (const note of more) {
    if (notes.length >= LISTED_NOTES) return;
    notes.push(note);
  }
}

/** Adds `other`'s counts into `totals` (the halves of a report read by two threads: `other` is the later half). */
export function absorbSinkTotals(totals: SinkTotals, other: SinkTotals): void {
  totals.uploadedFiles += other.uploadedFiles;
  totals.uploadedBytes += other.uploadedBytes;
  totals.pendingFiles += other.pendingFiles;
  totals.pendingBytes += other.pendingBytes;
  totals.pendingInstances += other.pendingInstances;
  totals.conflictFiles += other.conflictFiles;
  totals.skippedFiles += other.skippedFiles;
  totals.unverifiedFiles += other.unverifiedFiles;
  listed(totals.conflicts, other.conflicts);
  listed(totals.unverified, other.unverified);
}

export function sinkTotals(instances: Iterable<SinkEntry>): SinkTotals {
  const totals = emptySinkTotals();
  for (const entry of instances) addSinkEntry(totals, entry);
  return totals;
}
