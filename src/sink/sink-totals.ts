/**
 * What a run's sinks hold and still owe, as the journal tells it: uploaded and pending files and
 * bytes, for the report, notifications and the end-of-run sentence ("3 uploads pending: ...").
 * Give it the instances of the steps that have a sink.
 */
import { pendingSinkUploads, type InstanceState } from '../run/journal/run-state.js';

export interface SinkTotals {
  uploadedFiles: number;
  uploadedBytes: number;
  pendingFiles: number;
  pendingBytes: number;
  /** Instances with at least one pending upload: "completed, upload pending". */
  pendingInstances: number;
}

export const emptySinkTotals = (): SinkTotals => ({
  uploadedFiles: 0,
  uploadedBytes: 0,
  pendingFiles: 0,
  pendingBytes: 0,
  pendingInstances: 0,
});

/** Counts one instance (of a step with a sink) into `totals`. */
export function addSinkEntry(totals: SinkTotals, entry: Pick<InstanceState, 'downloads' | 'sinkUploads'>): void {
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
}

/** Adds `other`'s counts into `totals` (the halves of a report read by two threads). */
export function absorbSinkTotals(totals: SinkTotals, other: SinkTotals): void {
  totals.uploadedFiles += other.uploadedFiles;
  totals.uploadedBytes += other.uploadedBytes;
  totals.pendingFiles += other.pendingFiles;
  totals.pendingBytes += other.pendingBytes;
  totals.pendingInstances += other.pendingInstances;
}

export function sinkTotals(instances: Iterable<Pick<InstanceState, 'downloads' | 'sinkUploads'>>): SinkTotals {
  const totals = emptySinkTotals();
  for (const entry of instances) addSinkEntry(totals, entry);
  return totals;
}
