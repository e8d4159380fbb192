#!/usr/bin/env node
// The random-history soak: many more seeded histories than CI runs
// (test/history/random-history.test.ts), on the local executor, the fleet, or both at once, each
// checked for invariants A and B, one charge per attempt, the budget and the exit codes. The model
// (test/history/*.ts) is bundled with esbuild for this run; the CLI under test is the built one
// (bin/genpipe.js -> dist/: run `npm run build` first).
//
//   npm run soak -- --histories 500 [--executor local|fleet|both] [--seed S] [--minutes M] [--parallel P] [--break-lock] [--partitions]
//
// --parallel runs P histories of each executor at once (default 1): a history spends most of its time
// waiting (crash points, lock deadlines, follow intervals), each has its own emulator, redis-server and
// worker, and its seed alone decides its operations, so the seeds run are the same in any order.
// --partitions draws fleet histories whose commands meet cuts of the worker's link to Redis (a
// loopback proxy that drops or stalls it, then heals; a quarter outlast the worker's lock lease).
// --minutes stops each executor after M minutes even if fewer histories ran. Prints the figures and
// writes them to bench/results/soak-<date>.json; every failing history is printed with its seed and
// operations (replay one in CI with GENPIPE_HISTORY_SEED=n).
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';

const root = new URL('..', import.meta.url).pathname;
const { values } = parseArgs({
  options: {
    histories: { type: 'string', default: '500' },
    executor: { type: 'string', default: 'both' },
    seed: { type: 'string', default: '1000' },
    minutes: { type: 'string' },
    parallel: { type: 'string', default: '1' },
    'break-lock': { type: 'boolean', default: false },
    partitions: { type: 'boolean', default: false },
    verbose: { type: 'boolean', default: false },
  },
});
const histories = Number(values.histories);
const firstSeed = Number(values.seed);
const minutes = values.minutes === undefined ? Infinity : Number(values.minutes);
const parallel = Number(values.parallel);
if (
  !(histories > 0) ||
  !Number.isInteger(firstSeed) ||
  !(minutes > 0) ||
  !(Number.isInteger(parallel) && parallel >= 1 && parallel <= 16)
) {
  console.error('genpipe soak: --histories N (N > 0), --seed S (an integer), --minutes M (M > 0) and --parallel P (1 to 16) are numbers.');
  process.exit(2);
}
const executors = values.executor === 'both' ? ['local', 'fleet'] : [values.executor];
if (!executors.every((e) => e === 'local' || e === 'fleet')) {
  console.error(`genpipe soak: --executor is local, fleet or both, not "${values.executor}".`);
  process.exit(2);
}

const scratch = mkdtempSync(join(tmpdir(), 'genpipe-soak-'));
const bundle = join(scratch, 'history.mjs');
await build({
  stdin: {
    contents: "export * from './history-run.ts'; export * from './history-model.ts';",
    resolveDir: join(root, 'test/history'),
    loader: 'ts',
  },
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  packages: 'external',
  outfile: bundle,
  logLevel: 'error',
});
// Bare imports (ioredis, zod…) resolve from the repository's node_modules: link it beside the bundle.
const { symlinkSync } = await import('node:fs');
symlinkSync(join(root, 'node_modules'), join(scratch, 'node_modules'));
// A history with a storage sink starts s3rver from a child script beside its module (test/sink/s3-server.ts).
const { copyFileSync } = await import('node:fs');
copyFileSync(join(root, 'test/sink/s3rver-child.mjs'), join(scratch, 's3rver-child.mjs'));
const { generateHistory, describeHistory, runHistory } = await import(bundle);
const bin = join(root, 'bin/genpipe.js');

async function soak(executor) {
  const figures = {
    executor,
    histories: 0,
    violating: 0,
    violations: 0,
    commands: 0,
    maxCommandMs: 0,
    exitCodes: {},
    requests: 0,
    ledgerUsd: 0,
    ms: 0,
    failures: [],
  };
  const end = Date.now() + minutes * 60_000;
  const started = Date.now();
  let next = 0;
  const lane = async () => {
    for (let i = next++; i < histories && Date.now() < end; i = next++) await one(firstSeed + i);
  };
  const one = async (seed) => {
    const history = generateHistory(seed, executor, { breakLock: values['break-lock'], partitions: values.partitions });
    let outcome;
    try {
      outcome = await runHistory(history, { bin, boundMs: 120_000 });
    } catch (error) {
      outcome = { violations: [`the harness failed: ${error.message}`], commands: [], requests: 0, ledgerUsd: 0, notes: [] };
    }
    figures.histories++;
    if (values.verbose)
      for (const c of outcome.commands)
        console.log(
          `  [${executor} ${seed}] ${c.label}: ${c.code ?? c.signal} in ${c.ms} ms ${c.stderr.trim().split('\n').slice(-2).join(' | ')}`,
        );
    figures.requests += outcome.requests;
    figures.ledgerUsd = Math.round((figures.ledgerUsd + outcome.ledgerUsd) * 100) / 100;
    for (const c of outcome.commands) {
      figures.commands++;
      figures.maxCommandMs = Math.max(figures.maxCommandMs, c.ms);
      const key = c.code === null ? `killed (${c.signal})` : String(c.code);
      figures.exitCodes[key] = (figures.exitCodes[key] ?? 0) + 1;
    }
    if (outcome.violations.length > 0) {
      figures.violating++;
      figures.violations += outcome.violations.length;
      figures.failures.push({
        seed,
        executor,
        violations: outcome.violations,
        history: describeHistory(history),
        commands: outcome.commands.map(
          (c) =>
            `${c.label}: ${c.code ?? c.signal} in ${c.ms} ms${c.code === 70 || c.timedOut ? ` — ${c.stderr.trim().split('\n').slice(-3).join(' | ')}` : ''}`,
        ),
      });
      console.log(
        `\n[${executor}] seed ${seed}: ${outcome.violations.length} violation(s)\n  ${outcome.violations.join('\n  ')}\n${describeHistory(history)}\n`,
      );
    } else process.stdout.write(`[${executor}] seed ${seed} ok (${outcome.commands.length} commands, ${outcome.requests} requests)\n`);
  };
  await Promise.all(Array.from({ length: parallel }, () => lane()));
  figures.ms = Date.now() - started;
  return figures;
}

const results = await Promise.all(executors.map((e) => soak(e)));
rmSync(scratch, { recursive: true, force: true });
const summary = { date: new Date().toISOString(), firstSeed, parallel, perExecutor: results };
console.log('\nsoak figures:');
for (const f of results) {
  console.log(
    `  ${f.executor}: ${f.histories} histories in ${(f.ms / 1000).toFixed(0)} s, ${f.violating} with violations (${f.violations} in all), ${f.commands} commands, max command ${(f.maxCommandMs / 1000).toFixed(1)} s, ${f.requests} requests, ledger US$${f.ledgerUsd.toFixed(2)}`,
  );
  console.log(
    `    exit codes: ${Object.entries(f.exitCodes)
      .sort()
      .map(([k, n]) => `${k}: ${n}`)
      .join(', ')}`,
  );
}
mkdirSync(join(root, 'bench/results'), { recursive: true });
const file = join(root, `bench/results/soak-${summary.date.slice(0, 10)}.json`);
writeFileSync(file, `${JSON.stringify(summary, null, 2)}\n`);
console.log(`written to ${file}`);
process.exit(results.some((f) => f.violating > 0) ? 1 : 0);
