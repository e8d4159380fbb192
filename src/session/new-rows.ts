/**
 * A resume plans from the CSV rows its run recorded, never from today's file. Rows added to the
 * file since are not run by it: this says how many there are, and what picks them up.
 */
import { csvRowOrigin, resolveAxis } from '../manifest/axes.js';
import { csvRowKey, type Plan } from '../plan/plan.js';
import type { SkippedRow } from '../plan/skipped-rows.js';
import type { RecordedAxes } from '../run/files/run-inputs.js';

/** How many rows today's CSV files have that the run's recorded plan has not (nor set aside as invalid). */
export async function countNewRows(plan: Plan, recorded: RecordedAxes, skipped: readonly SkippedRow[]): Promise<number> {
  let count = 0;
  for (const step of plan.steps) {
    for (const [name, spec] of Object.entries(step.step.matrix ?? {})) {
      if (Array.isArray(spec) || !('csv' in spec)) continue;
      const had = recorded(step.id, name);
      if (had?.kind !== 'csv') continue;
      const known = new Set(had.rows.map((row) => csvRowKey(spec, row.values, row.line)));
      for (const row of skipped) if (row.step === step.id && row.axis === name) known.add(row.key);
      let today;
      try {
        today = await resolveAxis(name, spec, { dir: plan.loaded.dir });
      } catch {
        // A file that cannot be read today is not news about rows: the resume runs what it recorded.
        continue;
      }
      for (let i = 0; i < today.length; i++) {
        const values = today.value(i);
        if (!known.has(csvRowKey(spec, values, csvRowOrigin(values)?.line ?? i + 2))) count++;
      }
    }
  }
  return count;
}

/** The one line a resume says of them, before anything is sent. */
export function newRowsSentence(count: number): string {
  return `note: the CSV files have ${count} row${count === 1 ? '' : 's'} this run's recorded plan does not have; this resume does not add ${count === 1 ? 'it' : 'them'}: a new run with --reuse picks ${count === 1 ? 'it' : 'them'} up, reusing what this run made.`;
}
