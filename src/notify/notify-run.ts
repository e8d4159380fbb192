/**
 * The end of a run, told to the team: after the run's work is over and its report written, its
 * summary goes to every target that asked for this end's event; each delivery is journaled (after
 * run_finished) and one that failed is one warning line. Nothing here can change the run's exit code.
 */
import type { CostSummary } from '../report/cost-report.js';
import { appendToClosedJournal } from '../run/journal/journal.js';
import type { JournalRecordOf } from '../run/journal/journal-records.js';
import { redact } from '../util/redact.js';
import { deliverNotifications, type DeliverOptions, type DeliveryResult } from './deliver.js';
import { notifySummary, type RunEnd } from './notify-message.js';
import type { ResolvedTarget } from './notify-targets.js';
import { runFile } from '../run/files/run-layout.js';

export interface NotifyIO {
  err: (line: string) => void;
  quiet?: boolean | undefined;
}

export async function notifyRunEnd(
  targets: readonly ResolvedTarget[],
  end: RunEnd,
  report: Pick<CostSummary, 'total' | 'sink'> | undefined,
  io: NotifyIO,
  options: DeliverOptions = {},
): Promise<DeliveryResult[]> {
  if (targets.length === 0) return [];
  let results: DeliveryResult[];
  try {
    results = await deliverNotifications(targets, notifySummary(end, report), options);
  } catch (error) {
    // deliverNotifications settles every target itself; this is a bug's last line of defence.
    io.err(redact(`warning: the run's notifications were not sent: ${error instanceof Error ? error.message : String(error)}`));
    return [];
  }
  try {
    await appendToClosedJournal(runFile(end.runDir, 'journal'), results.map(recordOf));
  } catch (error) {
    io.err(
      redact(`warning: the notifications' deliveries could not be journaled: ${error instanceof Error ? error.message : String(error)}`),
    );
  }
  for (const r of results) {
    if (!r.delivered)
      io.err(
        `warning: the ${r.event} notification to ${r.target} was not delivered (${r.attempts} attempt${r.attempts === 1 ? '' : 's'}): ${r.error ?? 'no reason given'}.`,
      );
    else if (!io.quiet) io.err(`notified ${r.target} (${r.event}, ${r.format}).`);
  }
  return results;
}

function recordOf(r: DeliveryResult): JournalRecordOf<'notify'> {
  return {
    type: 'notify',
    event: r.event,
    target: r.target,
    format: r.format,
    delivered: r.delivered,
    attempts: r.attempts,
    ...(r.status === undefined ? {} : { status: r.status }),
    ...(r.error === undefined ? {} : { error: r.error }),
  };
}
