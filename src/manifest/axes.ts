/**
 * Sweep axes resolved into indexable sequences. Ranges stay lazy (a million seeds cost nothing);
 * CSV rows are read once (streamed, after a size check); presets come from a source the plan layer injects, because this layer
 * sends no HTTP.
 */
import { isAbsolute, relative, resolve } from 'node:path';
import type { Preset } from '../api/wire.js';
import type { Axis } from './schema.js';
import { CsvError, readCsv, type CsvRow } from './csv.js';

export interface ResolvedAxis {
  readonly name: string;
  readonly length: number;
  /** The value templates see as `{{ name }}`. */
  value(index: number): unknown;
  /** The value as it appears in instance ids: short, stable, readable. */
  label(index: number): string;
  /** A CSV axis: the file's columns, for checking `{{ row.column }}` at plan time. */
  readonly columns?: readonly string[];
  /** A CSV axis: the columns whose empty cells are accepted (`allow_empty`). */
  readonly allowEmpty?: readonly string[];
}

/** Where a CSV row came from: the file (as shown to the user) and the line it starts on. */
export interface CsvRowOrigin {
  readonly file: string;
  readonly line: number;
  readonly columns: readonly string[];
}

const csvOrigins = new WeakMap<object, CsvRowOrigin>();

/** The origin of a value a CSV axis gave templates (its row), or undefined for any other value. */
export function csvRowOrigin(value: unknown): CsvRowOrigin | undefined {
  return value !== null && typeof value === 'object' ? csvOrigins.get(value) : undefined;
}

export interface PresetFilter {
  /** A glob on the preset name: `*` any run of characters, `?` one character; case-insensitive. */
  name?: string | undefined;
  limit?: number | undefined;
}

/** Lists every visible preset (all pages). Injected by the plan layer. */
export type PresetSource = () => Promise<readonly Preset[]>;

export interface AxisContext {
  /** The manifest's folder: CSV paths are relative to it. */
  dir: string;
  presets?: PresetSource | undefined;
  /** What a run read for this axis when it started (its run directory keeps it): read instead of today's file or catalog. */
  recorded?: RecordedAxis | undefined;
  /** A CSV axis: the lines of the rows set aside as invalid (`on_invalid: skip`), left out of the axis. */
  skipLines?: ReadonlySet<number> | undefined;
}

/**
 * An axis's data as a run read it: a CSV axis's rows (after its `where`, with their lines) or a
 * preset axis's presets. Filtering them again gives the same values, labels and ids.
 */
export type RecordedAxis =
  { kind: 'csv'; columns: readonly string[]; rows: readonly CsvRow[] } | { kind: 'presets'; presets: readonly Preset[] };

/** A problem with one axis; the caller locates it at the axis in the manifest (or in the CSV file). */
export class AxisError extends Error {
  override readonly name = 'AxisError';
}

export function globToRegExp(glob: string): RegExp {
  const escaped = glob
    .replace(/[.+^${}()|[\]\\]/g, '\\$&')
    .replace(/\*/g, '.*')
    .replace(/\?/g, '.');
  return new RegExp(`^${escaped}$`, 'i');
}

