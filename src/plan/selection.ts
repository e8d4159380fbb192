/**
 * Subset runs: `--only 'sheets[tier=cats]'` and `--limit 10`, for a smoke test before a big sweep.
 * A selection only leaves instances out: ids, inputs and keys stay what the full plan gives them,
 * so a later full run with `--reuse` takes what the smoke test made.
 *
 * - A selector is a step id, optionally with `[axis=value,...]` matched against the labels the
 *   instance ids show (`tier=cats`, `row=SKU-1`, `preset="Summer Market"` or `preset=Summer Market`).
 * - Several `--only` select their union. Without `--only` every step is selected.
 * - `--limit N` keeps the first N selected instances of each step that is not a for_each step; a
 *   for_each step follows only the selected upstream instances.
 */
import { GenpipeError } from '../api/errors.js';
import { clip } from '../util/zod-issues.js';

export interface Selector {
  /** As the user wrote it, for messages and for plan.json. */
  text: string;
  step: string;
  where: readonly (readonly [axis: string, value: string])[];
}

export interface Selection {
  only?: readonly Selector[] | undefined;
  limit?: number | undefined;
}

const SELECTOR = /^([a-z][a-z0-9_-]{0,62})(?:\[(.*)\])?$/s;

/** Parses `sheets` or `sheets[tier=cats,seed=3]`; refuses anything else with one sentence. */
export function parseSelector(text: string): Selector {
  const match = SELECTOR.exec(text.trim());
  const bad = (why: string): GenpipeError =>
    new GenpipeError(
      'invalid_input',
      `--only ${JSON.stringify(clip(text))} ${why}; write a step id, optionally with axis values: 'sheets' or 'sheets[tier=cats,seed=3]'.`,
    );
  if (!match) throw bad('is not a selector');
  const where: [string, string][] = [];
  if (match[2] !== undefined) {
    for (const part of splitLabel(match[2])) {
      const eq = part.indexOf('=');
      if (eq <= 0) throw bad(`has ${JSON.stringify(clip(part))}, which is not axis=value`);
      where.push([part.slice(0, eq).trim(), unquote(part.slice(eq + 1).trim())]);
    }
    if (where.length === 0) throw bad('has empty brackets');
  }
  return { text, step: match[1] as string, where };
}

/** Splits `tier=cats,preset="a, b"` on the commas outside JSON-quoted labels. */
export function splitLabel(label: string): string[] {
  const parts: string[] = [];
  let start = 0;
  let quoted = false;
  for (let i = 0; i < label.length; i++) {
    const c = label[i];
    if (quoted && c === '\\') i++;
    else if (c === '"') quoted = !quoted;
    else if (c === ',' && !quoted) {
      parts.push(label.slice(start, i));
      start = i + 1;
    }
  }
  if (start < label.length) parts.push(label.slice(start));
  return parts;
}

/** A label as the user reads it: a JSON-quoted label (`"Summer Market"`) without its quotes. */
export function unquote(label: string): string {
  if (!label.startsWith('"')) return label;
  try {
    const value: unknown = JSON.parse(label);
    return typeof value === 'string' ? value : label;
  } catch {
    return label;
  }
}

/**
 * A test of a combination's label (`tier=cats,seed=3`) against the selectors of one step: true
 * when any selector's every axis=value is in the label.
 */
export function labelMatcher(selectors: readonly Selector[]): (label: string) => boolean {
  if (selectors.some((s) => s.where.length === 0)) return () => true;
  return (label) => {
    const values = new Map<string, string>();
    for (const part of splitLabel(label)) {
      const eq = part.indexOf('=');
      values.set(part.slice(0, eq), unquote(part.slice(eq + 1)));
    }
    return selectors.some((s) => s.where.every(([axis, value]) => values.get(axis) === value));
  };
}
