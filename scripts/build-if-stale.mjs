#!/usr/bin/env node
// `npm test` builds only when the build is missing or older than what it is made from, so that
// `npm ci && npm test` builds once (`npm ci` runs `prepare`, which builds) while a test run after
// editing src/ still tests the edit. The build's last output, dist/bundle/main.js (bundle-cli.mjs
// empties dist/bundle/ first, so a failed build leaves it missing or old), is compared with every
// file and folder under src/ (a deleted file changes its folder's time) and the build's own inputs.
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

// `--check [--root DIR]` only says (exit 0 up to date, 1 stale): for tests.
const args = process.argv.slice(2);
const check = args.includes('--check');
const rootAt = args.indexOf('--root');
const root = rootAt >= 0 ? (args[rootAt + 1] ?? '.') : dirname(dirname(fileURLToPath(import.meta.url)));
const OUTPUT = join(root, 'dist', 'bundle', 'main.js');
const INPUTS = ['tsconfig.json', 'tsconfig.build.json', 'package.json', 'package-lock.json', 'scripts/bundle-cli.mjs'];

function newest(path) {
  let info;
  try {
    info = statSync(path);
  } catch {
    return -1;
  }
  let time = info.mtimeMs;
  if (info.isDirectory()) for (const entry of readdirSync(path)) time = Math.max(time, newest(join(path, entry)));
  return time;
}

function builtAt() {
  try {
    return statSync(OUTPUT).mtimeMs;
  } catch {
    return -1;
  }
}

const built = builtAt();
const changed = Math.max(newest(join(root, 'src')), ...INPUTS.map((f) => newest(join(root, f))));
if (check) {
  console.log(built >= changed ? 'up to date' : 'stale');
  process.exitCode = built >= changed ? 0 : 1;
} else if (built >= changed) {
  console.log('build is up to date with src/ (npm run build forces one)');
} else {
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const result = spawnSync(npm, ['run', 'build'], { cwd: root, stdio: 'inherit' });
  process.exitCode = result.status ?? 1;
}
