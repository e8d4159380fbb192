/**
 * Templating: `{{ path }}` reads a value from the instance's scope (sweep values, CSV columns,
 * vars, allow-listed environment variables, the upstream instance). There is no code evaluation:
 * a path is names, `.field`, `[index]` and `["key"]`, nothing else.
 *
 * A string that is a single expression keeps the value's type (`"{{ seed }}"` gives a number);
 * an expression inside other text is interpolated. Values come in as data and are never read
 * again as templates, so a CSV cell holding `{{ env.X }}` stays that literal text.
 */

export type PathSegment = string | number;

export interface TemplateRef {
  /** The expression as written, without braces. */
  expression: string;
  segments: PathSegment[];
  /** Where the template stands inside the step's input, for locating it in the manifest. */
  at: readonly PathSegment[];
}

/** A template could not be compiled (syntax) or rendered (a missing value). */
export class TemplateError extends Error {
  override readonly name = 'TemplateError';
  constructor(
    message: string,
    /** Where the template stands inside the step's input, for locating it in the manifest. */
    readonly at: readonly PathSegment[],
  ) {
    super(message);
  }
}

const EXPRESSION = /\{\{([\s\S]*?)\}\}/g;
const SEGMENT = /^(?:\.?([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\["((?:[^"\\]|\\.)*)"\])/;

/** Parses `row.prompt`, `upstream.outputs.images[0].url` or `vars["my key"]` into segments. */
export function parsePath(expression: string): PathSegment[] | undefined {
  let rest = expression.trim();
  if (rest === '' || !/^[A-Za-z_]/.test(rest)) return undefined;
  const segments: PathSegment[] = [];
  while (rest.length > 0) {
    const match = SEGMENT.exec(rest);
    if (!match) return undefined;
    if (match[1] !== undefined) segments.push(match[1]);
    else if (match[2] !== undefined) segments.push(Number(match[2]));
    else segments.push(JSON.parse(`"${match[3] ?? ''}"`) as string);
    rest = rest.slice(match[0].length);
  }
  return segments;
}

export type Scope = Readonly<Record<string, unknown>>;
export type Render = (scope: Scope) => unknown;

export interface CompiledTemplate {
  render: Render;
  /** Every expression the value reads, for checks at load time. */
  refs: TemplateRef[];
}

const MISSING = Symbol('missing');

function lookup(scope: Scope, segments: readonly PathSegment[]): unknown {
  let current: unknown = scope;
  for (const segment of segments) {
    if (current === null || typeof current !== 'object') return MISSING;
    if (!Object.hasOwn(current, segment)) return MISSING;
    current = (current as Record<PathSegment, unknown>)[segment];
  }
  return current;
}

function stringify(value: unknown): string {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean' || value === null) return String(value);
  return JSON.stringify(value);
}

function compileString(text: string, at: readonly PathSegment[], interpolate: (value: string) => string = (v) => v): CompiledTemplate {
  const parts: (string | TemplateRef)[] = [];
  let last = 0;
  for (const match of text.matchAll(EXPRESSION)) {
    const expression = (match[1] ?? '').trim();
    const segments = parsePath(expression);
    if (!segments) {
      throw new TemplateError(`"{{${match[1] ?? ''}}}" is not a path such as {{ seed }} or {{ row.prompt }}; templates hold no code`, at);
    }
    if (match.index > last) parts.push(text.slice(last, match.index));
    parts.push({ expression, segments, at });
    last = match.index + match[0].length;
  }
  if (last < text.length) parts.push(text.slice(last));
  const unclosed = parts.some((p) => typeof p === 'string' && p.includes('{{'));
  if (unclosed) throw new TemplateError(`"${text}" has a "{{" without its "}}"`, at);
  const refs = parts.filter((p): p is TemplateRef => typeof p !== 'string');
  if (refs.length === 0) return { render: () => text, refs };
  const read = (scope: Scope, ref: TemplateRef): unknown => {
    const value = lookup(scope, ref.segments);
    if (value === MISSING || value === undefined) throw new TemplateError(`{{ ${ref.expression} }} has no value here`, at);
    return value;
  };
  const only = parts.length === 1 ? refs[0] : undefined;
  if (only) return { render: (scope) => read(scope, only), refs };
  return { render: (scope) => parts.map((p) => (typeof p === 'string' ? p : interpolate(stringify(read(scope, p))))).join(''), refs };
}

export interface TemplateOptions {
  /** Applied to each value interpolated inside other text (a URL's path encodes it), never to the text as written. */
  interpolate?: (value: string) => string;
}

/** Compiles any JSON-like value (the step's input) into one render function. */
export function compileTemplate(value: unknown, at: readonly PathSegment[] = [], options: TemplateOptions = {}): CompiledTemplate {
  if (typeof value === 'string') return compileString(value, at, options.interpolate);
  if (Array.isArray(value)) {
    const items = value.map((item, i) => compileTemplate(item, [...at, i], options));
    const refs = items.flatMap((c) => c.refs);
    if (refs.length === 0) return { render: () => structuredClone(value), refs };
    return { render: (scope) => items.map((c) => c.render(scope)), refs };
  }
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value).map(([key, item]) => [key, compileTemplate(item, [...at, key], options)] as const);
    const refs = entries.flatMap(([, c]) => c.refs);
    if (refs.length === 0) return { render: () => structuredClone(value), refs };
    return {
      render: (scope) => {
        const out: Record<string, unknown> = {};
        for (const [key, compiled] of entries) out[key] = compiled.render(scope);
        return out;
      },
      refs,
    };
  }
  return { render: () => value, refs: [] };
}
