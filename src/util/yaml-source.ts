/**
 * Safe YAML loading that remembers where every node came from, so that a schema error can name
 * `file:line:col`. Core schema only, a size cap, a nesting cap, unique plain keys, no recursive
 * aliases, a small alias budget, and warnings treated as errors.
 *
 * Every check here is linear in the size of the document: the yaml package's own `uniqueKeys`
 * compares each key with every earlier key of its mapping (a 1 MiB mapping took over 30 s), and its
 * parser slows down sharply with depth, so keys are checked here with a Set and depth is capped
 * while the parser runs.
 */
import {
  Composer,
  isAlias,
  isMap,
  isPair,
  isScalar,
  isSeq,
  Lexer,
  LineCounter,
  Parser,
  YAMLParseError,
  type CST,
  type Document,
  type Node as YamlNode,
  type Pair,
  type YAMLMap,
  type YAMLSeq,
} from 'yaml';
import type * as z from 'zod';
import { clip, formatPath } from './zod-issues.js';

export interface SourceLocation {
  file: string;
  line: number;
  col: number;
}

export interface YamlSource {
  file: string;
  value: unknown;
  /**
   * Location of the node at `path`, or of its nearest existing ancestor. With `atKey`, the last
   * step points at the key itself rather than its value (for "unknown key" errors).
   */
  locate(path: readonly PropertyKey[], atKey?: boolean): SourceLocation;
}

export interface YamlProblem {
  location: SourceLocation;
  message: string;
}

/** Problems a YamlSyntaxError spells out in its message; the rest are counted. */
const MAX_PROBLEMS_IN_MESSAGE = 20;

export class YamlSyntaxError extends Error {
  override readonly name = 'YamlSyntaxError';
  constructor(readonly problems: readonly YamlProblem[]) {
    const listed = problems.slice(0, MAX_PROBLEMS_IN_MESSAGE).map((p) => `${formatLocation(p.location)}: ${p.message}`);
    if (problems.length > MAX_PROBLEMS_IN_MESSAGE) listed.push(`and ${problems.length - MAX_PROBLEMS_IN_MESSAGE} more problems`);
    super(listed.join('\n'));
  }
}

export interface YamlLoadOptions {
  /** Largest accepted document, in bytes. Default 4 MiB. */
  maxBytes?: number;
  /** Largest number of alias nodes resolved (alias bombs). Default 50. */
  maxAliasCount?: number;
  /** Deepest nesting of mappings and lists. Default 64. */
  maxDepth?: number;
}

export const DEFAULT_MAX_DEPTH = 64;

export const formatLocation = (loc: SourceLocation): string => `${loc.file}:${loc.line}:${loc.col}`;

/** Thrown from inside the parser loop to stop a document that nests too deeply. */
class TooDeep extends Error {
  constructor(readonly offset: number) {
    super('too deep');
  }
}

/**
 * The yaml Parser, driven one lexeme at a time so that nesting is capped as it grows: the parser's
 * stack holds one entry per open collection plus a few for the document and pending scalars, so a
 * margin over maxDepth stops runaway nesting early, and the exact depth is checked on the nodes.
 */
function* parseCapped(text: string, parser: Parser, maxDepth: number): Generator<CST.Token> {
  const limit = maxDepth + 8;
  for (const lexeme of new Lexer().lex(text)) {
    yield* parser.next(lexeme);
    if (parser.stack.length > limit) throw new TooDeep(parser.offset);
  }
  yield* parser.end();
}

