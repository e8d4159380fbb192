/**
 * The order every view lists instances in (report.md, report.csv, report.json, outputs.csv,
 * outputs.jsonl, the gallery): steps in manifest order, then each axis in manifest order, its
 * values in manifest order where plan.json recorded them (list values as written, CSV rows as in
 * the file, presets as the catalog gave them), numbers by value where it did not (a long range),
 * other text by code unit. A for_each instance sits after its upstream's order, then its own axes.
 * With no plan.json steps (or for a step it does not name), numbers by value and text by code unit.
 *
 * The order is a sort key made from the instance id and plan.json's steps alone, so a report
 * written long after its run (and its two threads, each from its own copy of the steps) gives the
 * same order. Keys compare by UTF-16 code unit, so an external sort that compares strings keeps
 * the order: `sortKey` ends with `#` and the id, which `idOfSortKey` reads back.
 *
 * Encoding (all printable ASCII, so JSON spill lines stay short): each value is one component,
 * ended by a space: `a` and its recorded position, `b` a negative number, `c` a number of at least
 * zero (digit count, digits, then `.` and decimals), `d` text (spaces, `!` and `#` escaped). A
 * for_each key holds its upstream's key, closed by `$`. Numbers written with an exponent (past
 * 1e21, below 1e-6) are text.
 */
import { splitLabel, unquote } from './selection.js';

/** What the order needs of a plan.json step. */
export interface OrderStep {
  id: string;
  for_each: string | null;
  /** Each axis's labels in manifest order, as plan.json records them (axes up to 1,000 values). */
  axes?: Record<string, string[]> | undefined;
}

interface StepOrder {
  /** The step's component: its position in plan.json, or (a step it does not name) after those, by name. */
  rank: string;
  forEach: boolean;
  /** Axis → label → its manifest position, made when first needed. */
  positions: Map<string, Map<string, number>>;
  axes: Record<string, string[]>;
}

const SEP = '#';
const CLOSE = '$';

/** A number of at least zero, as a component body: digit count, digits, then `.` and decimals. */
function positive(text: string): string {
  const point = text.indexOf('.');
  const whole = point < 0 ? text : text.slice(0, point);
  return `${String.fromCharCode(0x40 + whole.length)}${text}`;
}

/** A negative number (its magnitude's text): more digits and larger digits sort first. */
function negative(text: string): string {
  let out = String.fromCharCode(0x5a - (text.indexOf('.') < 0 ? text.length : text.indexOf('.')));
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    out += c === 0x2e ? '.' : String.fromCharCode(0x69 - c);
  }
  // `~` sorts after the digits and `.`: -5 comes after -5.5.
  return `${out}~`;
}

const NUMBER = /^-?(?:0|[1-9]\d*)(?:\.\d+)?$/;

/** Digits with no leading zero, short enough to be their number's shortest text: the commonest label (a seed, a row). */
function plainInteger(label: string): boolean {
  const n = label.length;
  if (n === 0 || n > 15 || (n > 1 && label.charCodeAt(0) === 0x30)) return false;
  for (let i = 0; i < n; i++) {
    const c = label.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return false;
  }
  return true;
}

/** The component of one value: its recorded position, a number, or text. */
function valueKey(label: string, position: number | undefined): string {
  if (position !== undefined) return `a${positive(String(position))} `;
  // What positive() gives, without parsing the number.
  if (plainInteger(label)) return `c${String.fromCharCode(0x40 + label.length)}${label} `;
  const text = unquote(label);
  if (NUMBER.test(text)) {
    const value = Number(text);
    // `1.50` and `1.5` are one number: the shortest text of its value.
    const canonical = String(Math.abs(value));
    if (!canonical.includes('e')) return value < 0 ? `b${negative(canonical)} ` : `c${positive(canonical)} `;
  }
  return `d${textKey(text)} `;
}

