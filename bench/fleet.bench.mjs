#!/usr/bin/env node
// The fleet (BullMQ on Redis), each figure next to its baseline in the same run:
//   1. Zero-latency throughput (character sheets at time scale 0): the local backend, then the
//      fleet with 1 and with 2 `genpipe worker` processes (coordinator with --no-local-worker).
//      Goal: >= 0.5x the local backend. Also Redis commands per instance (INFO's
//      total_commands_processed over the fleet run), and the CPU seconds (user + system) of every
//      process over each run: genpipe (the coordinator), each worker (read before and after the run:
//      its start-up is not counted), the emulator and Redis. At zero latency the cores are nearly
//      full, so a side's CPU sets its pace: the local side's CPU over the fleet's (`cpu_ratio_*`) is
//      the throughput ratio both would have if each filled the cores alike.
//   2. Makespan: 500 sheets of 1-10 s, an account cap of 20 (genpipe queue limits), 4 workers,
//      against the ideal (sum of durations / 20, or the longest job), with workers that poll and
//      with workers that follow by webhook (--webhook-url, --listen). Goal: <= 1.05x.
//   3. Recovery: kill -9 of a worker mid-run, to the first completion of one of its jobs on another
//      (goal < 20 s); kill -9 of Redis (AOF), from its restart to the next completion.
// A redis-server of its own on a free loopback port. BENCH_RUNS (default 3) rounds of 1;
// BENCH_FLEET_INSTANCES (default 2000) for 1; BENCH_MAKESPAN_INSTANCES (default 500) for 2.
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { startEmulator } from '../dist/emulator/index.js';
import { availableParallelism } from 'node:os';
import {
  bin,
  cpuOfProcess,
  cpuSeconds,
  freePort,
  HF_KEY,
  median,
  runGenpipe,
  scratchDir,
  startEmulatorProcess,
  writeResults,
} from './lib/harness.mjs';

const runs = Number(process.env.BENCH_RUNS ?? 3);
const throughputInstances = Number(process.env.BENCH_FLEET_INSTANCES ?? 2_000);
const makespanInstances = Number(process.env.BENCH_MAKESPAN_INSTANCES ?? 500);
const dir = scratchDir('fleet');

async function startRedis(appendonly) {
  const port = await freePort();
  const data = mkdtempSync(join(dir, 'redis-'));
  const start = async () => {
    const child = spawn(
      'redis-server',
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--dir',
        data,
        '--save',
        '',
        '--appendonly',
        appendonly ? 'yes' : 'no',
        '--appendfsync',
        'always',
      ],
      { stdio: 'ignore' },
    );
    const deadline = Date.now() + 10_000;
    for (;;) {
      const probe = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
      probe.on('error', () => {});
      try {
        await probe.connect();
        await probe.ping();
        probe.disconnect();
        return child;
      } catch {
        if (Date.now() > deadline) throw new Error('redis-server did not start');
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  };
  let child = await start();
  const kill = () =>
    new Promise((r) => {
      child.once('exit', r);
      child.kill('SIGKILL');
    });
  return { url: `redis://127.0.0.1:${port}`, port, kill, restart: async () => (child = await start()), stop: kill };
}

/** Redis' own counters: commands processed, and CPU seconds its process used (user + system). */
async function redisCounters(port) {
  const client = new Redis({ port, host: '127.0.0.1' });
  const info = await client.info();
  client.disconnect();
  const n = (name) => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)[1]);
  return { commands: n('total_commands_processed'), cpuS: n('used_cpu_user') + n('used_cpu_sys') };
}

function startWorker(redisUrl, serviceUrl, name, queue, extra = []) {
  const child = spawn(
    process.execPath,
    [bin, 'worker', '--redis', redisUrl, '--queue', queue, '--name', name, '--concurrency', '64', ...extra],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, HF_KEY, GENPIPE_BASE_URL: serviceUrl } },
  );
  child.stderr.on('data', () => {});
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`worker ${name} not ready`)), 20_000);
    child.stdout.on('data', (c) => {
      out += c;
      if (/^ready/m.test(out)) {
        clearTimeout(timer);
        resolve({
          child,
          kill: (signal = 'SIGKILL') =>
            new Promise((r) => {
              if (child.exitCode !== null || child.signalCode !== null) return r();
              child.once('exit', r);
              child.kill(signal);
            }),
        });
      }
    });
  });
}

function manifest(name, count, polling) {
  const path = join(dir, `${name}.yaml`);
  writeFileSync(
    path,
    `version: 1\nname: ${name}\ndefaults:\n  polling: ${polling}\nsteps:\n  sheets:\n    model: character-sheet\n    matrix:\n      seed: { range: { from: 1, to: ${count} } }\n    input: { tier: cats, seed: "{{ seed }}" }\n`,
  );
  return path;
}

