/**
 * Sweep axes resolved into indexable sequences. Ranges stay lazy (a million seeds cost nothing);
 * CSV rows are read once (streamed, after a size check); presets come from a source the plan layer injects, because this layer
 * sends no HTTP.
 */
import { isAbsolute, relative, resolve } from 'node:path';
import type { Preset } from '../api/wire.js';
import type { Axis } from './schema.js';
import { readCsv } from './csv.js';

export interface ResolvedAxis {
  readonly name: string;
  readonly length: number;
  /** The value templates see as `{{ name }}`. */
  value(index: number): unknown;
  /** The value as it appears in instance ids: short, stable, readable. */
  label(index: number): string;
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
}

/** A problem with one axis; the caller locates it at the axis in the manifest (or in the CSV file). */
export class AxisError extends Error {
  override readonly name = 'AxisError';
}

export function globToRegExp(glob: string): RegExp {
  const escaped = glob.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.');
  return new RegExp(`^${escaped}$`, 'i');
}

const scalarLabel = (value: unknown): string => {
  const text = value === null ? 'null' : String(value);
  // Quote what would make an id ambiguous.
  return /^[^,=[\]"\s]+$/.test(text) ? text : JSON.stringify(text);
};

function listAxis(name: string, values: readonly unknown[]): ResolvedAxis {
  return {
    name,
    length: values.length,
    value: (i) => values[i],
    label: (i) => {
      const value = values[i];
      return value !== null && typeof value === 'object' ? `#${i}` : scalarLabel(value);
    },
  };
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
    const { columns, rows } = await readCsv(path, display);
    const where = Object.entries(axis.where ?? {});
    for (const [column] of where) {
      if (!columns.includes(column)) throw new AxisError(`the CSV file ${display} has no column "${column}" (columns: ${columns.join(', ')})`);
    }
    const kept = rows.filter((row) =>
      where.every(([column, wanted]) => {
        const cell = row.values[column] ?? '';
        return Array.isArray(wanted) ? wanted.some((w) => String(w) === cell) : String(wanted) === cell;
      }),
    );
    if (kept.length === 0) throw new AxisError(`no row of ${display} matches the where filter`);
    return { name, length: kept.length, value: (i) => kept[i]?.values, label: (i) => String(kept[i]?.line ?? i) };
  }
  if (!context.presets) throw new AxisError('preset axes need the preset catalog, which is not available here');
  const all = await context.presets();
  const pattern = axis.presets.name === undefined ? undefined : globToRegExp(axis.presets.name);
  const matched = all.filter((p) => !pattern || pattern.test(p.name)).slice(0, axis.presets.limit ?? Number.POSITIVE_INFINITY);
  if (matched.length === 0) throw new AxisError(`no visible preset matches ${axis.presets.name === undefined ? 'the filter' : `the name "${axis.presets.name}"`}`);
  return { name, length: matched.length, value: (i) => matched[i], label: (i) => scalarLabel(matched[i]?.name ?? i) };
}
