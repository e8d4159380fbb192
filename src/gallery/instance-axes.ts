/**
 * The sweep values of an instance, read back from its id, so the gallery needs only the journal:
 * `sheets[tier=cats,seed=3]` is `{tier: cats, seed: 3}`; a for_each instance
 * `clips[sheets[tier=cats,seed=3],motion=2]` carries its upstream's values first (named
 * `sheets.tier` when its own axes use the same name), so it sits next to its upstream.
 */
import { splitLabel, unquote } from '../plan/selection.js';

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

/** Where the leading upstream id of a for_each id's brackets ends, or -1 when it has none. */
function upstreamIdEnd(inner: string): number {
  const match = /^[a-z][a-z0-9_-]{0,62}(\[|$|,)/.exec(inner);
  if (!match) return -1;
  if (match[1] !== '[') return match[0].length - (match[1] === ',' ? 1 : 0);
  let depth = 0;
  let quoted = false;
  for (let i = match[0].length - 1; i < inner.length; i++) {
    const c = inner[i];
    if (quoted) {
      if (c === '\\') i++;
      else if (c === '"') quoted = false;
    } else if (c === '"') quoted = true;
    else if (c === '[') depth++;
    else if (c === ']' && --depth === 0) return i + 1;
  }
  return -1;
}
