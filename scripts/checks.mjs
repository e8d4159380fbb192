#!/usr/bin/env node
// `npm test`'s static checks, run side by side: each of the named package.json scripts
// (typecheck, lint, format:check, cycles) in a process of its own, at once. On the 2-core machine,
// from a fresh clone (no caches), 3 alternated rounds: 65.7 s against 72.9 s one after another
// (medians; 0.90x), less than the sum would suggest, since tsc and ESLint use more than one thread.
// Each one's output is printed whole when it ends, after a line naming it, so the outputs never
// interleave; the exit code is 1 when any failed, and the last line names those that did.
import { spawn } from 'node:child_process';

const names = process.argv.slice(2);
if (names.length === 0) {
  console.error('usage: node scripts/checks.mjs SCRIPT [SCRIPT ...] (package.json script names)');
  process.exit(2);
}

// Under `npm test`, npm says where its own CLI is; run by hand, `npm` from the PATH.
const npmCli = process.env.npm_execpath;
const command = (name) => (npmCli ? [process.execPath, [npmCli, 'run', '-s', name]] : ['npm', ['run', '-s', name]]);

function run(name) {
  const started = Date.now();
  const [file, args] = command(name);
  const child = spawn(file, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  return new Promise((resolve) => {
    child.once('error', (error) => resolve({ name, ok: false, output: `${error.message}\n`, seconds: 0 }));
    child.once('close', (code, signal) =>
      resolve({ name, ok: code === 0, output, seconds: (Date.now() - started) / 1000, code: code ?? signal }),
    );
  });
}

const results = await Promise.all(
  names.map((name) =>
    run(name).then((result) => {
      const verdict = result.ok ? 'ok' : `FAILED (exit ${result.code})`;
      process.stdout.write(`> ${result.name}: ${verdict}, ${result.seconds.toFixed(1)} s\n${result.output}`);
      return result;
    }),
  ),
);

const failed = results.filter((r) => !r.ok).map((r) => r.name);
if (failed.length > 0) {
  console.error(`Checks failed: ${failed.join(', ')}.`);
  process.exit(1);
}