const scalarLabel = (value: unknown): string => {
  const text = value === null ? 'null' : String(value);
  // Quote what would make an id ambiguous.
  return /^[^,=[\]"\s]+$/.test(text) ? text : JSON.stringify(text);
};

function listAxis(name: string, values: readonly unknown[]): ResolvedAxis {
  const label = (i: number): string => {
    const value = values[i];
    return value !== null && typeof value === 'object' ? `#${i}` : scalarLabel(value);
  };
  // A value twice (or two that read alike in an id, 7 and "7") would make two instances with one id:
  // two requests paid for one instance the journal, outputs and report can tell apart.
  const seen = new Map<string, number>();
  for (let i = 0; i < values.length; i++) {
    const first = seen.get(label(i));
    if (first !== undefined)
      throw new AxisError(
        `the values of "${name}" repeat: items ${first + 1} and ${i + 1} both name the instance ${name}=${label(i)}; give each value once`,
      );
    seen.set(label(i), i);
  }
  return { name, length: values.length, value: (i) => values[i], label };
}

export async function resolveAxis(name: string, axis: Axis, context: AxisContext): Promise<ResolvedAxis> {
  if (Array.isArray(axis)) return listAxis(name, axis);
  if ('range' in axis) {
    const { from, to } = axis.range;
    const step = axis.range.step ?? 1;
    const length = Math.floor((to - from) / step) + 1;
    return { name, length, value: (i) => from + i * step, label: (i) => String(from + i * step) };
  }
  if ('csv' in axis) {
    const path = isAbsolute(axis.csv) ? axis.csv : resolve(context.dir, axis.csv);
    const fromCwd = relative(process.cwd(), path);
    const display = fromCwd === '' || fromCwd.startsWith('..') ? path : fromCwd;
    const { columns, rows } =
      context.recorded?.kind === 'csv' ? context.recorded : await readCsv(path, display, { delimiter: axis.delimiter });
    const where = Object.entries(axis.where ?? {});
    for (const column of [...where.map(([c]) => c), ...(axis.key === undefined ? [] : [axis.key]), ...(axis.allow_empty ?? [])]) {
      if (!columns.includes(column))
        throw new AxisError(`the CSV file ${display} has no column "${column}" (columns: ${columns.join(', ')})`);
    }
    let kept = rows.filter((row) =>
      where.every(([column, wanted]) => {
        const cell = row.values[column] ?? '';
        return Array.isArray(wanted) ? wanted.some((w) => String(w) === cell) : String(wanted) === cell;
      }),
    );
    if (rows.length === 0) throw new AxisError(`the CSV file ${display} has no rows under its header`);
    if (kept.length === 0) throw new AxisError(`no row of ${display} matches the where filter`);
    const skip = context.skipLines;
    if (skip !== undefined && skip.size > 0) {
      kept = kept.filter((row) => !skip.has(row.line));
      if (kept.length === 0) throw new AxisError(`every row of ${display} has a problem, so none is left to run`);
    }
    for (const row of kept) csvOrigins.set(row.values, { file: display, line: row.line, columns });
    const label = axis.key === undefined ? (i: number) => String(kept[i]?.line ?? i) : keyLabels(kept, axis.key, columns, display);
    return { name, length: kept.length, value: (i) => kept[i]?.values, label, columns, allowEmpty: axis.allow_empty ?? [] };
  }
  const recorded = context.recorded?.kind === 'presets' ? context.recorded.presets : undefined;
  if (!recorded && !context.presets) throw new AxisError('preset axes need the preset catalog, which is not available here');
  const all = recorded ?? (await (context.presets as PresetSource)());
  const pattern = axis.presets.name === undefined ? undefined : globToRegExp(axis.presets.name);
  const matched = all.filter((p) => !pattern || pattern.test(p.name)).slice(0, axis.presets.limit ?? Number.POSITIVE_INFINITY);
  if (matched.length === 0)
    throw new AxisError(`no visible preset matches ${axis.presets.name === undefined ? 'the filter' : `the name "${axis.presets.name}"`}`);
  return { name, length: matched.length, value: (i) => matched[i], label: (i) => scalarLabel(matched[i]?.name ?? i) };
}

/** Row labels from a key column: every kept row has a value there, and no two share one. */
function keyLabels(rows: readonly CsvRow[], key: string, columns: readonly string[], display: string): (i: number) => string {
  const col = columns.indexOf(key) + 1;
  const lineOf = new Map<string, number>();
  for (const row of rows) {
    const value = (row.values[key] ?? '').trim();
    if (value === '')
      throw new CsvError(`row ${row.line} has an empty key: column "${key}" names the rows, so every row needs a value there`, {
        file: display,
        line: row.line,
        col,
      });
    const first = lineOf.get(value);
    if (first !== undefined)
      throw new CsvError(
        `row ${row.line} repeats the key ${JSON.stringify(value)} of row ${first}: column "${key}" names the rows, so its values must be unique`,
        { file: display, line: row.line, col },
      );
    lineOf.set(value, row.line);
  }
  return (i) => scalarLabel((rows[i]?.values[key] ?? '').trim());
}
