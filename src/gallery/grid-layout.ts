/**
 * A step's contact sheet as a grid: which axis runs down the rows, which across the columns, and
 * which split it into pages. By default the axis with the most values gives the rows, the one with
 * the second most the columns, and every other axis a page each combination of its values; a
 * manifest's `gallery: {rows, cols, pages}` (per step) overrides any of them, and so can the page.
 */
import { naturalCompare } from '../util/natural-compare.js';

export interface AxisValues {
  name: string;
  /** Distinct labels in natural order (`2` before `11`). */
  values: string[];
}

export interface GridLayout {
  rows: string | undefined;
  cols: string | undefined;
  pages: string[];
}

export interface LayoutChoice {
  rows?: string | undefined;
  cols?: string | undefined;
  pages?: readonly string[] | undefined;
}

export { naturalCompare };

/** Axes from their labels (axis → labels, in first-seen axis order), each with its labels in natural order. */
export function sortedAxes(labels: ReadonlyMap<string, ReadonlySet<string>>): AxisValues[] {
  return [...labels].map(([name, set]) => ({ name, values: [...set].sort(naturalCompare) }));
}

/** Chooses the grid for `axes`; names in `choice` that are not axes are ignored. */
export function chooseLayout(axes: readonly AxisValues[], choice: LayoutChoice = {}): GridLayout {
  const names = new Set(axes.map((a) => a.name));
  const pick = (name: string | undefined): string | undefined => (name !== undefined && names.has(name) ? name : undefined);
  let rows = pick(choice.rows);
  let cols = pick(choice.cols);
  if (cols === rows) cols = undefined;
  // Most values first; ties keep the manifest's axis order.
  const bySize = [...axes]
    .map((a, i) => ({ a, i }))
    .sort((x, y) => y.a.values.length - x.a.values.length || x.i - y.i)
    .map((x) => x.a.name);
  const pagesChosen = (choice.pages ?? []).filter((p) => names.has(p) && p !== rows && p !== cols);
  const free = bySize.filter((n) => n !== rows && n !== cols && !pagesChosen.includes(n));
  rows ??= free.shift();
  cols ??= free.shift();
  return { rows, cols, pages: [...pagesChosen, ...free] };
}
