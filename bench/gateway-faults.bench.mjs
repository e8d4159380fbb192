#!/usr/bin/env node
// What gateway failures *after processing* cost. Submits are processed and charged,
// then answered 502 (20%) or 504 (10%), or their connection is dropped (5%): the failure that makes
// a keyless retry pay twice. The same workloads run against emulators started with the same seed
// and fault file, at zero service latency:
//   - genpipe (`genpipe run`, a child process): 100 character sheets (keyed: retried under their
//     Idempotency-Key) and 100 marketing images (keyless: a lost answer ends unknown, never resent);
//   - the official client, @higgsfield/client v2 `subscribe` with p-limit at the same concurrency,
//     as a user would write it (its defaults: up to 3 retries of a submit on any error): the same
//     100 sheets and 100 images.
// Reported per side: requests the emulator made, instances charged more than once, and the money
// those extra requests cost (US$); for genpipe also the unknown instances and what the emulator
// charged for them (the most a `--retry unknown` decision is about). Goal: genpipe pays US$0 twice.
// BENCH_INSTANCES (default 100) and BENCH_CONCURRENCY (default 20) change the size.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import pLimit from 'p-limit';
import { startEmulator, profileFromSpec } from '../dist/emulator/index.js';
import { parseJournal } from '../dist/run/journal/journal.js';
import { HF_KEY, runGenpipe, scratchDir, writeResults } from './lib/harness.mjs';

const require = createRequire(import.meta.url);
const { createHiggsfieldClient } = require('@higgsfield/client/v2');

const instances = Number(process.env.BENCH_INSTANCES ?? 100);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 20);
const faultSpec = { submit: { error_502_after: 0.2, error_504_after: 0.1, reset_after: 0.05 } };
const emulatorOptions = () => ({
  port: 0,
  seed: 27,
  timeScale: 0,
  log: () => {},
  faults: profileFromSpec(faultSpec, 'gateway-after-processing'),
});
const SHEET_PATH = '/vendor/ai-influencer';
const AD_PATH = '/marketing-studio/image/sunburst';
const sheetInput = (i) => ({ tier: 'cats', seed: i + 1 });
const adInput = (i) => ({ prompt: `Banner number ${i + 1} for a pet food brand`, resolution: '1k', quality: 'low' });

const round6 = (usd) => Math.round(usd * 1e6) / 1e6;

/**
 * The money of one model's requests at the emulator: each distinct body is one instance; every
 * request beyond the first of a body is a duplicate, and its net (charges minus refunds) was paid twice.
 */
function doubleSpend(emulator, model) {
  const rows = emulator.requests.inspect({}).filter((r) => r.model === model);
  const byBody = new Map();
  for (const r of rows) byBody.set(r.body_hash, [...(byBody.get(r.body_hash) ?? []), r.request_id]);
  const net = (id) => emulator.ledger.netMicros((e) => e.request_id === id) / 1e6;
  let extraUsd = 0;
  let paidTwice = 0;
  for (const ids of byBody.values()) {
    if (ids.length > 1) paidTwice++;
    for (const id of ids.slice(1)) extraUsd += net(id);
  }
  return {
    requests: rows.length,
    instances_sent: byBody.size,
    instances_charged_more_than_once: paidTwice,
    duplicate_requests: rows.length - byBody.size,
    paid_twice_usd: round6(extraUsd),
    rows,
    net,
  };
}

