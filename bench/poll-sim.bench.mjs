#!/usr/bin/env node
// A simulation of the polling benchmark's workload (polling.bench.mjs: 300 sheets of 1.7-4.4 s at
// concurrency 20) against genpipe's own poll scheduler (dist/run/polling/poll-schedule.js), in simulated
// time: no server, no clock, seeded, so a change to the scheduler can be compared over many runs in
// seconds where the live benchmark takes minutes a run. Each request is submitted when a slot frees
// (3 ms a request), polled when its timer says, and seen done by the first poll at or after its end.
// A cold run starts from nothing; a warm one from the intervals an earlier run of 100 sheets
// (another seed) saw, its first 64 ends in journal order, as poll-prior.ts reads them from its
// journal. The yardstick is the same jobs on the same slots seen done the moment they end (the
// live benchmark's ideal client does that, plus its own few milliseconds). Also the floor: the scheduler's plan for the true range, frozen, never
// learning. Writes bench/results/poll-sim.json. Not a substitute for the live benchmark: it
// leaves out the event loop, the journal and the emulator, which the live one measures.
import { writeResults } from './lib/harness.mjs';

const { PollScheduler } = await import('../dist/run/polling/poll-schedule.js');
const { seenDuration } = await import('../dist/run/polling/poll-prior.js');

const RUNS = Number(process.env.SIM_RUNS ?? 40);
const [LO, HI] = [1_700, 4_400];
const LATENCY_MS = 3;
const MODEL = 'character-sheet';

function seeded(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** One run of `n` sheets at `concurrency`; `prior` seeds the scheduler. Bounded: every poll moves a request's time forward. */
function simulate({ n = 300, concurrency = 20, seed, prior, scheduler }) {
  const random = seeded(seed);
  const durations = Array.from({ length: n }, () => LO + (HI - LO) * random());
  const polls = scheduler ?? new PollScheduler({}, seeded(seed + 7));
  if (prior) polls.seed(MODEL, prior);
  const pending = [];
  const seen = [];
  let next = 0;
  let requests = 0;
  let makespan = 0;
  const submit = (at) => {
    if (next >= n) return;
    const job = next++;
    const t0 = at + LATENCY_MS;
    const timer = polls.start(MODEL, t0);
    pending.push({ at: t0 + timer.next(t0), job, timer, t0 });
  };
  for (let i = 0; i < concurrency; i++) submit(0);
  while (pending.length > 0) {
    pending.sort((a, b) => a.at - b.at);
    const { at, job, timer, t0 } = pending.shift();
    requests++;
    const now = at + LATENCY_MS;
    if (now - t0 >= durations[job]) {
      const estimate = timer.complete(now);
      seen.push(seenDuration(now - t0, estimate));
      makespan = Math.max(makespan, now + LATENCY_MS);
      submit(now + LATENCY_MS);
    } else pending.push({ at: now + timer.next(now), job, timer, t0 });
  }
  const slots = new Array(concurrency).fill(0);
  for (const d of durations) {
    const free = slots.indexOf(Math.min(...slots));
    slots[free] += d + 3 * LATENCY_MS;
  }
  return { ratio: makespan / Math.max(...slots), pollsPerJob: requests / n, seen };
}

/** A scheduler that plans for the true range and never learns: the floor of planned polls. */
class Frozen extends PollScheduler {
  observeInterval() {}
}

// 1 + ceil(d / 2 s), d uniform over the range: integrated piecewise.
let officialPolls = 0;
for (let k = 1; (k - 1) * 2_000 < HI; k++)
  officialPolls += ((1 + k) * Math.max(0, Math.min(HI, k * 2_000) - Math.max(LO, (k - 1) * 2_000))) / (HI - LO);
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
const side = (run) => {
  const rounds = Array.from({ length: RUNS }, (_, i) => run((i + 1) * 101));
  return {
    ratio_to_seen_at_once: Number(mean(rounds.map((r) => r.ratio)).toFixed(4)),
    polls_per_job: Number(mean(rounds.map((r) => r.pollsPerJob)).toFixed(3)),
  };
};
const results = {
  runs: RUNS,
  workload: { instances: 300, concurrency: 20, job_seconds: [LO / 1000, HI / 1000] },
  // The official client's status polls for these durations (at once, then every 2 s), over the
  // range, and the status polls 0.8x its requests leave after a submit and a download.
  official_polls_per_job: Number(officialPolls.toFixed(3)),
  polls_per_job_at_the_request_budget: Number((0.8 * (2 + officialPolls) - 2).toFixed(3)),
  cold: side((seed) => simulate({ seed })),
  after_an_earlier_run: side((seed) => simulate({ seed, prior: simulate({ n: 100, seed: seed + 1000 }).seen.slice(0, 64) })),
  floor_planned_for_the_true_range: side((seed) =>
    simulate({ seed, scheduler: new Frozen({ jitter: 0, documented: () => [LO, HI] }, seeded(seed + 7)) }),
  ),
};
console.table({
  cold: results.cold,
  'after an earlier run': results.after_an_earlier_run,
  'floor: planned for the true range': results.floor_planned_for_the_true_range,
});
writeResults('poll-sim', results);