const journal = (runDir) =>
  readFileSync(join(runDir, 'journal.jsonl'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l.slice(l.indexOf(' ') + 1)));
const onlyRunDir = (out, pipeline) =>
  join(
    out,
    pipeline,
    readdirSync(join(out, pipeline)).find((n) => !n.startsWith('.')),
  );

// 1. Throughput.
/** The sum of a round's CPU seconds, every process of the side. */
const cpuSum = (c) => Object.values(c).reduce((a, b) => a + b, 0);
let queueCount = 0;
async function throughputRound(redis, workers) {
  const emulator = await startEmulatorProcess(['--time-scale', '0']);
  const path = manifest('throughput', throughputInstances, '{ min_ms: 10, initial_ms: 100 }');
  const out = mkdtempSync(join(dir, 'runs-'));
  const common = ['run', path, '--base-url', emulator.url, '--concurrency', '256', '--rate', '100000', '--quiet', '--yes', '--out', out];
  const started = [];
  try {
    if (workers === 0) {
      const r = await runGenpipe(common);
      if (r.code !== 0) throw new Error(`local run failed: ${r.stderr.slice(-500)}`);
      return { perS: throughputInstances / (r.wallMs / 1000), cpu: { genpipe: cpuSeconds(r.cpu), emulator: cpuSeconds(emulator.cpu()) } };
    }
    const queue = `bench-${++queueCount}`;
    for (let i = 0; i < workers; i++) started.push(await startWorker(redis.url, emulator.url, `b${i}`, queue));
    const before = await redisCounters(redis.port);
    const workersBefore = started.map((w) => cpuSeconds(cpuOfProcess(w.child.pid)));
    const r = await runGenpipe([...common, '--redis', redis.url, '--queue', queue, '--no-local-worker']);
    if (r.code !== 0) throw new Error(`fleet run failed: ${r.stderr.slice(-500)}`);
    const workersCpu = started.reduce((sum, w, i) => sum + cpuSeconds(cpuOfProcess(w.child.pid)) - workersBefore[i], 0);
    const after = await redisCounters(redis.port);
    return {
      perS: throughputInstances / (r.wallMs / 1000),
      commandsPerInstance: (after.commands - before.commands) / throughputInstances,
      redisCpuMsPerInstance: ((after.cpuS - before.cpuS) * 1000) / throughputInstances,
      cpu: { coordinator: cpuSeconds(r.cpu), workers: workersCpu, emulator: cpuSeconds(emulator.cpu()), redis: after.cpuS - before.cpuS },
    };
  } finally {
    for (const w of started) await w.kill();
    await emulator.stop();
  }
}

const only = process.env.BENCH_FLEET_ONLY;
const redis = await startRedis(false);
const local = [];
const one = [];
const two = [];
const ops = [];
const cpu = [];
// Per round, each side's CPU seconds by process.
const sideCpu = { local: [], fleet_1_worker: [], fleet_2_workers: [] };
for (let i = 0; i < (only && only !== 'throughput' ? 0 : runs); i++) {
  const l = await throughputRound(redis, 0);
  local.push(l.perS);
  sideCpu.local.push(l.cpu);
  const a = await throughputRound(redis, 1);
  one.push(a.perS);
  ops.push(a.commandsPerInstance);
  cpu.push(a.redisCpuMsPerInstance);
  sideCpu.fleet_1_worker.push(a.cpu);
  const b = await throughputRound(redis, 2);
  two.push(b.perS);
  sideCpu.fleet_2_workers.push(b.cpu);
  console.log(
    `round ${i + 1}: local ${local.at(-1).toFixed(0)}/s (CPU ${cpuSum(l.cpu).toFixed(1)} s), fleet 1 worker ${one.at(-1).toFixed(0)}/s (${a.commandsPerInstance.toFixed(1)} Redis commands/instance, CPU ${cpuSum(a.cpu).toFixed(1)} s), 2 workers ${two.at(-1).toFixed(0)}/s (CPU ${cpuSum(b.cpu).toFixed(1)} s)`,
  );
}
/** Medians over the rounds, by process, and of their sums. */
const cpuMedians = (rounds) =>
  rounds.length === 0
    ? null
    : {
        ...Object.fromEntries(Object.keys(rounds[0]).map((k) => [k, Number(median(rounds.map((c) => c[k])).toFixed(2))])),
        total: Number(median(rounds.map(cpuSum)).toFixed(2)),
      };
const cpuOfSides = Object.fromEntries(Object.entries(sideCpu).map(([side, rounds]) => [side, cpuMedians(rounds)]));
const cpuRatio = (side) =>
  cpuOfSides.local && cpuOfSides[side] ? Number((cpuOfSides.local.total / cpuOfSides[side].total).toFixed(3)) : null;
