/**
 * Matrix expansion, streamed: the cartesian product of the axes (zipped groups advance together),
 * then `exclude`, then `include`, with GitHub Actions' semantics:
 * - an exclude entry drops every combination that matches all of its values (objects match
 *   partially, so `{row: {region: EU}}` drops every EU row);
 * - an include entry is added to every combination whose original matrix values it does not
 *   overwrite (added values may be overwritten by a later include); an entry that fits no
 *   combination becomes a new combination, emitted after the product;
 * - with no axes at all, each include entry is a combination.
 * Memory stays flat: one combination at a time, plus one flag per include entry.
 */
import { isDeepStrictEqual } from 'node:util';
import type { ResolvedAxis } from '../manifest/axes.js';

export interface Combination {
  /** What templates see: axis name → value. */
  values: Record<string, unknown>;
  /** The id part, in axis order: `tier=cats,seed=3`. */
  label: string;
}

export interface MatrixSpec {
  axes: readonly ResolvedAxis[];
  /** Groups of axis names that advance together. */
  zip?: readonly (readonly string[])[] | undefined;
  include?: readonly Record<string, unknown>[] | undefined;
  exclude?: readonly Record<string, unknown>[] | undefined;
}

/** A group of axes that moves as one: a single axis, or a zipped group. */
interface Dimension {
  axes: ResolvedAxis[];
  length: number;
}

export class MatrixError extends Error {
  override readonly name = 'MatrixError';
  constructor(
    message: string,
    readonly at: readonly (string | number)[],
  ) {
    super(message);
  }
}

function dimensions(spec: MatrixSpec): Dimension[] {
  const byName = new Map(spec.axes.map((a) => [a.name, a]));
  const zipped = new Map<string, number>();
  const dims: Dimension[] = [];
  (spec.zip ?? []).forEach((group, g) => {
    const axes: ResolvedAxis[] = [];
    for (const name of group) {
      const axis = byName.get(name);
      if (!axis) throw new MatrixError(`zip names "${name}", which is not an axis of the matrix`, ['zip', g]);
      if (zipped.has(name)) throw new MatrixError(`axis "${name}" is in two zip groups`, ['zip', g]);
      zipped.set(name, g);
      axes.push(axis);
    }
    const lengths = axes.map((a) => a.length);
    if (new Set(lengths).size > 1) {
      throw new MatrixError(`zipped axes must have the same length: ${axes.map((a) => `${a.name} has ${a.length}`).join(', ')}`, [
        'zip',
        g,
      ]);
    }
    dims.push({ axes, length: lengths[0] ?? 0 });
  });
  // Keep the manifest's axis order: a zip group sits where its first axis stands.
  const ordered: Dimension[] = [];
  for (const axis of spec.axes) {
    const group = zipped.get(axis.name);
    if (group === undefined) ordered.push({ axes: [axis], length: axis.length });
    else if (dims[group]?.axes[0] === axis) ordered.push(dims[group]);
  }
  return ordered;
}

/** Number of combinations of the product, before exclude and include. */
export function productSize(spec: MatrixSpec): number {
  return dimensions(spec).reduce((n, d) => n * d.length, 1);
}

/** `value` matches `wanted` when equal, or, for objects, when it holds every field of `wanted`. */
function matches(value: unknown, wanted: unknown): boolean {
  if (wanted !== null && typeof wanted === 'object' && !Array.isArray(wanted) && value !== null && typeof value === 'object') {
    return Object.entries(wanted).every(([k, v]) => matches((value as Record<string, unknown>)[k], v));
  }
  return isDeepStrictEqual(value, wanted);
}

const labelOf = (value: unknown): string => {
  if (value !== null && typeof value === 'object') return JSON.stringify(value);
  const text = value === null ? 'null' : String(value);
  return /^[^,=[\]"\s]+$/.test(text) ? text : JSON.stringify(text);
};

export function* expandMatrix(spec: MatrixSpec): Generator<Combination> {
  const dims = dimensions(spec);
  const exclude = spec.exclude ?? [];
  const include = spec.include ?? [];
  const original = new Set(spec.axes.map((a) => a.name));
  for (const [i, entry] of exclude.entries()) {
    for (const key of Object.keys(entry)) {
      if (!original.has(key)) throw new MatrixError(`exclude names "${key}", which is not an axis of the matrix`, ['exclude', i, key]);
    }
  }
  if (dims.length === 0) {
    if (include.length === 0) {
      yield { values: {}, label: '' };
      return;
    }
    for (const entry of include)
      yield {
        values: { ...entry },
        label: Object.entries(entry)
          .map(([k, v]) => `${k}=${labelOf(v)}`)
          .join(','),
      };
    return;
  }
  if (dims.some((d) => d.length === 0)) return;
  const used = new Array<boolean>(include.length).fill(false);
  const counters = new Array<number>(dims.length).fill(0);
  for (;;) {
    const values: Record<string, unknown> = {};
    let label = '';
    for (let d = 0; d < dims.length; d++) {
      const index = counters[d] ?? 0;
      for (const axis of (dims[d] as Dimension).axes) {
        values[axis.name] = axis.value(index);
        label += `${label === '' ? '' : ','}${axis.name}=${axis.label(index)}`;
      }
    }
    if (exclude.length === 0 || !exclude.some((entry) => Object.entries(entry).every(([k, v]) => matches(values[k], v)))) {
      // A copy only when include entries may add to the values (a spread per combination is slow).
      const originalValues = include.length === 0 ? values : { ...values };
      include.forEach((entry, i) => {
        const fits = Object.entries(entry).every(([k, v]) => !original.has(k) || isDeepStrictEqual(originalValues[k], v));
        if (!fits) return;
        used[i] = true;
        for (const [k, v] of Object.entries(entry)) if (!original.has(k)) values[k] = v;
      });
      yield { values, label };
    }
    // Odometer: the last dimension turns fastest.
    let d = dims.length - 1;
    for (; d >= 0; d--) {
      const next = (counters[d] ?? 0) + 1;
      if (next < (dims[d]?.length ?? 0)) {
        counters[d] = next;
        break;
      }
      counters[d] = 0;
    }
    if (d < 0) break;
  }
  for (const [i, entry] of include.entries()) {
    if (!used[i])
      yield {
        values: { ...entry },
        label: Object.entries(entry)
          .map(([k, v]) => `${k}=${labelOf(v)}`)
          .join(','),
      };
  }
}
