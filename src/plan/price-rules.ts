/**
 * Prices that follow an instance's configuration, read from the request it sends (the built body,
 * defaults filled in):
 *
 * - a price table, `prices: { marketing-image: [ {when: {quality: high}, usd: 0.0865}, {usd: 0.05} ] }`:
 *   rows tried in order, the first whose `when` fields all equal the request's wins; a row without
 *   `when` matches every request (a default). Rows, not nested keys, so that a row names only the
 *   fields that change the price and the order of the fields never matters.
 * - a price formula, `price_usd: "{{ 0.08192 + ceil(len(input.prompt) / 4) * 0.000005 }}"`: numbers,
 *   `+ - * /`, parentheses, `input.FIELD` (the request's field; true is 1, false 0) and the functions
 *   len, ceil, floor, min and max. It is parsed here, never evaluated as code.
 *
 * Both give US$ rounded to the micro-dollar, as the service's ledger keeps it.
 */
import { parsePath, type PathSegment } from '../manifest/template.js';

/** A price for a request, or why it has none. */
export type PriceOf = { usd: number } | { miss: string };

export type PriceRule = (body: unknown) => PriceOf;

type Scalar = string | number | boolean | null;

export interface PriceRow {
  when?: Readonly<Record<string, Scalar | readonly Scalar[]>> | undefined;
  usd: number;
}

const micros = (usd: number): number => Math.round(usd * 1e6) / 1e6;

const fieldOf = (body: unknown, name: string): unknown =>
  body !== null && typeof body === 'object' && Object.hasOwn(body, name) ? (body as Record<string, unknown>)[name] : undefined;

const same = (a: unknown, b: Scalar): boolean => a !== undefined && (a === b || (a !== null && b !== null && String(a) === String(b)));

/** The fields a table's rows read, for messages ("by resolution and quality"). */
export function tableFields(rows: readonly PriceRow[]): string[] {
  return [...new Set(rows.flatMap((r) => Object.keys(r.when ?? {})))];
}

/** The rule of a price table: the first row whose `when` matches the request. */
export function tableRule(rows: readonly PriceRow[]): PriceRule {
  const fields = tableFields(rows);
  return (body) => {
    for (const row of rows) {
      const when = Object.entries(row.when ?? {});
      const matches = when.every(([name, want]) => {
        const value = fieldOf(body, name);
        return Array.isArray(want) ? want.some((w: Scalar) => same(value, w)) : same(value, want as Scalar);
      });
      if (matches) return { usd: micros(row.usd) };
    }
    const has = fields.map((f) => `${f} ${JSON.stringify(fieldOf(body, f) ?? null)}`).join(', ');
    return { miss: `no row of the price table matches this request (${has}); add a row for it, or a row without "when" as the default` };
  };
}

// The formula language: a recursive-descent parser over a handful of tokens.

type Node =
  | { kind: 'num'; value: number }
  | { kind: 'path'; segments: PathSegment[]; text: string }
  | { kind: 'op'; op: '+' | '-' | '*' | '/'; left: Node; right: Node }
  | { kind: 'neg'; arg: Node }
  | { kind: 'call'; name: FunctionName; args: Node[] };

const FUNCTIONS = ['len', 'ceil', 'floor', 'min', 'max'] as const;
type FunctionName = (typeof FUNCTIONS)[number];

/** A formula could not be parsed; the message says what is allowed. */
export class PriceFormulaError extends Error {
  override readonly name = 'PriceFormulaError';
}

const TOKEN = /\s*(?:(\d+(?:\.\d+)?(?:e[+-]?\d+)?)|([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])*)|([-+*/(),]))/y;

function tokenize(text: string): string[] {
  const tokens: string[] = [];
  TOKEN.lastIndex = 0;
  while (TOKEN.lastIndex < text.length) {
    if (text.slice(TOKEN.lastIndex).trim() === '') break;
    const at = TOKEN.lastIndex;
    const match = TOKEN.exec(text);
    if (!match) throw new PriceFormulaError(`"${text.slice(at).trim()}" is not part of a price formula: ${ALLOWED}`);
    tokens.push(match[1] ?? match[2] ?? match[3] ?? '');
  }
  return tokens;
}

const ALLOWED = 'a formula holds numbers, + - * /, parentheses, input.FIELD and len, ceil, floor, min, max';

class Parser {
  #i = 0;
  constructor(private readonly tokens: readonly string[]) {}

