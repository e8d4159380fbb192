#!/usr/bin/env node
// Runs every bench/*.bench.mjs in its own child process, one after another (they measure, so they
// must not share the two cores), then prints each one's figures. Each benchmark writes
// bench/results/<name>.json itself. `npm run bench -- NAME` runs only the benchmarks whose file
// name contains NAME.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const filter = process.argv[2] ?? '';
const files = readdirSync(here)
  .filter((f) => f.endsWith('.bench.mjs') && f.includes(filter))
  .sort();
if (files.length === 0) {
  console.error(`no benchmark matches "${filter}"`);
  process.exit(2);
}
// Every benchmark's files go under one root, removed after the last one (lib/harness.mjs
// scratchDir says why not sooner).
const scratch = mkdtempSync(join(tmpdir(), 'genpipe-bench-'));
let failed = 0;
try {
  for (const file of files) {
    console.log(`\n=== ${file}`);
    const started = Date.now();
    const result = spawnSync(process.execPath, ['--expose-gc', join(here, file)], {
      stdio: 'inherit',
      env: { ...process.env, GENPIPE_BENCH_SCRATCH: scratch },
    });
    console.log(
      `=== ${file}: ${result.status === 0 ? 'ok' : `FAILED (exit ${result.status})`} in ${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
    if (result.status !== 0) failed++;
  }
} finally {
  if (process.env.BENCH_KEEP) console.log(`kept ${scratch}`);
  else rmSync(scratch, { recursive: true, force: true });
}
// A full run ends by making the table of docs/benchmarks.md from what it measured.
if (filter === '') {
  const table = spawnSync(process.execPath, [join(here, 'table.mjs')], { stdio: 'inherit' });
  if (table.status !== 0) failed++;
}
process.exit(failed === 0 ? 0 : 1);
