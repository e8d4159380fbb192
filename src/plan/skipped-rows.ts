/**
 * CSV rows set aside as invalid (`on_invalid: skip` on a CSV axis, or `genpipe run --skip-invalid`):
 * what the plan, the run's output, plan.json, the report and a notification say of them, from one
 * definition. Only a problem located in one row's cells makes a row skippable (plan.ts decides).
 */

/** One bad cell of a row that was left out of the plan. */
export interface SkippedRow {
  step: string;
  /** The CSV axis the row belongs to. */
  axis: string;
  /** The CSV file, as messages name it. */
  file: string;
  /** The row's line in the file (the number messages give as "row N"). */
  row: number;
  /** The row's identity across runs: its `key` column's value, or its line when the axis has no key. */
  key: string;
  /** The column's name, and its 1-based position. */
  column: string;
  col: number;
  /** Why the cell is refused, in one sentence. */
  reason: string;
}

/** How many distinct rows the cells belong to (a row with two bad cells is one row). */
export function skippedRowCount(rows: readonly SkippedRow[]): number {
  return new Set(rows.map((r) => `${r.step}\u0000${r.axis}\u0000${r.row}`)).size;
}

/** `products.csv row 5, column 4 ("image")`: where a skipped cell is. */
export const skippedCellWhere = (r: SkippedRow): string => `${r.file} row ${r.row}, column ${r.col} ("${r.column}")`;

/** "5 CSV rows were skipped as invalid: nothing was sent for them." */
export function skippedRowsSentence(rows: readonly SkippedRow[]): string {
  const n = skippedRowCount(rows);
  return `${n} CSV row${n === 1 ? ' was' : 's were'} skipped as invalid: nothing was sent for ${n === 1 ? 'it' : 'them'}.`;
}

/** The sentence, then one line per bad cell (at most `max`, then how many more). */
export function skippedRowsLines(rows: readonly SkippedRow[], max = 20): string[] {
  if (rows.length === 0) return [];
  const shown = rows.slice(0, max).map((r) => `  ${skippedCellWhere(r)}: ${r.reason}`);
  const more = rows.length > max ? [`  ... and ${rows.length - max} more (report.md lists every one)`] : [];
  return [skippedRowsSentence(rows), ...shown, ...more];
}

/** In plan order: by step, then row, then column. */
export function sortSkippedRows(rows: Iterable<SkippedRow>, stepOrder: readonly string[]): SkippedRow[] {
  return [...rows].sort(
    (a, b) => stepOrder.indexOf(a.step) - stepOrder.indexOf(b.step) || a.axis.localeCompare(b.axis) || a.row - b.row || a.col - b.col,
  );
}