  parse(): Node {
    const node = this.#sum();
    if (this.#i < this.tokens.length) throw new PriceFormulaError(`unexpected "${this.tokens[this.#i] ?? ''}": ${ALLOWED}`);
    return node;
  }

  #peek(): string | undefined {
    return this.tokens[this.#i];
  }

  #take(expected?: string): string {
    const token = this.tokens[this.#i++];
    if (token === undefined) throw new PriceFormulaError(`the formula ends too early: ${ALLOWED}`);
    if (expected !== undefined && token !== expected) throw new PriceFormulaError(`expected "${expected}", found "${token}"`);
    return token;
  }

  #sum(): Node {
    let left = this.#product();
    for (let op = this.#peek(); op === '+' || op === '-'; op = this.#peek()) {
      this.#take();
      left = { kind: 'op', op, left, right: this.#product() };
    }
    return left;
  }

  #product(): Node {
    let left = this.#unary();
    for (let op = this.#peek(); op === '*' || op === '/'; op = this.#peek()) {
      this.#take();
      left = { kind: 'op', op, left, right: this.#unary() };
    }
    return left;
  }

  #unary(): Node {
    if (this.#peek() === '-') {
      this.#take();
      return { kind: 'neg', arg: this.#unary() };
    }
    return this.#primary();
  }

  #primary(): Node {
    const token = this.#take();
    if (token === '(') {
      const inner = this.#sum();
      this.#take(')');
      return inner;
    }
    if (/^\d/.test(token)) return { kind: 'num', value: Number(token) };
    if ((FUNCTIONS as readonly string[]).includes(token) && this.#peek() === '(') return this.#call(token as FunctionName);
    const segments = parsePath(token);
    if (!segments || segments[0] !== 'input' || segments.length < 2)
      throw new PriceFormulaError(`"${token}" is not input.FIELD or a function: ${ALLOWED}`);
    return { kind: 'path', segments: segments.slice(1), text: token };
  }

  #call(name: FunctionName): Node {
    this.#take('(');
    const args = [this.#sum()];
    while (this.#peek() === ',') {
      this.#take();
      args.push(this.#sum());
    }
    this.#take(')');
    const arity = name === 'min' || name === 'max' ? args.length >= 1 : args.length === 1;
    if (!arity) throw new PriceFormulaError(`${name}() takes ${name === 'min' || name === 'max' ? 'one or more values' : 'one value'}`);
    return { kind: 'call', name, args };
  }
}

const MISSING = Symbol('missing');
type Value = number | string | unknown[] | typeof MISSING;

function read(body: unknown, segments: readonly PathSegment[]): Value {
  let current: unknown = body;
  for (const segment of segments) {
    if (current === null || typeof current !== 'object' || !Object.hasOwn(current, segment)) return MISSING;
    current = (current as Record<PathSegment, unknown>)[segment];
  }
  if (typeof current === 'boolean') return current ? 1 : 0;
  if (typeof current === 'number' || typeof current === 'string' || Array.isArray(current)) return current;
  return MISSING;
}

function numberOf(value: Value, what: string): number {
  if (typeof value === 'number') return value;
  if (typeof value === 'string' && value.trim() !== '' && Number.isFinite(Number(value))) return Number(value);
  throw new PriceFormulaError(value === MISSING ? `${what} has no value in this request` : `${what} is not a number in this request`);
}

function evaluate(node: Node, body: unknown): Value {
  switch (node.kind) {
    case 'num':
      return node.value;
    case 'path':
      return read(body, node.segments);
    case 'neg':
      return -numberOf(evaluate(node.arg, body), 'the value after "-"');
    case 'op': {
      const left = numberOf(evaluate(node.left, body), describe(node.left));
      const right = numberOf(evaluate(node.right, body), describe(node.right));
      if (node.op === '/' && right === 0) throw new PriceFormulaError(`${describe(node.right)} is 0: the formula divides by it`);
      return node.op === '+' ? left + right : node.op === '-' ? left - right : node.op === '*' ? left * right : left / right;
    }
    case 'call': {
      if (node.name === 'len') {
        const value = evaluate(node.args[0] as Node, body);
        // A field the request leaves out (no reference images) has length 0.
        if (value === MISSING) return 0;
        if (typeof value === 'string' || Array.isArray(value)) return value.length;
        throw new PriceFormulaError(`len() of ${describe(node.args[0] as Node)}, which is not text or a list`);
      }
      const values = node.args.map((a) => numberOf(evaluate(a, body), describe(a)));
      const first = values[0] as number;
      if (node.name === 'ceil') return Math.ceil(first);
      if (node.name === 'floor') return Math.floor(first);
      return node.name === 'min' ? Math.min(...values) : Math.max(...values);
    }
  }
}

const describe = (node: Node): string => (node.kind === 'path' ? node.text : node.kind === 'call' ? `${node.name}(...)` : 'a value');

/** The fields of the request a formula reads. */
function fieldsOf(node: Node): string[] {
  if (node.kind === 'path') return [String(node.segments[0])];
  if (node.kind === 'op') return [...fieldsOf(node.left), ...fieldsOf(node.right)];
  if (node.kind === 'neg') return fieldsOf(node.arg);
  if (node.kind === 'call') return node.args.flatMap(fieldsOf);
  return [];
}

/** `{{ formula }}` as written in `price_usd`; throws PriceFormulaError when it is not one. */
export function formulaRule(text: string): { rule: PriceRule; fields: string[] } {
  const inner = /^\s*\{\{([\s\S]*)\}\}\s*$/.exec(text);
  if (!inner)
    throw new PriceFormulaError(`a price_usd that is text is a formula in braces, such as "{{ 0.04 + len(input.image_urls) * 0.01 }}"`);
  const tokens = tokenize(inner[1] ?? '');
  if (tokens.length === 0) throw new PriceFormulaError(`the braces hold no formula: ${ALLOWED}`);
  const node = new Parser(tokens).parse();
  const rule: PriceRule = (body) => {
    try {
      const usd = numberOf(evaluate(node, body), 'the formula');
      if (!Number.isFinite(usd) || usd < 0) return { miss: `the formula gives ${usd} for this request, not a price of 0 or more` };
      return { usd: micros(usd) };
    } catch (error) {
      if (error instanceof PriceFormulaError) return { miss: error.message };
      throw error;
    }
  };
  return { rule, fields: [...new Set(fieldsOf(node))] };
}
