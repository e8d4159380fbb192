#!/usr/bin/env node
// Storage sinks: a 2,000-sheet run at zero service latency with an S3 sink
// (s3rver, the loopback store of the sink tests, a process of its own) against the same run
// without one, in the same benchmark, as a ratio of their throughputs (instances per second, wall
// time of `genpipe run` from spawn to exit, medians of BENCH_RUNS). Target: >= 0.8x. s3rver writes
// each object and its metadata as files and is far slower than a real store; the figure is a floor.
// Beside them, the store alone (lib/s3-put-cli.mjs): the plain run's files uploaded by the AWS SDK
// at the sink's default concurrency with nothing else running, timed the same way, and the CPU time
// of every process of each side (genpipe, its emulator, the uploader, s3rver), medians. On a
// machine whose cores the plain run already fills, a run with a sink cannot beat the CPU both
// kinds of work need: the plain run's CPU plus the store alone's, over the cores (`cpu_ceiling`).
// (The uploader's CPU counts its own start-up and the SDK's loading, a few tenths of a second that
// a run with a sink pays once too: the ceiling errs a little low, never high.)
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { availableParallelism } from 'node:os';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_SINK_CONCURRENCY } from '../dist/sink/sink-config.js';
import {
  cpuOfProcess,
  cpuSeconds,
  here,
  measuredIn,
  median,
  runGenpipe,
  scratchDir,
  startEmulatorProcess,
  writeResults,
} from './lib/harness.mjs';

const runs = Number(process.env.BENCH_RUNS ?? 3);
const instances = Number(process.env.BENCH_SINK_INSTANCES ?? 2_000);
const dir = scratchDir('sink');
const KEY = 'GENPIPEBENCHKEY';
const SECRET = 'bench-sink-secret';
// The runs use the sink's default concurrency; the store alone uploads at the same.
const SINK_CONCURRENCY = DEFAULT_SINK_CONCURRENCY;
const AWS_ENV = {
  AWS_ACCESS_KEY_ID: KEY,
  AWS_SECRET_ACCESS_KEY: SECRET,
  AWS_REGION: 'us-east-1',
  AWS_EC2_METADATA_DISABLED: 'true',
  AWS_SHARED_CREDENTIALS_FILE: join(dir, 'none'),
  AWS_CONFIG_FILE: join(dir, 'none'),
};

function manifest(name, sink) {
  const path = join(dir, `${name}.yaml`);
  const output = sink ? `  output:\n    sink: { url: "s3://bench/${name}/{{ run.id }}", endpoint: "${sink}", path_style: true }\n` : '';
  writeFileSync(
    path,
    `version: 1\nname: ${name}\ndefaults:\n  polling: { min_ms: 10, initial_ms: 100 }\n${output}steps:\n  sheets:\n    model: character-sheet\n    matrix:\n      seed: { range: { from: 1, to: ${instances} } }\n    input: { tier: cats, seed: "{{ seed }}" }\n`,
  );
  return path;
}

/** s3rver on a free loopback port, with the bucket `bench`. */
async function startStore() {
  const child = spawn(
    process.execPath,
    [join(here, '..', 'test', 'sink', 's3rver-child.mjs'), '0', mkdtempSync(join(dir, 'store-')), KEY, SECRET, 'bench'],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  let line = '';
  for await (const chunk of child.stdout) {
    line += chunk;
    if (line.includes('\n')) break;
  }
  const { port } = JSON.parse(line);
  return {
    endpoint: `http://127.0.0.1:${port}`,
    cpu: () => cpuOfProcess(child.pid),
    stop: async () => {
      child.kill('SIGKILL');
      if (child.exitCode === null) await once(child, 'exit');
    },
  };
}

/** One `genpipe run`: its rate, its run directory, and the CPU seconds of genpipe, its emulator and the store. */
async function timedRun(path) {
  const emulator = await startEmulatorProcess(['--time-scale', '0']);
  try {
    const out = mkdtempSync(join(dir, 'runs-'));
    const storeBefore = cpuSeconds(store.cpu());
    const result = await runGenpipe(
      ['run', path, '--base-url', emulator.url, '--concurrency', '32', '--rate', '100000', '--quiet', '--yes', '--out', out],
      AWS_ENV,
    );
    if (result.code !== 0) throw new Error(`genpipe run failed (exit ${result.code}): ${result.stderr.slice(-800)}`);
    return {
      perSecond: instances / (result.wallMs / 1000),
      out,
      cpu: { genpipe: cpuSeconds(result.cpu), emulator: cpuSeconds(emulator.cpu()), store: cpuSeconds(store.cpu()) - storeBefore },
    };
  } finally {
    await emulator.stop();
  }
}

/** The store alone: the files under `out` uploaded by lib/s3-put-cli.mjs, timed from spawn to exit. */
async function storeAlone(out, prefix) {
  const storeBefore = cpuSeconds(store.cpu());
  const started = process.hrtime.bigint();
  const child = spawn(
    process.execPath,
    [join(here, 'lib', 's3-put-cli.mjs'), store.endpoint, 'bench', prefix, String(SINK_CONCURRENCY), out],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...AWS_ENV } },
  );
  let stderr = '';
  child.stderr.on('data', (c) => (stderr += c));
  const [code] = await once(child, 'exit');
  const wallS = Number(process.hrtime.bigint() - started) / 1e9;
  const measured = measuredIn(stderr);
  if (code !== 0 || measured === undefined) throw new Error(`the uploader failed (exit ${code}): ${stderr.slice(-800)}`);
  if (measured.files !== instances) throw new Error(`the uploader found ${measured.files} files, not ${instances}`);
  return { perSecond: instances / wallS, cpu: { uploader: cpuSeconds(measured), store: cpuSeconds(store.cpu()) - storeBefore } };
}

