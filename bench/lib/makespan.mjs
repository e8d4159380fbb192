// The sides of a makespan benchmark, each against its own emulator started with the same options
// (so all see the same job durations): `genpipe run` as a child process (polling, or webhook mode),
// the official client v2 `subscribe` with p-limit, as a user would write it, and the ideal client
// (told by the emulator when each job ends).
import { writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import pLimit from 'p-limit';
import { request } from 'undici';
import { startEmulator } from '../../dist/emulator/index.js';
import { freePort, HF_KEY, runGenpipe, scratchDir } from './harness.mjs';

const require = createRequire(import.meta.url);
const { createHiggsfieldClient } = require('@higgsfield/client/v2');

/** The ideal makespan: the sum of the jobs' durations over the concurrency, or the longest job if larger. */
function ideal(emulator, concurrency) {
  const durations = [...emulator.requests.byId.values()].map((r) => r.endAt - r.createdAt);
  const sum = durations.reduce((a, b) => a + b, 0);
  return { durations: durations.length, durationsMs: durations, idealMs: Math.max(sum / concurrency, Math.max(...durations)) };
}

/**
 * A floor for polling under a request budget: the jobs (durations in submission order) run on
 * `concurrency` slots, each taken by the next job as soon as its job is seen done, and each job is
 * polled on the best fixed grid for its spread (k polls evenly over [minMs, maxMs], the last at the
 * longest duration), with k as large as `pollBudget` polls in all allow. Known in advance here, the
 * range is more than a real client knows; but evenly spaced polls are not the best use of the
 * budget (polls planned for the distribution, sparse first and denser later, are less late at the
 * same number), so this models a floor for even spacing only. Returns the makespan over the
 * ideal, and the polls per job.
 */
export function pollingFloor(durationsMs, concurrency, pollBudget, [minMs, maxMs]) {
  const sum = durationsMs.reduce((a, b) => a + b, 0);
  const idealMs = Math.max(sum / concurrency, Math.max(...durationsMs));
  let best;
  // Bounded: k up to 200.
  for (let k = 1; k <= 200; k++) {
    const slots = new Array(concurrency).fill(0);
    let polls = 0;
    for (const d of durationsMs) {
      let seen = maxMs;
      let n = k;
      for (let j = 1; j <= k; j++) {
        const t = minMs + ((maxMs - minMs) * j) / k;
        if (t >= d) {
          seen = t;
          n = j;
          break;
        }
      }
      polls += n;
      const free = slots.indexOf(Math.min(...slots));
      slots[free] += Math.max(seen, d);
    }
    if (polls > pollBudget) break;
    best = {
      polls_per_job: Number((polls / durationsMs.length).toFixed(2)),
      ratio_to_ideal: Number((Math.max(...slots) / idealMs).toFixed(3)),
    };
  }
  return best;
}

/**
 * The same jobs on the same slots, each seen done the instant it ends, in submission order (the
 * packing of a client that submits in this order and is told of each end at once, as no client
 * knows the durations beforehand), over the ideal above: what is left once polling and every
 * client's own costs are gone. (The polling benchmark's seen-at-once figure is pollingFloor with
 * no poll budget: the same, on a grid of 200 poll times.)
 */
export function seenAtOnceRatio(durationsMs, concurrency) {
  const slots = new Array(concurrency).fill(0);
  for (const d of durationsMs) slots[slots.indexOf(Math.min(...slots))] += d;
  const sum = durationsMs.reduce((a, b) => a + b, 0);
  return Number((Math.max(...slots) / Math.max(sum / concurrency, Math.max(...durationsMs))).toFixed(3));
}

/**
 * `genpipe run` of `instances` character sheets at `concurrency`; `webhook` tracks by webhook, else
 * by polling. `history`: an earlier run of the same pipeline (`history` sheets, against an emulator
 * of its own with another seed, same durations) goes first into the same output root, as
 * yesterday's run of a nightly job would: the measured run starts polling from its durations.
 */
export async function genpipeSide(emulatorOptions, { instances, concurrency, webhook, history = 0 }) {
  const dir = scratchDir('makespan');
  const path = join(dir, 'makespan.yaml');
  writeFileSync(
    path,
    `version: 1\nname: makespan\nsteps:\n  sheets:\n    model: character-sheet\n    matrix:\n      seed: { range: { from: 1, to: ${instances} } }\n    input: { tier: cats, seed: "{{ seed }}" }\n`,
  );
  if (history > 0) {
    const earlier = await startEmulator({ ...emulatorOptions, seed: (emulatorOptions.seed ?? 1) + 1000 });
    try {
      const yesterday = join(dir, 'yesterday.yaml');
      writeFileSync(
        yesterday,
        `version: 1\nname: makespan\nsteps:\n  sheets:\n    model: character-sheet\n    matrix:\n      seed: { range: { from: 1, to: ${history} } }\n    input: { tier: cats, seed: "{{ seed }}" }\n`,
      );
      const result = await runGenpipe(
        ['run', yesterday, '--base-url', earlier.url, '--concurrency', String(concurrency), '--quiet', '--yes', '--out', join(dir, 'runs')],
        { HF_KEY },
      );
      if (result.code !== 0) throw new Error(`the earlier genpipe run failed (exit ${result.code}): ${result.stderr.slice(-800)}`);
    } finally {
      await earlier.close();
    }
    // Run ids have a one-second clock: the measured run must not share the earlier one's.
    await new Promise((r) => setTimeout(r, 1_100));
  }
  const emulator = await startEmulator(emulatorOptions);
  try {
    const args = [
      'run',
      path,
      '--base-url',
      emulator.url,
      '--concurrency',
      String(concurrency),
      '--quiet',
      '--yes',
      '--out',
      join(dir, 'runs'),
    ];
    if (webhook) {
      // Completions arrive as they happen, each confirmed by one status GET.
      const port = await freePort();
      args.push('--webhook-url', `http://127.0.0.1:${port}/hooks`, '--listen', `127.0.0.1:${port}`);
    }
    const result = await runGenpipe(args, { HF_KEY });
    if (result.code !== 0) throw new Error(`genpipe run failed (exit ${result.code}): ${result.stderr.slice(-800)}`);
    return { makespanMs: result.wallMs, requests: emulator.stats.total, ...ideal(emulator, concurrency) };
  } finally {
    await emulator.close();
  }
}

/** The official client: `subscribe` per instance under p-limit, then one GET per image, as genpipe downloads. */
export async function officialSide(emulatorOptions, { instances, concurrency }) {
  const emulator = await startEmulator(emulatorOptions);
  try {
    const [apiKey, apiSecret] = HF_KEY.split(':');
    // As a user would write it: the client's defaults, our emulator's address.
    const client = createHiggsfieldClient({ apiKey, apiSecret, baseURL: emulator.url });
    const limit = pLimit(concurrency);
    const started = Date.now();
    const results = await Promise.all(
      Array.from({ length: instances }, (_, i) =>
        limit(() => client.subscribe('/vendor/ai-influencer', { input: { tier: 'cats', seed: i + 1 } })),
      ),
    );
    await Promise.all(results.map((r) => limit(async () => (await request(r.images[0].url)).body.dump())));
    const makespanMs = Date.now() - started;
    const completed = results.filter((r) => r.status === 'completed').length;
    if (completed !== instances) throw new Error(`the official client completed ${completed} of ${instances}`);
    return { makespanMs, requests: emulator.stats.total, ...ideal(emulator, concurrency) };
  } finally {
    await emulator.close();
  }
}

/**
 * The ideal client (told by the emulator when each job ends; 601 requests for 300 sheets): a
 * client that submits each sheet with `hf_webhook` pointing at its own loopback listener, is told by
 * the emulator the moment the job ends (the delivery carries the image URL, so no status GET), and
 * downloads and writes the file, `concurrency` at a time. No journal, no checks: the least any
 * client must do, and the same packing on the slots as any other. Its makespan is the
 * ideal; the sum of durations over the slots (`ideal` above) is a stricter floor no client reaches.
 */
export async function idealSide(emulatorOptions, { instances, concurrency }) {
  const emulator = await startEmulator(emulatorOptions);
  const dir = scratchDir('ideal');
  const waiting = new Map();
  const early = new Map();
  const listener = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      res.end();
      const event = JSON.parse(body);
      const resolve = waiting.get(event.request_id);
      if (resolve) {
        waiting.delete(event.request_id);
        resolve(event);
      } else early.set(event.request_id, event);
    });
  });
  await new Promise((resolve) => listener.listen(0, '127.0.0.1', resolve));
  try {
    const hook = encodeURIComponent(`http://127.0.0.1:${listener.address().port}/hooks`);
    const headers = { authorization: `Key ${HF_KEY}`, 'content-type': 'application/json' };
    // Bounded: a delivery that has not come a minute after the longest job could end fails the run.
    const limitMs = 60_000 + 1.5 * maxRunMs(emulatorOptions);
    const ended = (id) =>
      early.get(id) ??
      new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`the ideal client heard nothing of ${id} within ${Math.round(limitMs / 1000)} s`)),
          limitMs,
        );
        waiting.set(id, (event) => {
          clearTimeout(timer);
          resolve(event);
        });
      });
    const limit = pLimit(concurrency);
    const started = Date.now();
    const statuses = await Promise.all(
      Array.from({ length: instances }, (_, i) =>
        limit(async () => {
          const submit = await request(`${emulator.url}/vendor/ai-influencer?hf_webhook=${hook}`, {
            method: 'POST',
            headers,
            body: JSON.stringify({ tier: 'cats', seed: i + 1 }),
          });
          if (submit.statusCode !== 200)
            throw new Error(`the ideal client's submit answered ${submit.statusCode}: ${await submit.body.text()}`);
          const { request_id: id } = await submit.body.json();
          const event = await ended(id);
          if (event.status !== 'completed') return event.status;
          const image = await request(event.images[0].url);
          await writeFile(join(dir, `sheet-${i}.png`), Buffer.from(await image.body.arrayBuffer()));
          return event.status;
        }),
      ),
    );
    const makespanMs = Date.now() - started;
    const completed = statuses.filter((s) => s === 'completed').length;
    if (completed !== instances) throw new Error(`the ideal client completed ${completed} of ${instances}`);
    return { makespanMs, requests: emulator.stats.total, ...ideal(emulator, concurrency) };
  } finally {
    listener.close();
    await emulator.close();
  }
}

