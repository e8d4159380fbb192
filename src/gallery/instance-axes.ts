/**
 * The sweep values of an instance, read back from its id, so the gallery needs only the journal:
 * `sheets[tier=cats,seed=3]` is `{tier: cats, seed: 3}`; a for_each instance
 * `clips[sheets[tier=cats,seed=3],motion=2]` carries its upstream's values first (named
 * `sheets.tier` when its own axes use the same name), so it sits next to its upstream.
 */
import { splitLabel, unquote } from '../plan/selection.js';
import { upstreamIdEnd } from '../plan/instance-order.js';

export interface InstanceAxes {
  step: string;
  /** Axis name → label, in the order the id gives them. */
  values: [axis: string, label: string][];
}

export function instanceAxes(id: string): InstanceAxes {
  const open = id.indexOf('[');
  if (open < 0 || !id.endsWith(']')) return { step: id, values: [] };
  const step = id.slice(0, open);
  const inner = id.slice(open + 1, -1);
  const values: [string, string][] = [];
  let rest = inner;
  // A for_each id starts with its upstream's id: a step name and a bracket before any `=`.
  const upstreamEnd = upstreamIdEnd(inner);
  if (upstreamEnd > 0) {
    const upstream = instanceAxes(inner.slice(0, upstreamEnd));
    rest = inner.slice(upstreamEnd + 1);
    const own = splitLabel(rest).map((part) => part.slice(0, part.indexOf('=')));
    for (const [axis, label] of upstream.values) values.push([own.includes(axis) ? `${upstream.step}.${axis}` : axis, label]);
  }
  for (const part of rest === '' ? [] : splitLabel(rest)) {
    const eq = part.indexOf('=');
    if (eq > 0) values.push([part.slice(0, eq), unquote(part.slice(eq + 1))]);
  }
  return { step, values };
}