export function loadYaml(text: string, file: string, options: YamlLoadOptions = {}): YamlSource {
  const maxBytes = options.maxBytes ?? 4 * 1024 * 1024;
  const maxDepth = options.maxDepth ?? DEFAULT_MAX_DEPTH;
  const size = Buffer.byteLength(text, 'utf8');
  if (size > maxBytes) {
    throw new YamlSyntaxError([
      { location: { file, line: 1, col: 1 }, message: `the file is ${size} bytes, over the limit of ${maxBytes}` },
    ]);
  }
  const lineCounter = new LineCounter();
  const at = (offset: number): SourceLocation => {
    const pos = lineCounter.linePos(offset);
    return { file, line: pos.line, col: pos.col };
  };
  const tooDeep = `nested more than ${maxDepth} levels deep`;

  const parser = new Parser(lineCounter.addNewLine);
  lineCounter.addNewLine(0);
  // uniqueKeys is off on purpose: it is quadratic; checkNodes below does the same job in linear time.
  const composer = new Composer({ schema: 'core', uniqueKeys: false, strict: true, customTags: [], prettyErrors: false });
  let doc: Document.Parsed | undefined;
  try {
    for (const next of composer.compose(parseCapped(text, parser, maxDepth), true, text.length)) {
      if (!doc) doc = next;
      else {
        doc.errors.push(new YAMLParseError([next.range[0], next.range[1]], 'MULTIPLE_DOCS', 'the file holds more than one YAML document'));
        break;
      }
    }
  } catch (error) {
    if (error instanceof TooDeep) throw new YamlSyntaxError([{ location: at(error.offset), message: tooDeep }]);
    throw error;
  }
  if (!doc) throw new YamlSyntaxError([{ location: at(0), message: 'the file holds no YAML document' }]);
  const problems: YamlProblem[] = [...doc.errors, ...doc.warnings].map((e) => ({
    location: at(e.pos[0]),
    message: e.message.split('\n')[0] ?? e.message,
  }));
  if (problems.length > 0) throw new YamlSyntaxError(problems);
  checkNodes(doc, maxDepth, (node, message) => problems.push({ location: at(node.range?.[0] ?? 0), message }));
  if (problems.length > 0) throw new YamlSyntaxError(problems);

  let value: unknown;
  try {
    value = doc.toJS({ maxAliasCount: options.maxAliasCount ?? 50 });
  } catch (error) {
    throw new YamlSyntaxError([{ location: at(0), message: (error as Error).message }]);
  }
  const document = doc;
  // Each mapping's keys, indexed on first use, so that locating ten thousand keys stays linear.
  const indexes = new WeakMap<YAMLMap, Map<string, Pair>>();
  const pairOf = (map: YAMLMap, key: PropertyKey): Pair | undefined => {
    let index = indexes.get(map);
    if (!index) {
      index = new Map();
      for (const item of map.items) {
        if (!isScalar(item.key)) continue;
        const name = keyName(item.key.value);
        if (!index.has(name)) index.set(name, item as Pair);
      }
      indexes.set(map, index);
    }
    return index.get(String(key));
  };
  return {
    file,
    value,
    locate(path, atKey = false) {
      let node: unknown = document.contents;
      let best: YamlNode | null = document.contents;
      for (const [index, key] of path.entries()) {
        if (isMap(node)) {
          const pair = pairOf(node, key);
          if (!pair) break;
          const last = index === path.length - 1;
          best = ((last && atKey) || pair.value == null ? pair.key : pair.value) as YamlNode;
          node = pair.value;
        } else if (isSeq(node) && typeof key === 'number') {
          node = node.items[key];
          if (!node) break;
          best = node as YamlNode;
        } else break;
      }
      return at(best?.range?.[0] ?? 0);
    },
  };
}

/** A scalar key as it becomes a JavaScript property name (yaml turns a null key into ""). */
const keyName = (value: unknown): string => (value === null || value === undefined ? '' : String(value));

/**
 * One walk over the nodes, in document order, without recursion: nesting depth, keys that are
 * collections (JavaScript would flatten them into one long string), duplicate keys (after that
 * flattening to strings, so `1` and "1" collide as they would in the object), and aliases. An alias
 * resolves to the last node anchored with its name before it, as the yaml package resolves it; an
 * alias whose anchor is one of its own ancestors is recursive and refused.
 */