/** The longest a character sheet runs under these emulator options, in ms of wall time. */
function maxRunMs(emulatorOptions) {
  const run = emulatorOptions.durations?.['character-sheet']?.runMs?.[1] ?? 30_000;
  const queued = emulatorOptions.durations?.['character-sheet']?.queuedMs?.[1] ?? 0;
  return (run + queued) * (emulatorOptions.timeScale ?? 1);
}

/** One contender's figures for results JSON. */
export const sideResult = (side, idealClient) => ({
  makespan_s: side.makespanMs / 1000,
  ...(idealClient ? { ratio_to_ideal_client: Number((side.makespanMs / idealClient.makespanMs).toFixed(3)) } : {}),
  ideal_s: side.idealMs / 1000,
  ratio_to_ideal: Number((side.makespanMs / side.idealMs).toFixed(3)),
  http_requests: side.requests,
});

/**
 * The same floor for polls planned as genpipe plans them (src/run/polling/poll-schedule.ts, planPolls) for
 * the duration range known in advance (uniform over it), within `pollBudget` polls in all, without
 * jitter: each job follows the plan's sparser or denser schedule in the plan's proportions (by a
 * low-discrepancy sequence, so the run spends what the plan expects). Returns the makespan over the
 * ideal, and the polls per job.
 */