await redis.stop();

// 2. Makespan with an account cap of 20 and 4 workers, polling and then by webhook (each worker
// with a receiver of its own on loopback).
async function makespan(webhooks) {
  const r = await startRedis(false);
  const emulator = await startEmulator({
    port: 0,
    seed: 7,
    timeScale: 1,
    log: () => {},
    durations: { 'character-sheet': { queuedMs: [0, 0], runMs: [1_000, 10_000] } },
  });
  const workers = [];
  try {
    const queue = 'makespan';
    const limits = await runGenpipe(['queue', 'limits', '--redis', r.url, '--queue', queue, '--concurrency', '20']);
    if (limits.code !== 0) throw new Error(limits.stderr);
    for (let i = 0; i < 4; i++) {
      const port = webhooks ? await freePort() : 0;
      workers.push(
        await startWorker(
          r.url,
          emulator.url,
          `m${i}`,
          queue,
          webhooks ? ['--webhook-url', `http://127.0.0.1:${port}/hooks`, '--listen', `127.0.0.1:${port}`] : [],
        ),
      );
    }
    const out = mkdtempSync(join(dir, 'makespan-'));
    const run = await runGenpipe([
      'run',
      manifest('makespan', makespanInstances, '{ min_ms: 100 }'),
      '--base-url',
      emulator.url,
      '--concurrency',
      String(makespanInstances),
      '--quiet',
      '--yes',
      '--out',
      out,
      '--redis',
      r.url,
      '--queue',
      queue,
      '--no-local-worker',
    ]);
    if (run.code !== 0) throw new Error(`makespan run failed: ${run.stderr.slice(-500)}`);
    const durations = [...emulator.requests.byId.values()].map((q) => q.endAt - q.createdAt);
    const idealMs = Math.max(durations.reduce((a, b) => a + b, 0) / 20, Math.max(...durations));
    return {
      makespan_s: run.wallMs / 1000,
      ideal_s: idealMs / 1000,
      ratio_to_ideal: Number((run.wallMs / idealMs).toFixed(3)),
      peak_active: emulator.requests.peakActive,
      http_requests: emulator.stats.total,
    };
  } finally {
    for (const w of workers) await w.kill();
    await emulator.close();
    await r.stop();
  }
}
const span = only && only !== 'makespan' ? {} : await makespan(false);
if (span.makespan_s !== undefined)
  console.log(
    `makespan, polling: ${span.makespan_s.toFixed(1)} s against an ideal of ${span.ideal_s.toFixed(1)} s (${span.ratio_to_ideal}x), peak ${span.peak_active} in progress`,
  );
const hooked = only && only !== 'makespan' ? {} : await makespan(true);
if (hooked.makespan_s !== undefined)
  console.log(
    `makespan, webhooks: ${hooked.makespan_s.toFixed(1)} s against an ideal of ${hooked.ideal_s.toFixed(1)} s (${hooked.ratio_to_ideal}x), peak ${hooked.peak_active} in progress`,
  );

// 3. Recovery.
async function fleetRun(r, name, count, runMs, workerCount, during) {
  const emulator = await startEmulator({
    port: 0,
    seed: 9,
    timeScale: 1,
    log: () => {},
    durations: { 'character-sheet': { queuedMs: [0, 0], runMs } },
  });
  const workers = [];
  try {
    const queue = name;
    const limits = await runGenpipe(['queue', 'limits', '--redis', r.url, '--queue', queue, '--concurrency', '20']);
    if (limits.code !== 0) throw new Error(limits.stderr);
    for (let i = 0; i < workerCount; i++) workers.push(await startWorker(r.url, emulator.url, `${name}${i}`, queue));
    if (process.env.BENCH_DEBUG) console.log(`${name}: ${workerCount} worker(s) ready on ${r.url}`);
    const out = mkdtempSync(join(dir, `${name}-`));
    const running = runGenpipe([
      'run',
      manifest(name, count, '{ min_ms: 100 }'),
      '--base-url',
      emulator.url,
      '--concurrency',
      String(count),
      '--quiet',
      '--yes',
      '--out',
      out,
      '--redis',
      r.url,
      '--queue',
      queue,
      '--no-local-worker',
    ]);
    const marks = await during({
      emulator,
      workers,
      startWorker: async (n) => workers.push(await startWorker(r.url, emulator.url, n, queue)),
    });
    if (process.env.BENCH_DEBUG) console.log(`${name}: marks taken`, Object.keys(marks));
    const run = await running;
    if (run.code !== 0) throw new Error(`${name} run failed: ${run.stderr.slice(-500)}`);
    return { records: journal(onlyRunDir(out, name)), ...marks };
  } finally {
    for (const w of workers) await w.kill();
    await emulator.close();
  }
}