function checkNodes(doc: Document.Parsed, maxDepth: number, report: (node: YamlNode, message: string) => void): void {
  const anchors = new Map<string, YamlNode>();
  /** The collections from the root down to the one being walked: an alias to one of them is recursive. */
  const open = new Set<YamlNode>();
  interface Frame {
    node: YAMLMap | YAMLSeq;
    /** Next child: for a mapping, 2i is the key and 2i + 1 the value of pair i. */
    next: number;
    depth: number;
    keys: Set<string> | undefined;
  }
  const stack: Frame[] = [];

  /** Registers anchors and checks aliases; a collection is pushed, to be walked next. */
  const visit = (node: unknown, depth: number): void => {
    if (node === null || typeof node !== 'object') return;
    if (isAlias(node)) {
      const target = anchors.get(node.source);
      if (!target) report(node, `the alias *${node.source} has no anchor &${node.source} before it`);
      else if (open.has(target))
        report(
          node,
          `the alias *${node.source} is recursive: it sits inside the node anchored &${node.source}, which would contain itself`,
        );
      return;
    }
    const yamlNode = node as YamlNode;
    if (yamlNode.anchor) anchors.set(yamlNode.anchor, yamlNode);
    if (!isMap(node) && !isSeq(node)) return;
    if (depth > maxDepth) {
      report(node, `nested more than ${maxDepth} levels deep`);
      return;
    }
    open.add(node);
    stack.push({ node, next: 0, depth, keys: isMap(node) ? new Set() : undefined });
  };

  visit(doc.contents, 1);
  while (stack.length > 0) {
    const frame = stack[stack.length - 1] as Frame;
    const { node, depth } = frame;
    const count = isMap(node) ? node.items.length * 2 : node.items.length;
    if (frame.next >= count) {
      stack.pop();
      open.delete(node);
      continue;
    }
    const index = frame.next++;
    if (isSeq(node)) {
      const item = node.items[index];
      visit(isPair(item) ? item.value : item, depth + 1);
      continue;
    }
    const pair = node.items[index >> 1] as Pair;
    if (index % 2 === 1) {
      visit(pair.value, depth + 1);
      continue;
    }
    const key = pair.key as YamlNode | null;
    const where = key ?? (pair.value as YamlNode | null) ?? node;
    // An alias key stands for its anchor's node; an alias without one is reported when visited.
    const resolved = key !== null && isAlias(key) ? anchors.get(key.source) : key;
    if (resolved && !isScalar(resolved)) report(where, 'a mapping key must be a plain value, not a mapping or a list');
    else if (resolved !== undefined) {
      const name = keyName(resolved?.value);
      if (frame.keys?.has(name)) report(where, `the key ${JSON.stringify(clip(name))} appears twice in this mapping`);
      else frame.keys?.add(name);
    }
    visit(key, depth + 1);
  }
}

/**
 * Loads YAML text and validates it with a zod schema. A syntax error, or the first schema problem
 * located at its node, is thrown as a YamlSyntaxError whose message reads `file:line:col: path: ...`.
 */
export function loadYamlAs<T>(
  text: string,
  file: string,
  schema: z.ZodType<T>,
  options: YamlLoadOptions & { unknownKeyMessage?: string } = {},
): T {
  const source = loadYaml(text, file, options);
  const parsed = schema.safeParse(source.value ?? {});
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const unknown = issue?.code === 'unrecognized_keys' ? issue.keys[0] : undefined;
  const path = unknown === undefined ? (issue?.path ?? []) : [...(issue?.path ?? []), unknown];
  const message = unknown === undefined ? (issue?.message ?? 'invalid') : (options.unknownKeyMessage ?? 'unknown key');
  throw new YamlSyntaxError([
    { location: source.locate(path, unknown !== undefined), message: `${formatPath(path) || '(document)'}: ${message}` },
  ]);
}