export async function plannedFloor(durationsMs, concurrency, pollBudget, [minMs, maxMs]) {
  const { documentedDistribution, planPolls, resolvePollSchedule } = await import('../../dist/run/polling/poll-schedule.js');
  const sum = durationsMs.reduce((a, b) => a + b, 0);
  const idealMs = Math.max(sum / concurrency, Math.max(...durationsMs));
  const options = resolvePollSchedule({ jitter: 0 });
  const plan = planPolls(documentedDistribution([minMs, maxMs]), options, pollBudget / durationsMs.length);
  if (!plan) return undefined;
  const slots = new Array(concurrency).fill(0);
  let polls = 0;
  durationsMs.forEach((d, i) => {
    const times = ((i + 1) * 0.6180339887) % 1 < plan.denserShare ? plan.denserMs : plan.timesMs;
    const at = times.findIndex((t) => t >= d);
    // Past the last planned time (not with the range known): seen a second after.
    const seen = at >= 0 ? times[at] : d + 1_000;
    polls += at >= 0 ? at + 1 : times.length + 1;
    const free = slots.indexOf(Math.min(...slots));
    slots[free] += Math.max(seen, d);
  });
  return {
    polls_per_job: Number((polls / durationsMs.length).toFixed(2)),
    ratio_to_ideal: Number((Math.max(...slots) / idealMs).toFixed(3)),
  };
}
