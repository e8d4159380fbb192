#!/usr/bin/env node
// What throttling costs. 240 character sheets (0.2-1.2 s each at the emulator, concurrency 20, the
// default --rate of 20 submits a second), genpipe (`genpipe run`, a child process) against
// emulators started with the same seed:
//   - sparse 429s: 2% of submits answered 429 with Retry-After: 1, against the same run without
//     faults, alternated, medians of 3. Target: at most 1.3x the makespan without faults.
//   - a true rate limit: more than N submits a second (N = 10, below --rate) answered 429 with
//     Retry-After. Target: accepted submits sustained within 1.1x of N/s; and the 429s per 100
//     submits against the official client's (@higgsfield/client v2 `subscribe` with p-limit at the
//     same concurrency, as a user would write it: it does not retry a 429, so each one loses its
//     instance) under the same limit.
// The sustained rate is the emulator's: requests created, over the time from the first to the last.
// BENCH_INSTANCES (default 240), BENCH_LIMIT (default 10) and BENCH_ROUNDS (default 3) change the size.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import pLimit from 'p-limit';
import { startEmulator, profileFromSpec } from '../dist/emulator/index.js';
import { HF_KEY, median, runGenpipe, scratchDir, writeResults } from './lib/harness.mjs';

const require = createRequire(import.meta.url);
const { createHiggsfieldClient } = require('@higgsfield/client/v2');

const instances = Number(process.env.BENCH_INSTANCES ?? 240);
const limit = Number(process.env.BENCH_LIMIT ?? 10);
const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
const concurrency = 20;
const SHEET_PATH = '/vendor/ai-influencer';
const SPARSE = { submit: { rate_429: 0.02, retry_after_s: 1 } };
const LIMITED = { submit: { rate_limit_per_s: limit } };

const emulatorWith = (faults) =>
  startEmulator({
    port: 0,
    seed: 45,
    timeScale: 1,
    log: () => {},
    durations: { 'character-sheet': { queuedMs: [0, 200], runMs: [200, 1000] } },
    ...(faults ? { faults: profileFromSpec(faults, 'throttle') } : {}),
  });

/** Accepted submits a second at the emulator, from the first request created to the last. */
function sustained(emulator) {
  const times = emulator.requests
    .inspect({})
    .map((r) => Date.parse(r.created_at))
    .sort((a, b) => a - b);
  if (times.length < 2) return 0;
  return ((times.length - 1) * 1000) / (times[times.length - 1] - times[0]);
}

/** 429s per 100 submit POSTs the emulator saw (created plus refused). */
function refusedPer100(emulator) {
  const refused = (emulator.faults.injected['submit.rate_429'] ?? 0) + (emulator.faults.injected['submit.rate_limit'] ?? 0);
  const created = emulator.requests.inspect({}).length;
  return { refused, created, per100: Number(((refused * 100) / Math.max(1, created + refused)).toFixed(2)) };
}

async function genpipeRun(faults, label) {
  const emulator = await emulatorWith(faults);
  try {
    const dir = scratchDir(`throttle-${label}`);
    const path = join(dir, 'sheets.yaml');
    writeFileSync(
      path,
      `version: 1\nname: sheets\nsteps:\n  sheets:\n    model: character-sheet\n    matrix:\n      n: { range: { from: 1, to: ${instances} } }\n    input: { tier: cats, seed: "{{ n }}" }\n`,
    );
    const out = join(dir, 'runs');
    const result = await runGenpipe(
      ['run', path, '--base-url', emulator.url, '--concurrency', String(concurrency), '--quiet', '--yes', '--out', out],
      {
        HF_KEY,
      },
    );
    if (result.code !== 0) throw new Error(`genpipe run failed (exit ${result.code}): ${result.stderr.slice(-800)}`);
    const runRoot = join(out, 'sheets');
    const runDir = join(
      runRoot,
      readdirSync(runRoot).find((n) => !n.startsWith('.')),
    );
    const report = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8'));
    return {
      makespan_s: Number((result.wallMs / 1000).toFixed(2)),
      completed: report.total.counts.completed,
      throttled_wait_s: Number(((report.throttledMs ?? 0) / 1000).toFixed(2)),
      sustained_per_s: Number(sustained(emulator).toFixed(2)),
      ...refusedPer100(emulator),
    };
  } finally {
    await emulator.close();
  }
}

async function officialRun(faults) {
  const emulator = await emulatorWith(faults);
  try {
    const [apiKey, apiSecret] = HF_KEY.split(':');
    const client = createHiggsfieldClient({ apiKey, apiSecret, baseURL: emulator.url });
    const slots = pLimit(concurrency);
    const started = Date.now();
    const outcomes = await Promise.all(
      Array.from({ length: instances }, (_, i) =>
        slots(() =>
          client.subscribe(SHEET_PATH, { input: { tier: 'cats', seed: i + 1 } }).then(
            (r) => r.status,
            () => 'error',
          ),
        ),
      ),
    );
    return {
      makespan_s: Number(((Date.now() - started) / 1000).toFixed(2)),
      completed: outcomes.filter((s) => s === 'completed').length,
      gave_up: outcomes.filter((s) => s === 'error').length,
      sustained_per_s: Number(sustained(emulator).toFixed(2)),
      ...refusedPer100(emulator),
    };
  } finally {
    await emulator.close();
  }
}

const clean = [];
const sparse = [];
// BENCH_ROUNDS=0 measures the rate limit alone.
for (let i = 0; i < rounds; i++) {
  clean.push(await genpipeRun(undefined, 'clean'));
  sparse.push(await genpipeRun(SPARSE, 'sparse'));
  console.log(`round ${i + 1}: without faults ${clean[i].makespan_s} s; 2% 429s ${sparse[i].makespan_s} s (${sparse[i].refused} 429s)`);
}
const cleanS = rounds > 0 ? median(clean.map((r) => r.makespan_s)) : NaN;
const sparseS = rounds > 0 ? median(sparse.map((r) => r.makespan_s)) : NaN;
const limited = await genpipeRun(LIMITED, 'limited');
const official = await officialRun(LIMITED);
const results = {
  instances,
  concurrency,
  rounds,
  sparse_429: {
    faults: SPARSE,
    without_faults_s: cleanS,
    with_faults_s: sparseS,
    ratio: Number((sparseS / cleanS).toFixed(3)),
    target: 1.3,
    runs: { without_faults: clean, with_faults: sparse },
  },
  rate_limit: {
    faults: LIMITED,
    limit_per_s: limit,
    genpipe: limited,
    limit_over_sustained: Number((limit / limited.sustained_per_s).toFixed(3)),
    target: 1.1,
    official_client: official,
  },
};
console.table({
  'sparse 429s (2%, Retry-After 1)': {
    genpipe: `${sparseS} s`,
    baseline: `${cleanS} s without faults`,
    ratio: results.sparse_429.ratio,
    target: '<= 1.3x',
  },
  [`true limit ${limit}/s: sustained`]: {
    genpipe: `${limited.sustained_per_s}/s`,
    baseline: `${official.sustained_per_s}/s official`,
    ratio: results.rate_limit.limit_over_sustained,
    target: '<= 1.1x of N/s',
  },
  [`true limit ${limit}/s: 429s per 100 submits`]: {
    genpipe: limited.per100,
    baseline: `${official.per100} official (${official.gave_up} gave up)`,
    ratio: Number((limited.per100 / Math.max(0.01, official.per100)).toFixed(3)),
    target: '<= official',
  },
});
writeResults('throttle', results);
