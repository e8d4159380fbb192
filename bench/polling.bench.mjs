#!/usr/bin/env node
// Polling makespan: most users have no public webhook URL, so polling is the mode that
// matters. 300 character sheets of 1.7-4.4 s at concurrency 20, side by side in one run, each
// against its own emulator with the same seed: genpipe polling (a first run, and a run after an
// earlier run of 100 sheets, whose durations seed its polls), genpipe in webhook mode, and the
// official client v2 `subscribe` with p-limit. Targets: polling <= 1.05x the ideal with HTTP
// requests <= 0.8x the official client's, and webhook mode no worse. The ideal is a
// client told by the emulator when each job ends (lib/makespan.mjs, idealSide), measured in the same
// run; each makespan is also given over the sum of durations over the slots, a stricter floor.
import { genpipeSide, idealSide, officialSide, plannedFloor, pollingFloor, sideResult } from './lib/makespan.mjs';
import { writeResults } from './lib/harness.mjs';

const instances = Number(process.env.BENCH_INSTANCES ?? 300);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 20);
const emulatorOptions = {
  port: 0,
  seed: 11,
  timeScale: 1,
  log: () => {},
  durations: { 'character-sheet': { queuedMs: [0, 0], runMs: [1_700, 4_400] } },
};

const polling = await genpipeSide(emulatorOptions, { instances, concurrency, webhook: false });
console.log(
  `genpipe polling: ${(polling.makespanMs / 1000).toFixed(1)} s, ${polling.requests} requests, ideal ${(polling.idealMs / 1000).toFixed(1)} s`,
);
const warm = await genpipeSide(emulatorOptions, { instances, concurrency, webhook: false, history: 100 });
console.log(`genpipe polling after an earlier run: ${(warm.makespanMs / 1000).toFixed(1)} s, ${warm.requests} requests`);
const webhook = await genpipeSide(emulatorOptions, { instances, concurrency, webhook: true });
console.log(`genpipe webhooks: ${(webhook.makespanMs / 1000).toFixed(1)} s, ${webhook.requests} requests`);
const official = await officialSide(emulatorOptions, { instances, concurrency });
console.log(`official client: ${(official.makespanMs / 1000).toFixed(1)} s, ${official.requests} requests`);
const idealClient = await idealSide(emulatorOptions, { instances, concurrency });
console.log(`ideal client (told when each job ends): ${(idealClient.makespanMs / 1000).toFixed(1)} s, ${idealClient.requests} requests`);
// Evenly spaced polls knowing the duration range in advance, within the target's request budget:
// 0.8x the official client's requests, less a submit and a download per sheet, left for status
// polls. A model of a floor, not the floor: polls planned for the distribution (sparse first,
// denser later, as genpipe plans them) do better on the same budget (src/run/polling/poll-schedule.ts).
const pollBudget = Math.floor(0.8 * official.requests) - 2 * instances;
const floor = pollingFloor(polling.durationsMs, concurrency, pollBudget, [1_700, 4_400]);
const planned = await plannedFloor(polling.durationsMs, concurrency, pollBudget, [1_700, 4_400]);
// The same with 200 polls a job: jobs seen done at once, what is left is how they pack on the slots.
const packing = pollingFloor(polling.durationsMs, concurrency, Number.POSITIVE_INFINITY, [1_700, 4_400]);
const results = {
  instances,
  concurrency,
  job_seconds: [1.7, 4.4],
  ideal_client: sideResult(idealClient),
  genpipe_polling: sideResult(polling, idealClient),
  genpipe_polling_with_history: sideResult(warm, idealClient),
  genpipe_webhooks: sideResult(webhook, idealClient),
  official_client: sideResult(official, idealClient),
  polling_requests_to_official: Number((polling.requests / official.requests).toFixed(3)),
  polling_with_history_requests_to_official: Number((warm.requests / official.requests).toFixed(3)),
  webhook_requests_to_official: Number((webhook.requests / official.requests).toFixed(3)),
  // The issue: "Report both polling and webhook figures, each against the official client."
  polling_makespan_to_official: Number((polling.makespanMs / official.makespanMs).toFixed(3)),
  polling_with_history_makespan_to_official: Number((warm.makespanMs / official.makespanMs).toFixed(3)),
  webhook_makespan_to_official: Number((webhook.makespanMs / official.makespanMs).toFixed(3)),
  // The floor is simulated; over the simulated packing (jobs seen at once) it compares with the ideal client.
  polling_floor_at_request_budget: {
    status_polls_allowed: pollBudget,
    ...floor,
    ratio_to_packing: floor && packing ? Number((floor.ratio_to_ideal / packing.ratio_to_ideal).toFixed(3)) : undefined,
  },
  planned_polls_at_request_budget: {
    status_polls_allowed: pollBudget,
    ...planned,
    ratio_to_packing: planned && packing ? Number((planned.ratio_to_ideal / packing.ratio_to_ideal).toFixed(3)) : undefined,
  },
  seen_at_once_packing_ratio_to_ideal: packing?.ratio_to_ideal,
  targets: { polling_to_ideal_client: 1.05, polling_requests_to_official: 0.8, webhooks_to_ideal_client: 1.05 },
};
console.table({
  'polling makespan / ideal client': results.genpipe_polling.ratio_to_ideal_client,
  'polling after an earlier run, makespan / ideal client': results.genpipe_polling_with_history.ratio_to_ideal_client,
  'webhook makespan / ideal client': results.genpipe_webhooks.ratio_to_ideal_client,
  'official makespan / ideal client': results.official_client.ratio_to_ideal_client,
  'ideal client makespan / sum of durations over slots': results.ideal_client.ratio_to_ideal,
  'evenly spaced polls knowing the range, within 0.8x the official requests, over jobs seen at once (simulated)':
    results.polling_floor_at_request_budget.ratio_to_packing,
  'polls planned as genpipe plans them, knowing the range, within 0.8x the official requests, over jobs seen at once (simulated)':
    results.planned_polls_at_request_budget.ratio_to_packing,
  'polling makespan / ideal': results.genpipe_polling.ratio_to_ideal,
  'polling after an earlier run, makespan / ideal': results.genpipe_polling_with_history.ratio_to_ideal,
  'polling after an earlier run, requests / official': results.polling_with_history_requests_to_official,
  'webhook makespan / ideal': results.genpipe_webhooks.ratio_to_ideal,
  'official makespan / ideal': results.official_client.ratio_to_ideal,
  'polling requests / official': results.polling_requests_to_official,
  'evenly spaced polls knowing the range, within 0.8x the official requests, makespan / ideal': floor?.ratio_to_ideal,
  'jobs seen done at once (packing alone), makespan / ideal': packing?.ratio_to_ideal,
  'webhook requests / official': results.webhook_requests_to_official,
  'polling makespan / official': results.polling_makespan_to_official,
  'polling after an earlier run, makespan / official': results.polling_with_history_makespan_to_official,
  'webhook makespan / official': results.webhook_makespan_to_official,
});
writeResults('polling', results);
