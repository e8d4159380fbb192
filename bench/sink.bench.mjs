#!/usr/bin/env node
// Storage sinks (issue 29, item 9): a 2,000-sheet run at zero service latency with an S3 sink
// (s3rver, the loopback store of the sink tests, a process of its own) against the same run
// without one, in the same benchmark, as a ratio of their throughputs (instances per second, wall
// time of `genpipe run` from spawn to exit, medians of BENCH_RUNS). Target: >= 0.8x. s3rver writes
// each object and its metadata as files and is far slower than a real store; the figure is a floor.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { here, median, runGenpipe, scratchDir, startEmulatorProcess, writeResults } from './lib/harness.mjs';

const runs = Number(process.env.BENCH_RUNS ?? 3);
const instances = Number(process.env.BENCH_SINK_INSTANCES ?? 2_000);
const dir = scratchDir('sink');
const KEY = 'GENPIPEBENCHKEY';
const SECRET = 'bench-sink-secret';

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
    stop: async () => {
      child.kill('SIGKILL');
      if (child.exitCode === null) await once(child, 'exit');
    },
  };
}

async function timedRun(path) {
  const emulator = await startEmulatorProcess(['--time-scale', '0']);
  try {
    const out = mkdtempSync(join(dir, 'runs-'));
    const result = await runGenpipe(
      ['run', path, '--base-url', emulator.url, '--concurrency', '32', '--rate', '100000', '--quiet', '--yes', '--out', out],
      {
        AWS_ACCESS_KEY_ID: KEY,
        AWS_SECRET_ACCESS_KEY: SECRET,
        AWS_REGION: 'us-east-1',
        AWS_EC2_METADATA_DISABLED: 'true',
        AWS_SHARED_CREDENTIALS_FILE: join(dir, 'none'),
        AWS_CONFIG_FILE: join(dir, 'none'),
      },
    );
    if (result.code !== 0) throw new Error(`genpipe run failed (exit ${result.code}): ${result.stderr.slice(-800)}`);
    return instances / (result.wallMs / 1000);
  } finally {
    await emulator.stop();
  }
}

const store = await startStore();
try {
  const plain = [];
  const sunk = [];
  for (let i = 0; i < runs; i++) {
    plain.push(await timedRun(manifest(`plain${i}`)));
    sunk.push(await timedRun(manifest(`sunk${i}`, store.endpoint)));
  }
  const results = {
    instances,
    runs,
    withoutSinkPerS: median(plain),
    withSinkPerS: median(sunk),
    ratio: median(sunk) / median(plain),
    target: 0.8,
    store: 's3rver on 127.0.0.1 (a floor: it writes each object as files)',
  };
  console.log(
    `sink: ${instances} sheets at zero latency: without a sink ${results.withoutSinkPerS.toFixed(0)}/s, with an S3 sink ${results.withSinkPerS.toFixed(0)}/s: ${results.ratio.toFixed(2)}x (target >= 0.8x)`,
  );
  writeResults('sink', results);
} finally {
  await store.stop();
}
