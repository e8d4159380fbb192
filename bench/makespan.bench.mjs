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
import { genpipeSide, officialSide, seenAtOnceRatio, sideResult } from './lib/makespan.mjs';
import { writeResults } from './lib/harness.mjs';

const instances = Number(process.env.BENCH_INSTANCES ?? 500);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 20);
// Character sheets that take 1 to 10 s, start to finish.
const emulatorOptions = {
  port: 0,
  seed: 7,
  timeScale: 1,
  log: () => {},
  durations: { 'character-sheet': { queuedMs: [0, 0], runMs: [1_000, 10_000] } },
};

const genpipe = await genpipeSide(emulatorOptions, { instances, concurrency, webhook: true });
console.log(
  `genpipe: ${(genpipe.makespanMs / 1000).toFixed(1)} s, ${genpipe.requests} requests, ideal ${(genpipe.idealMs / 1000).toFixed(1)} s`,
);
const official = await officialSide(emulatorOptions, { instances, concurrency });
console.log(
  `official client: ${(official.makespanMs / 1000).toFixed(1)} s, ${official.requests} requests, ideal ${(official.idealMs / 1000).toFixed(1)} s`,
);
const results = {
  instances,
  concurrency,
  job_seconds: [1, 10],
  genpipe: sideResult(genpipe),
  official_client: sideResult(official),
  makespan_ratio_genpipe_to_official: Number((genpipe.makespanMs / official.makespanMs).toFixed(3)),
  requests_ratio_genpipe_to_official: Number((genpipe.requests / official.requests).toFixed(3)),
  // The floor under the ideal: these jobs on these slots, each seen done the instant it ends.
  seen_at_once_ratio_to_ideal: seenAtOnceRatio(genpipe.durationsMs, concurrency),
  targets: { genpipe_to_ideal: 1.05, makespan_to_official: 0.9, requests_to_official: 0.5 },
};
console.table({
  'genpipe makespan / ideal': results.genpipe.ratio_to_ideal,
  'official makespan / ideal': results.official_client.ratio_to_ideal,
  'jobs seen done at once / ideal (the packing floor)': results.seen_at_once_ratio_to_ideal,
  'genpipe / official makespan': results.makespan_ratio_genpipe_to_official,
  'genpipe / official requests': results.requests_ratio_genpipe_to_official,
});
writeResults('makespan', results);
