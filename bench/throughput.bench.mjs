#!/usr/bin/env node
// Throughput at zero service latency: completed instances per second (submit, status, download,
// journal) for 10,000 character sheets, end to end through `genpipe run`, next to the raw loopback
// request rate of a bare node:http server and to a minimal client (the same three requests and the
// same file writes, without genpipe's journal, validation, retries or report; lib/minimal-client.mjs),
// both measured in the same run, each a process of its own timed from spawn to exit. Target:
// >= 1,000 instances/s, and >= 0.8x the minimal client with the same durability: the minimal client is also measured keeping a journal the way genpipe does
// (intent synced before each submit, group commit), which says what the journal's durability costs.
// Also: peak RSS of a 100,000-instance run (target <= 400 MB), unless BENCH_SKIP_MEMORY=1. The CPU
// time of each contender and of its emulator (user and system, medians) says where the two cores went:
// at zero latency they are saturated, so a contender's whole CPU time, every thread, sets its pace.
import { mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import {
  bareHttpRate,
  cpuOfMeasure,
  here,
  HF_KEY,
  measuredIn,
  median,
  runGenpipe,
  scratchDir,
  startEmulatorProcess,
  writeResults,
} from './lib/harness.mjs';

const runs = Number(process.env.BENCH_RUNS ?? 3);
const dir = scratchDir('throughput');

function manifest(name, seeds, variations) {
  const path = join(dir, `${name}.yaml`);
  writeFileSync(
    path,
    `version: 1
name: ${name}
defaults:
  polling: { min_ms: 10, initial_ms: 100 }
steps:
  sheets:
    model: character-sheet
    matrix:
      seed: { range: { from: 1, to: ${seeds} } }
      variation_index: { range: { from: 0, to: ${variations - 1} } }
    input: { tier: cats, seed: "{{ seed }}", variation_index: "{{ variation_index }}" }
`,
  );
  return path;
}

async function genpipeRun(path, instances, concurrency, nodeArgs = []) {
  const emulator = await startEmulatorProcess(['--time-scale', '0']);
  try {
    const out = mkdtempSync(join(dir, 'runs-'));
    const result = await runGenpipe(
      ['run', path, '--base-url', emulator.url, '--concurrency', String(concurrency), '--rate', '100000', '--quiet', '--yes', '--out', out],
      {},
      { nodeArgs },
    );
    if (result.code !== 0) throw new Error(`genpipe run failed (exit ${result.code}): ${result.stderr.slice(-800)}`);
    const files = readdirSync(join(out, path.match(/([^/]+)\.yaml$/)[1]), { recursive: true }).filter((f) =>
      String(f).endsWith('.png'),
    ).length;
    if (files !== instances) throw new Error(`expected ${instances} files, found ${files}`);
    return { ...result, emulatorCpu: emulator.cpu() };
  } finally {
    await emulator.stop();
  }
}

// Timed as genpipe is, from spawn to exit of a process of its own (until 2026-11-26 it ran inside
// this process: warm from the rounds before, its start-up and module loading not counted).
async function minimalRun(instances, concurrency, journal = false, nodeArgs = []) {
  const emulator = await startEmulatorProcess(['--time-scale', '0']);
  try {
    const started = process.hrtime.bigint();
    const child = spawn(
      process.execPath,
      [
        ...nodeArgs,
        join(here, 'lib', 'minimal-client-cli.mjs'),
        emulator.url,
        mkdtempSync(join(dir, 'minimal-')),
        String(instances),
        String(concurrency),
        ...(journal ? ['journal'] : []),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, HF_KEY } },
    );
    let stderr = '';
    let stdout = '';
    child.stderr.on('data', (c) => (stderr += c));
    child.stdout.on('data', (c) => (stdout += c));
    const [code] = await once(child, 'exit');
    const perSecond = instances / (Number(process.hrtime.bigint() - started) / 1e9);
    if (code !== 0) throw new Error(`the minimal client failed (exit ${code}): ${stderr.slice(-800)}`);
    return { perSecond, cpu: cpuOfMeasure(measuredIn(stderr) ?? {}), emulatorCpu: emulator.cpu(), stdout };
  } finally {
    await emulator.stop();
  }
}

