#!/usr/bin/env node
// Fails when a function under the given folders has more than MAX_DECISIONS decision points or
// more than MAX_LINES lines. The run's life must stay readable: a function that decides 40 things
// is where a rule gets lost. Decisions counted: if, ?:, case, catch, for, for-in, for-of, while,
// do, &&, ||, ?? (and their assignment forms). Nested functions count on their own, not in the
// function around them. A pure reducer that switches over record kinds may be exempt: it is named
// in EXEMPT with its reason.
// `npm run complexity`; part of `npm test`. `--report` prints every function over half the bound.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const MAX_DECISIONS = 25;
const MAX_LINES = 100;
const ROOTS = ['src/run', 'src/session'];
/** file:function → why it may exceed the bounds. At most two, each a pure reducer over record kinds. */
const EXEMPT = new Map([
  ['src/run/journal/run-state.ts:applyRecord', 'a pure reducer: one case per journal record kind, each a few lines'],
]);

function* files(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* files(path);
    else if (name.endsWith('.ts')) yield path;
  }
}

const isFunction = (node) =>
  ts.isFunctionDeclaration(node) ||
  ts.isMethodDeclaration(node) ||
  ts.isArrowFunction(node) ||
  ts.isFunctionExpression(node) ||
  ts.isConstructorDeclaration(node) ||
  ts.isGetAccessorDeclaration(node) ||
  ts.isSetAccessorDeclaration(node);

const DECISION_OPERATORS = new Set([
  ts.SyntaxKind.AmpersandAmpersandToken,
  ts.SyntaxKind.BarBarToken,
  ts.SyntaxKind.QuestionQuestionToken,
  ts.SyntaxKind.AmpersandAmpersandEqualsToken,
  ts.SyntaxKind.BarBarEqualsToken,
  ts.SyntaxKind.QuestionQuestionEqualsToken,
]);

function isDecision(node) {
  switch (node.kind) {
    case ts.SyntaxKind.IfStatement:
    case ts.SyntaxKind.ConditionalExpression:
    case ts.SyntaxKind.CaseClause:
    case ts.SyntaxKind.CatchClause:
    case ts.SyntaxKind.ForStatement:
    case ts.SyntaxKind.ForInStatement:
    case ts.SyntaxKind.ForOfStatement:
    case ts.SyntaxKind.WhileStatement:
    case ts.SyntaxKind.DoStatement:
      return true;
    case ts.SyntaxKind.BinaryExpression:
      return DECISION_OPERATORS.has(node.operatorToken.kind);
    default:
      return false;
  }
}

function nameOf(node, source) {
  if (node.name) return node.name.getText(source);
  if (ts.isConstructorDeclaration(node)) return 'constructor';
  const parent = node.parent;
  if (parent && ts.isVariableDeclaration(parent)) return parent.name.getText(source);
  if (parent && ts.isPropertyAssignment(parent)) return parent.name.getText(source);
  if (parent && ts.isPropertyDeclaration(parent)) return parent.name.getText(source);
  const { line } = source.getLineAndCharacterOfPosition(node.getStart(source));
  return `(anonymous, line ${line + 1})`;
}

/** Decision points of `fn`'s own body: nested functions are measured on their own. */
function decisionsOf(fn) {
  let count = 0;
  const visit = (node) => {
    if (node !== fn && isFunction(node)) return;
    if (isDecision(node)) count++;
    ts.forEachChild(node, visit);
  };
  visit(fn);
  return count;
}

/** Every function of one source file: its name, first line, lines and decision points. */
export function measureSource(path, text) {
  const source = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
  const out = [];
  const visit = (node) => {
    if (isFunction(node) && node.body) {
      const start = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
      const end = source.getLineAndCharacterOfPosition(node.getEnd()).line;
      out.push({ file: path, name: nameOf(node, source), line: start + 1, lines: end - start + 1, decisions: decisionsOf(node) });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return out;
}

/** The functions over the bounds, exemptions apart. */
export const overBounds = (measured) =>
  measured.filter((f) => (f.decisions > MAX_DECISIONS || f.lines > MAX_LINES) && !EXEMPT.has(`${f.file}:${f.name}`));

function main() {
  const report = process.argv.includes('--report');
  const measured = [];
  for (const root of ROOTS) {
    for (const path of files(root)) measured.push(...measureSource(relative('.', path), readFileSync(path, 'utf8')));
  }
  const over = overBounds(measured);
  if (report) {
    for (const f of measured
      .filter((m) => m.decisions > MAX_DECISIONS / 2 || m.lines > MAX_LINES / 2)
      .sort((a, b) => b.decisions - a.decisions))
      console.log(`${f.file}:${f.line} ${f.name}: ${f.decisions} decisions, ${f.lines} lines`);
  }
  if (over.length > 0) {
    for (const f of over)
      console.error(
        `${f.file}:${f.line} ${f.name}: ${f.decisions} decisions, ${f.lines} lines (at most ${MAX_DECISIONS} and ${MAX_LINES})`,
      );
    console.error(
      `${over.length} functions in ${ROOTS.join(', ')} are over the bounds: split them into functions that each decide one thing.`,
    );
    process.exit(1);
  }
  console.log(`${measured.length} functions in ${ROOTS.join(', ')}: none over ${MAX_DECISIONS} decisions or ${MAX_LINES} lines`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
