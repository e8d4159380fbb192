/**
 * What a run's sinks hold and still owe, as the journal tells it: uploaded and pending files and
 * bytes, for the report and the end-of-run sentence ("3 uploads pending: ..."). Give it the
 * instances of the steps that have a sink.
 */
import { pendingSinkUploads, type InstanceState } from '../run/run-state.js';

export interface SinkTotals {
  uploadedFiles: number;
  uploadedBytes: number;
  pendingFiles: number;
  pendingBytes: number;
  /** Instances with at least one pending upload: "completed, upload pending". */
  pendingInstances: number;
}

export function sinkTotals(instances: Iterable<Pick<InstanceState, 'downloads' | 'sinkUploads'>>): SinkTotals {
  const totals: SinkTotals = { uploadedFiles: 0, uploadedBytes: 0, pendingFiles: 0, pendingBytes: 0, pendingInstances: 0 };
  for (const entry of instances) {
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
  return totals;
}