const textKey = (text: string): string => text.replace(/[\u0000-\u0020!#]/g, (c) => `!${c.charCodeAt(0).toString(16).padStart(2, '0')}`);

export class InstanceOrder {
  readonly #steps = new Map<string, StepOrder>();
  /** Steps plan.json does not name (an older run's, or none given): after its own, by name; no value recorded. */
  readonly #unknown = new Map<string, StepOrder>();

  /** `steps`: plan.json's steps, in its (the manifest's) order; kept to hand to another thread. */
  constructor(readonly steps: readonly OrderStep[] = []) {
    steps.forEach((step, i) => {
      if (this.#steps.has(step.id)) return;
      this.#steps.set(step.id, {
        rank: `c${positive(String(i))} `,
        forEach: step.for_each !== null,
        positions: new Map(),
        axes: step.axes ?? {},
      });
    });
    this.#after = `c${positive(String(steps.length))} `;
  }

  readonly #after: string;

  #step(name: string): StepOrder {
    const known = this.#steps.get(name);
    if (known !== undefined) return known;
    let unknown = this.#unknown.get(name);
    if (unknown === undefined) {
      if (this.#unknown.size >= 1_000) this.#unknown.clear();
      unknown = { rank: `${this.#after}d${textKey(name)} `, forEach: true, positions: new Map(), axes: {} };
      this.#unknown.set(name, unknown);
    }
    return unknown;
  }

  /** The sort key of an instance: compare keys by code unit (`<`). */
  sortKey(id: string): string {
    return `${this.#key(id)}${SEP}${id}`;
  }

  /** Compares two instance ids in this order. */
  compare = (a: string, b: string): number => {
    const x = this.sortKey(a);
    const y = this.sortKey(b);
    return x < y ? -1 : x > y ? 1 : 0;
  };

  /** `ids` in this order (each key made once). */
  sort(ids: Iterable<string>): string[] {
    return [...ids]
      .map((id) => this.sortKey(id))
      .sort(byCodeUnits)
      .map(idOfSortKey);
  }

  /** The key without its id: the step's rank, then the upstream's key (for_each), then each value's component. */
  #key(id: string): string {
    const open = id.indexOf('[');
    const step = this.#step(open < 0 ? id : id.slice(0, open));
    if (open < 0) return step.rank;
    if (!id.endsWith(']')) return `${step.rank}d${textKey(id)} `;
    let rest = id.slice(open + 1, -1);
    let key = step.rank;
    if (step.forEach) {
      const end = upstreamIdEnd(rest);
      if (end > 0) {
        key += `${this.#key(rest.slice(0, end))}${CLOSE}`;
        rest = rest.slice(end + 1);
      }
    }
    if (rest === '') return key;
    // A label with no quote splits at every comma.
    for (const part of rest.includes('"') ? splitLabel(rest) : rest.split(',')) {
      const eq = part.indexOf('=');
      const label = part.slice(eq + 1);
      key += valueKey(label, eq > 0 ? this.#position(step, part.slice(0, eq), label) : undefined);
    }
    return key;
  }

  #position(step: StepOrder, axis: string, label: string): number | undefined {
    let positions = step.positions.get(axis);
    if (positions === undefined) {
      positions = new Map((step.axes[axis] ?? []).map((l, i) => [l, i]));
      step.positions.set(axis, positions);
    }
    return positions.get(label);
  }
}

/** The instance id a sortKey ends with. */
export const idOfSortKey = (key: string): string => key.slice(key.indexOf(SEP) + 1);

export const byCodeUnits = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** Two values of an axis plan.json did not record, as instances are ordered by them: numbers by value, then text. */
export const compareValues = (a: string, b: string): number => byCodeUnits(valueKey(a, undefined), valueKey(b, undefined));

/**
 * Where the leading upstream id of a for_each id's brackets ends (`sheets[tier=cats],motion=2`:
 * after `]`; `sheets,motion=2`: after `sheets`), or -1 when it has none.
 */
export function upstreamIdEnd(inner: string): number {
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