const bare = [];
const minimal = [];
const durable = [];
const genpipe = [];
// CPU seconds of each contender and of the emulator it ran against, per round.
const cpu = { genpipe: [], minimal: [], minimal_with_journal: [], emulator_for_genpipe: [], emulator_for_minimal_with_journal: [] };
const keep = (list, value) => value && list.push(value);
const ten = manifest('throughput', 100, 100);
for (let i = 0; i < runs; i++) {
  bare.push(await bareHttpRate({ concurrency: 64, seconds: 3 }));
  const m = await minimalRun(10_000, 256);
  minimal.push(m.perSecond);
  keep(cpu.minimal, m.cpu);
  const d = await minimalRun(10_000, 256, true);
  durable.push(d.perSecond);
  keep(cpu.minimal_with_journal, d.cpu);
  keep(cpu.emulator_for_minimal_with_journal, d.emulatorCpu);
  const r = await genpipeRun(ten, 10_000, 256);
  genpipe.push(10_000 / (r.wallMs / 1000));
  keep(cpu.genpipe, r.cpu);
  keep(cpu.emulator_for_genpipe, r.emulatorCpu);
  console.log(
    `round ${i + 1}: bare ${bare.at(-1).toFixed(0)} req/s, minimal client ${minimal.at(-1).toFixed(0)} instances/s (${durable.at(-1).toFixed(0)} with a durable journal), genpipe ${genpipe.at(-1).toFixed(0)} instances/s (${(r.wallMs / 1000).toFixed(1)} s, ${r.maxRssMb?.toFixed(0)} MB)`,
  );
}
const results = {
  instances: 10_000,
  runs,
  bare_http_median_rps: Math.round(median(bare)),
  minimal_client_median_instances_per_s: Math.round(median(minimal)),
  genpipe_median_instances_per_s: Math.round(median(genpipe)),
  ratio_to_bare: Number((median(genpipe) / median(bare)).toFixed(3)),
  ratio_to_minimal_client: Number((median(genpipe) / median(minimal)).toFixed(3)),
  minimal_client_with_journal_median_instances_per_s: Math.round(median(durable)),
  ratio_to_minimal_client_with_journal: Number((median(genpipe) / median(durable)).toFixed(3)),
  journal_cost_in_minimal_client: Number((1 - median(durable) / median(minimal)).toFixed(3)),
  target_instances_per_s: 1000,
  ratio_to_target: Number((median(genpipe) / 1000).toFixed(3)),
  // Medians over the rounds, in s; absent where the platform does not tell (the emulator's needs /proc).
  cpu_s: Object.fromEntries(
    Object.entries(cpu)
      .filter(([, runs]) => runs.length > 0)
      .map(([who, runs]) => [
        who,
        { user: Number(median(runs.map((c) => c.userS)).toFixed(2)), system: Number(median(runs.map((c) => c.systemS)).toFixed(2)) },
      ]),
  ),
};
// Bytes allocated on the JavaScript heap per instance: V8's GC trace gives, at each collection, the
// bytes allocated since the one before; their sum is (to the last partial cycle) all it allocated.
// A round of its own, since tracing costs time: genpipe and the durable minimal client alike.
const TRACE_GC = ['--trace-gc-nvp'];
const allocatedMb = (text) => [...text.matchAll(/\ballocated=(\d+)/g)].reduce((sum, m) => sum + Number(m[1]), 0) / 1e6;
const tracedGenpipe = await genpipeRun(ten, 10_000, 256, TRACE_GC);
const tracedMinimal = await minimalRun(10_000, 256, true, TRACE_GC);
results.allocation = {
  genpipe_kb_per_instance: Number(((allocatedMb(tracedGenpipe.stdout) * 1000) / 10_000).toFixed(1)),
  minimal_with_journal_kb_per_instance: Number(((allocatedMb(tracedMinimal.stdout) * 1000) / 10_000).toFixed(1)),
};
results.allocation.ratio = Number(
  (results.allocation.genpipe_kb_per_instance / results.allocation.minimal_with_journal_kb_per_instance).toFixed(3),
);
results.user_cpu_ratio_to_minimal_with_journal = Number((results.cpu_s.genpipe.user / results.cpu_s.minimal_with_journal.user).toFixed(3));
// Targets since the attempt's redesign: user CPU and allocation at most 1.5x the durable minimal
// client's, throughput at least 0.8x it, and a 100,000-instance run's peak RSS at most 260 MB.
results.targets = { user_cpu_ratio: 1.5, allocation_ratio: 1.5, ratio_to_minimal_client_with_journal: 0.8, peak_rss_mb: 260 };
if (process.env.BENCH_SKIP_MEMORY !== '1') {
  const big = await genpipeRun(manifest('memory', 1000, 100), 100_000, 256);
  results.memory = {
    instances: 100_000,
    peak_rss_mb: Math.round(big.maxRssMb),
    target_mb: 400,
    ratio_to_target: Number((big.maxRssMb / 400).toFixed(3)),
    wall_s: Number((big.wallMs / 1000).toFixed(1)),
  };
}
console.table({
  bare: `${results.bare_http_median_rps} req/s`,
  'minimal client': `${results.minimal_client_median_instances_per_s} instances/s`,
  genpipe: `${results.genpipe_median_instances_per_s} instances/s`,
  'genpipe / bare': results.ratio_to_bare,
  'genpipe / minimal client': results.ratio_to_minimal_client,
  'minimal client with a durable journal': `${results.minimal_client_with_journal_median_instances_per_s} instances/s`,
  'genpipe / minimal client with a durable journal': results.ratio_to_minimal_client_with_journal,
  'genpipe / 1,000 target': results.ratio_to_target,
  'user CPU, genpipe / minimal with journal': results.user_cpu_ratio_to_minimal_with_journal,
  'allocated KB per instance, genpipe / minimal with journal': `${results.allocation.genpipe_kb_per_instance} / ${results.allocation.minimal_with_journal_kb_per_instance} (${results.allocation.ratio}x)`,
  ...Object.fromEntries(
    Object.entries(results.cpu_s).map(([who, c]) => [`CPU s, ${who.replaceAll('_', ' ')} (user + system)`, `${c.user} + ${c.system}`]),
  ),
  ...(results.memory
    ? { 'peak RSS, 100k instances': `${results.memory.peak_rss_mb} MB (${results.memory.ratio_to_target}x of 400 MB)` }
    : {}),
});
writeResults('throughput', results);