async function genpipeSide() {
  const emulator = await startEmulator(emulatorOptions());
  try {
    const dir = scratchDir('gateway-faults');
    const path = join(dir, 'gateway.yaml');
    writeFileSync(
      path,
      `version: 1\nname: gateway\nprices:\n  marketing-image: 0.02\nsteps:\n` +
        `  sheets:\n    model: character-sheet\n    matrix:\n      n: { range: { from: 1, to: ${instances} } }\n    input: { tier: cats, seed: "{{ n }}" }\n` +
        `  ads:\n    model: marketing-image\n    matrix:\n      n: { range: { from: 1, to: ${instances} } }\n    input: { prompt: "Banner number {{ n }} for a pet food brand", resolution: 1k, quality: low }\n`,
    );
    const out = join(dir, 'runs');
    const result = await runGenpipe(
      ['run', path, '--base-url', emulator.url, '--concurrency', String(concurrency), '--quiet', '--yes', '--out', out],
      { HF_KEY },
    );
    // Exit 1 is expected: the run ends with unknown instances.
    if (result.code !== 0 && result.code !== 1) throw new Error(`genpipe run failed (exit ${result.code}): ${result.stderr.slice(-800)}`);
    const runRoot = join(out, 'gateway');
    const runDir = join(
      runRoot,
      readdirSync(runRoot).find((n) => !n.startsWith('.')),
    );
    const { records } = parseJournal(readFileSync(join(runDir, 'journal.jsonl')));
    const known = new Set(records.flatMap((r) => (r.type === 'submitted' && r.handle.kind === 'request' ? [r.handle.requestId] : [])));
    const report = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8'));
    const sheets = doubleSpend(emulator, 'character-sheet');
    const ads = doubleSpend(emulator, 'marketing-image');
    const lost = ads.rows.filter((r) => !known.has(r.request_id));
    return {
      wall_s: Number((result.wallMs / 1000).toFixed(2)),
      faults_injected: { ...emulator.faults.injected },
      sheets: strip(sheets),
      ads: {
        ...strip(ads),
        unknown_instances: report.total.counts.unknown,
        unknown_charged_at_emulator_usd: round6(lost.reduce((sum, r) => sum + ads.net(r.request_id), 0)),
      },
      paid_twice_usd: round6(sheets.paid_twice_usd + ads.paid_twice_usd),
    };
  } finally {
    await emulator.close();
  }
}

async function officialSide() {
  const emulator = await startEmulator(emulatorOptions());
  try {
    const [apiKey, apiSecret] = HF_KEY.split(':');
    // As a user would write it: the client's defaults, our emulator's address.
    const client = createHiggsfieldClient({ apiKey, apiSecret, baseURL: emulator.url });
    const limit = pLimit(concurrency);
    const started = Date.now();
    const jobs = [
      ...Array.from({ length: instances }, (_, i) => [SHEET_PATH, sheetInput(i)]),
      ...Array.from({ length: instances }, (_, i) => [AD_PATH, adInput(i)]),
    ];
    const outcomes = await Promise.all(
      jobs.map(([path, input]) =>
        limit(() =>
          client.subscribe(path, { input }).then(
            (r) => r.status,
            () => 'error',
          ),
        ),
      ),
    );
    const sheets = doubleSpend(emulator, 'character-sheet');
    const ads = doubleSpend(emulator, 'marketing-image');
    return {
      wall_s: Number(((Date.now() - started) / 1000).toFixed(2)),
      faults_injected: { ...emulator.faults.injected },
      completed: outcomes.filter((s) => s === 'completed').length,
      errors: outcomes.filter((s) => s === 'error').length,
      sheets: strip(sheets),
      ads: strip(ads),
      paid_twice_usd: round6(sheets.paid_twice_usd + ads.paid_twice_usd),
    };
  } finally {
    await emulator.close();
  }
}

const strip = ({ rows, net, ...figures }) => figures;

const genpipe = await genpipeSide();
console.log(
  `genpipe: paid twice US$${genpipe.paid_twice_usd}; ${genpipe.ads.unknown_instances} keyless unknown (US$${genpipe.ads.unknown_charged_at_emulator_usd} charged at the emulator); ${genpipe.wall_s} s`,
);
const official = await officialSide();
console.log(
  `official client: paid twice US$${official.paid_twice_usd} (${official.sheets.duplicate_requests + official.ads.duplicate_requests} duplicate requests); ${official.errors} submits gave up; ${official.wall_s} s`,
);
const results = { instances_per_model: instances, concurrency, faults: faultSpec, genpipe, official_client: official };
console.table({
  genpipe: {
    'paid twice US$': genpipe.paid_twice_usd,
    'instances charged twice': genpipe.sheets.instances_charged_more_than_once + genpipe.ads.instances_charged_more_than_once,
    unknown: genpipe.ads.unknown_instances,
    'unknown charged US$': genpipe.ads.unknown_charged_at_emulator_usd,
  },
  'official client': {
    'paid twice US$': official.paid_twice_usd,
    'instances charged twice': official.sheets.instances_charged_more_than_once + official.ads.instances_charged_more_than_once,
    unknown: '-',
    'unknown charged US$': '-',
  },
});
writeResults('gateway-faults', results);
