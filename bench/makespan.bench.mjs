#!/usr/bin/env node
// Makespan with realistic latency, side by side in one process tree, each against its own emulator
// started with the same seed (so both see the same job durations, 1-10 s):
//   - genpipe: `genpipe run` (a child process) in webhook mode, 500 character sheets at concurrency 20;
//   - the official client: @higgsfield/client v2 `subscribe`, as a user would write it, with
//     p-limit at the same concurrency (in this process).
// Reported: each one's makespan against the ideal (sum of durations / concurrency, or the longest
// job if larger), and total HTTP requests. Targets: genpipe <= 1.05x ideal; genpipe's makespan
// <= 0.9x and its requests <= 0.5x the official client's.
// BENCH_INSTANCES (default 500) and BENCH_CONCURRENCY (default 20) shrink it for a quick look.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pLimit from 'p-limit';
import { startEmulator } from '../dist/emulator/index.js';
import { freePort, HF_KEY, runGenpipe, writeResults } from './lib/harness.mjs';

const require = createRequire(import.meta.url);
const { createHiggsfieldClient } = require('@higgsfield/client/v2');

const instances = Number(process.env.BENCH_INSTANCES ?? 500);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 20);
const seed = 7;
const dir = mkdtempSync(join(tmpdir(), 'genpipe-bench-makespan-'));
// Character sheets that take 1 to 10 s, start to finish.
const emulatorOptions = { port: 0, seed, timeScale: 1, log: () => {}, durations: { 'character-sheet': { queuedMs: [0, 0], runMs: [1_000, 10_000] } } };

function ideal(emulator) {
  const durations = [...emulator.requests.byId.values()].map((r) => r.endAt - r.createdAt);
  const sum = durations.reduce((a, b) => a + b, 0);
  return { durations: durations.length, idealMs: Math.max(sum / concurrency, Math.max(...durations)) };
}

async function genpipeSide() {
  const emulator = await startEmulator(emulatorOptions);
  try {
    const path = join(dir, 'makespan.yaml');
    writeFileSync(path, `version: 1\nname: makespan\nsteps:\n  sheets:\n    model: character-sheet\n    matrix:\n      seed: { range: { from: 1, to: ${instances} } }\n    input: { tier: cats, seed: "{{ seed }}" }\n`);
    // Webhook mode: completions arrive as they happen, each confirmed by one status GET.
    const port = await freePort();
    const hook = `http://127.0.0.1:${port}/hooks`;
    const result = await runGenpipe(['run', path, '--base-url', emulator.url, '--concurrency', String(concurrency), '--quiet', '--yes', '--out', join(dir, 'runs'), '--webhook-url', hook, '--listen', `127.0.0.1:${port}`], { HF_KEY });
    if (result.code !== 0) throw new Error(`genpipe run failed (exit ${result.code}): ${result.stderr.slice(-800)}`);
    return { makespanMs: result.wallMs, requests: emulator.stats.total, ...ideal(emulator) };
  } finally {
    await emulator.close();
  }
}

async function officialSide() {
  const emulator = await startEmulator(emulatorOptions);
  try {
    const [apiKey, apiSecret] = HF_KEY.split(':');
    // As a user would write it: the client's defaults, our emulator's address.
    const client = createHiggsfieldClient({ apiKey, apiSecret, baseURL: emulator.url });
    const limit = pLimit(concurrency);
    const started = Date.now();
    const results = await Promise.all(
      Array.from({ length: instances }, (_, i) => limit(() => client.subscribe('/vendor/ai-influencer', { input: { tier: 'cats', seed: i + 1 } }))),
    );
    // A user downloads what they generated: one GET per image, as genpipe does.
    const { request } = await import('undici');
    await Promise.all(results.map((r) => limit(async () => (await request(r.images[0].url)).body.dump())));
    const makespanMs = Date.now() - started;
    const completed = results.filter((r) => r.status === 'completed').length;
    if (completed !== instances) throw new Error(`the official client completed ${completed} of ${instances}`);
    return { makespanMs, requests: emulator.stats.total, ...ideal(emulator) };
  } finally {
    await emulator.close();
  }
}

const genpipe = await genpipeSide();
console.log(`genpipe: ${(genpipe.makespanMs / 1000).toFixed(1)} s, ${genpipe.requests} requests, ideal ${(genpipe.idealMs / 1000).toFixed(1)} s`);
const official = await officialSide();
console.log(`official client: ${(official.makespanMs / 1000).toFixed(1)} s, ${official.requests} requests, ideal ${(official.idealMs / 1000).toFixed(1)} s`);
const results = {
  instances,
  concurrency,
  job_seconds: [1, 10],
  genpipe: { makespan_s: genpipe.makespanMs / 1000, ideal_s: genpipe.idealMs / 1000, ratio_to_ideal: Number((genpipe.makespanMs / genpipe.idealMs).toFixed(3)), http_requests: genpipe.requests },
  official_client: { makespan_s: official.makespanMs / 1000, ideal_s: official.idealMs / 1000, ratio_to_ideal: Number((official.makespanMs / official.idealMs).toFixed(3)), http_requests: official.requests },
  makespan_ratio_genpipe_to_official: Number((genpipe.makespanMs / official.makespanMs).toFixed(3)),
  requests_ratio_genpipe_to_official: Number((genpipe.requests / official.requests).toFixed(3)),
  targets: { genpipe_to_ideal: 1.05, makespan_to_official: 0.9, requests_to_official: 0.5 },
};
console.table({
  'genpipe makespan / ideal': results.genpipe.ratio_to_ideal,
  'official makespan / ideal': results.official_client.ratio_to_ideal,
  'genpipe / official makespan': results.makespan_ratio_genpipe_to_official,
  'genpipe / official requests': results.requests_ratio_genpipe_to_official,
});
writeResults('makespan', results);