async function recovery() {
  const r = await startRedis(true);
  try {
    // A worker killed while it holds 20 jobs of 2-4 s; another worker starts at once.
    const dead = await fleetRun(r, 'workerkill', 60, [2_000, 4_000], 1, async ({ emulator, workers, startWorker: more }) => {
      for (let i = 0; i < 200 && emulator.requests.byId.size < 20; i++) await new Promise((res) => setTimeout(res, 50));
      const held = new Set(emulator.requests.byId.keys());
      await workers[0].kill('SIGKILL');
      const killedAt = Date.now();
      await more('survivor');
      return { held, killedAt };
    });
    const submittedBy = new Map(dead.records.filter((x) => x.type === 'submitted').map((x) => [x.instance, x.handle.requestId]));
    const firstOfDead = Math.min(
      ...dead.records.filter((x) => x.type === 'status' && dead.held.has(submittedBy.get(x.instance))).map((x) => x.at),
    );
    // Redis killed (kill -9, AOF with appendfsync always) mid-run and restarted 1 s later.
    const lost = await fleetRun(r, 'rediskill', 100, [3_000, 6_000], 2, async ({ emulator }) => {
      for (let i = 0; i < 400 && emulator.requests.byId.size < 30; i++) await new Promise((res) => setTimeout(res, 50));
      await r.kill();
      await new Promise((res) => setTimeout(res, 1_000));
      await r.restart();
      return { restartedAt: Date.now() };
    });
    const afterRestart = lost.records.filter((x) => x.type === 'status' && x.at >= lost.restartedAt).map((x) => x.at);
    return {
      worker_kill_to_first_recovered_s: Number(((firstOfDead - dead.killedAt) / 1000).toFixed(2)),
      held_by_dead_worker: dead.held.size,
      target_worker_s: 20,
      redis_restart_to_next_completion_s: afterRestart.length
        ? Number(((Math.min(...afterRestart) - lost.restartedAt) / 1000).toFixed(2))
        : null,
    };
  } finally {
    await r.stop();
  }
}
const rec = only && only !== 'recovery' ? {} : await recovery();
if (rec.target_worker_s !== undefined)
  console.log(
    `recovery: first of the dead worker's jobs done ${rec.worker_kill_to_first_recovered_s} s after the kill; first completion ${rec.redis_restart_to_next_completion_s} s after Redis restarted`,
  );

const results = {
  throughput: {
    instances: throughputInstances,
    runs,
    local_median_per_s: local.length ? Math.round(median(local)) : null,
    fleet_1_worker_median_per_s: Math.round(median(one)),
    fleet_2_workers_median_per_s: Math.round(median(two)),
    ratio_1_worker_to_local: Number((median(one) / median(local)).toFixed(3)),
    ratio_2_workers_to_local: Number((median(two) / median(local)).toFixed(3)),
    redis_commands_per_instance: ops.length ? Number(median(ops).toFixed(1)) : null,
    // On paper: Redis runs commands on one core, so one core's second over its CPU per instance is
    // the most instances per second one Redis serves before it is the bottleneck.
    redis_cpu_ms_per_instance: cpu.length ? Number(median(cpu).toFixed(3)) : null,
    redis_ceiling_instances_per_s: cpu.length ? Math.round(1000 / median(cpu)) : null,
    cores: availableParallelism(),
    cpu_s: cpuOfSides,
    cpu_ratio_1_worker: cpuRatio('fleet_1_worker'),
    cpu_ratio_2_workers: cpuRatio('fleet_2_workers'),
    target_ratio: 0.5,
  },
  makespan: {
    instances: makespanInstances,
    cap: 20,
    workers: 4,
    job_seconds: [1, 10],
    polling: span,
    webhooks: hooked,
    target_ratio: 1.05,
  },
  recovery: rec,
};
console.table({
  'fleet 1 worker / local': results.throughput.ratio_1_worker_to_local,
  'fleet 2 workers / local': results.throughput.ratio_2_workers_to_local,
  'local CPU / fleet CPU, 1 worker': results.throughput.cpu_ratio_1_worker,
  'local CPU / fleet CPU, 2 workers': results.throughput.cpu_ratio_2_workers,
  'Redis commands / instance': results.throughput.redis_commands_per_instance,
  'makespan / ideal, polling': span.ratio_to_ideal,
  'makespan / ideal, webhooks': hooked.ratio_to_ideal,
  'worker kill -9 to recovery (s)': rec.worker_kill_to_first_recovered_s,
  'Redis restart to completion (s)': rec.redis_restart_to_next_completion_s,
});
writeResults('fleet', results);