const store = await startStore();
const medianOf = (rounds, pick) => Number(median(rounds.map(pick)).toFixed(2));
try {
  const plain = [];
  const sunk = [];
  const alone = [];
  for (let i = 0; i < runs; i++) {
    const p = await timedRun(manifest(`plain${i}`));
    plain.push(p);
    alone.push(await storeAlone(p.out, `alone${i}`));
    sunk.push(await timedRun(manifest(`sunk${i}`, store.endpoint)));
  }
  const withoutSinkPerS = median(plain.map((r) => r.perSecond));
  const withSinkPerS = median(sunk.map((r) => r.perSecond));
  const storeAlonePerS = median(alone.map((r) => r.perSecond));
  const cpu = {
    without_sink: { genpipe: medianOf(plain, (r) => r.cpu.genpipe), emulator: medianOf(plain, (r) => r.cpu.emulator) },
    store_alone: { uploader: medianOf(alone, (r) => r.cpu.uploader), store: medianOf(alone, (r) => r.cpu.store) },
    with_sink: {
      genpipe: medianOf(sunk, (r) => r.cpu.genpipe),
      emulator: medianOf(sunk, (r) => r.cpu.emulator),
      store: medianOf(sunk, (r) => r.cpu.store),
    },
  };
  const cores = availableParallelism();
  // The least wall time the CPU allows a run with a sink: both kinds of work, on every core.
  const plainCpu = cpu.without_sink.genpipe + cpu.without_sink.emulator;
  const aloneCpu = cpu.store_alone.uploader + cpu.store_alone.store;
  const ceilingPerS = instances / ((plainCpu + aloneCpu) / cores);
  const results = {
    instances,
    runs,
    sink_concurrency: SINK_CONCURRENCY,
    withoutSinkPerS,
    withSinkPerS,
    ratio: withSinkPerS / withoutSinkPerS,
    target: 0.8,
    store: 's3rver on 127.0.0.1 (a floor: it writes each object as files)',
    store_alone_per_s: storeAlonePerS,
    store_alone_ratio_to_without_sink: storeAlonePerS / withoutSinkPerS,
    cores,
    cpu_s: cpu,
    cpu_ceiling_per_s: ceilingPerS,
    cpu_ceiling_ratio_to_without_sink: ceilingPerS / withoutSinkPerS,
    with_sink_ratio_to_cpu_ceiling: withSinkPerS / ceilingPerS,
  };
  console.log(
    `sink: ${instances} sheets at zero latency: without a sink ${withoutSinkPerS.toFixed(0)}/s, with an S3 sink ${withSinkPerS.toFixed(0)}/s: ${results.ratio.toFixed(2)}x (target >= 0.8x)`,
  );
  console.log(
    `the store alone (the AWS SDK uploading the same files at concurrency ${SINK_CONCURRENCY}): ${storeAlonePerS.toFixed(0)}/s (${results.store_alone_ratio_to_without_sink.toFixed(2)}x the run without a sink); CPU ceiling of a run with the sink on ${cores} cores: ${ceilingPerS.toFixed(0)}/s (${results.cpu_ceiling_ratio_to_without_sink.toFixed(2)}x), reached ${results.with_sink_ratio_to_cpu_ceiling.toFixed(2)}x`,
  );
  console.log(`CPU seconds (user + system): ${JSON.stringify(cpu)}`);
  writeResults('sink', results);
} finally {
  await store.stop();
}
