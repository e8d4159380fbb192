#!/usr/bin/env node
// Fails when the relative imports under a folder form a cycle (type-only imports included:
// a cycle of types is still a tangle of layers), or when a layer imports one above it: run/ never
// imports its views or its callers (gallery/, review/, report/, session/, cli/).
// Usage: node scripts/check-cycles.mjs src
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { ABOVE } from './layers.mjs';

const root = resolve(process.argv[2] ?? 'src');
const files = [];
(function walk(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path);
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) files.push(path);
  }
})(root);

// `import x from './a.js'`, `export … from`, a bare `import './a.js'` (run for its effects) and `import('./a.js')`.
const importPattern =
  /(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s*['"](\.{1,2}\/[^'"]+)['"]|import\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)|(?:^|\n)\s*import\s*['"](\.{1,2}\/[^'"]+)['"]/g;
const graph = new Map();
for (const file of files) {
  const text = readFileSync(file, 'utf8');
  const targets = [];
  for (const match of text.matchAll(importPattern)) {
    const spec = match[1] ?? match[2] ?? match[3];
    targets.push(resolve(dirname(file), spec).replace(/\.js$/, '.ts'));
  }
  graph.set(
    file,
    targets.filter((t) => t !== file),
  );
}

const state = new Map(); // 1 = on stack, 2 = done
const stack = [];
const cycles = [];
function visit(node) {
  state.set(node, 1);
  stack.push(node);
  for (const next of graph.get(node) ?? []) {
    if (!graph.has(next)) continue;
    if (state.get(next) === 1) cycles.push([...stack.slice(stack.indexOf(next)), next]);
    else if (!state.has(next)) visit(next);
  }
  stack.pop();
  state.set(node, 2);
}
for (const file of graph.keys()) if (!state.has(file)) visit(file);

// ABOVE (scripts/layers.mjs): the folders a layer must not import from, relative to the root given.
const upward = [];
for (const [file, targets] of graph) {
  const layer = relative(root, file).split(/[\\/]/)[0];
  for (const target of targets) {
    const into = relative(root, target).split(/[\\/]/)[0];
    if ((ABOVE[layer] ?? []).includes(into))
      upward.push(`${relative(process.cwd(), file)} imports ${relative(process.cwd(), target)} (${layer}/ must not import ${into}/)`);
  }
}

if (cycles.length > 0 || upward.length > 0) {
  for (const cycle of cycles) console.error(`import cycle: ${cycle.map((f) => relative(process.cwd(), f)).join(' -> ')}`);
  for (const line of upward) console.error(`layer: ${line}`);
  process.exit(1);
}
console.log(`no import cycles in ${files.length} files, and no layer imports one above it`);
