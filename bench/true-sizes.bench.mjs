#!/usr/bin/env node
// 2,000 character sheets at their true size (2048 x 1152, `genpipe emulator --true-sizes`), end to end
// through `genpipe run`, next to the minimal client keeping a durable journal (lib/minimal-client.mjs:
// the same submit, status and download, intent synced before each submit) against the same
// emulator settings: what real-sized downloads cost each. Free disk is checked first, and every
// output is deleted once counted.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, rmSync, statfsSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cpuOfMeasure, here, HF_KEY, measuredIn, runGenpipe, scratchDir, startEmulatorProcess, writeResults } from './lib/harness.mjs';

const INSTANCES = Number(process.env.BENCH_TRUE_SIZES ?? 2_000);
const dir = scratchDir('true-sizes');
// A 2K sheet is tens of KB of flat colour; both contenders together need well under 1 GiB.
const fs = statfsSync(dir);
const freeBytes = Number(fs.bavail) * Number(fs.bsize);
if (freeBytes < 1024 ** 3) {
  console.error(`true-sizes: only ${(freeBytes / 1024 ** 2).toFixed(0)} MiB free under ${dir}; 1 GiB is needed.`);
  process.exit(1);
}

const pngBytesUnder = (root) =>
  readdirSync(root, { recursive: true })
    .filter((f) => String(f).endsWith('.png'))
    .map((f) => statSync(join(root, String(f))).size);

async function genpipeRun() {
  const emulator = await startEmulatorProcess(['--time-scale', '0', '--true-sizes']);
  const out = mkdtempSync(join(dir, 'genpipe-'));
  try {
    const path = join(dir, 'true-sizes.yaml');
    writeFileSync(
      path,
      `version: 1
name: true-sizes
defaults:
  polling: { min_ms: 10, initial_ms: 100 }
steps:
  sheets:
    model: character-sheet
    matrix:
      seed: { range: { from: 1, to: ${INSTANCES} } }
    input: { tier: cats, seed: "{{ seed }}" }
`,
    );
    const r = await runGenpipe([
      'run',
      path,
      '--base-url',
      emulator.url,
      '--concurrency',
      '64',
      '--rate',
      '100000',
      '--quiet',
      '--yes',
      '--out',
      out,
    ]);
    if (r.code !== 0) throw new Error(`genpipe run failed (exit ${r.code}): ${r.stderr.slice(-800)}`);
    const sizes = pngBytesUnder(out);
    if (sizes.length !== INSTANCES) throw new Error(`expected ${INSTANCES} sheets, found ${sizes.length}`);
    return {
      perSecond: INSTANCES / (r.wallMs / 1000),
      wallS: r.wallMs / 1000,
      bytes: sizes.reduce((a, b) => a + b, 0),
      emulatorCpu: emulator.cpu(),
    };
  } finally {
    await emulator.stop();
    rmSync(out, { recursive: true, force: true });
  }
}

async function minimalRun() {
  const emulator = await startEmulatorProcess(['--time-scale', '0', '--true-sizes']);
  const out = mkdtempSync(join(dir, 'minimal-'));
  try {
    const started = process.hrtime.bigint();
    const child = spawn(
      process.execPath,
      [join(here, 'lib', 'minimal-client-cli.mjs'), emulator.url, out, String(INSTANCES), '64', 'journal'],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
        env: { ...process.env, HF_KEY },
      },
    );
    let stderr = '';
    child.stderr.on('data', (c) => (stderr += c));
    const [code] = await once(child, 'exit');
    const wallS = Number(process.hrtime.bigint() - started) / 1e9;
    if (code !== 0) throw new Error(`the minimal client failed (exit ${code}): ${stderr.slice(-800)}`);
    const sizes = pngBytesUnder(out);
    return {
      perSecond: INSTANCES / wallS,
      wallS,
      bytes: sizes.reduce((a, b) => a + b, 0),
      cpu: cpuOfMeasure(measuredIn(stderr) ?? {}),
      emulatorCpu: emulator.cpu(),
    };
  } finally {
    await emulator.stop();
    rmSync(out, { recursive: true, force: true });
  }
}

const minimal = await minimalRun();
const genpipe = await genpipeRun();
const results = {
  instances: INSTANCES,
  sheet_size: '2048x1152',
  free_disk_mib_before: Math.round(freeBytes / 1024 ** 2),
  minimal_client_with_journal_instances_per_s: Math.round(minimal.perSecond),
  minimal_client_wall_s: Number(minimal.wallS.toFixed(1)),
  minimal_client_mib_downloaded: Number((minimal.bytes / 1024 ** 2).toFixed(1)),
  genpipe_instances_per_s: Math.round(genpipe.perSecond),
  genpipe_wall_s: Number(genpipe.wallS.toFixed(1)),
  genpipe_mib_downloaded: Number((genpipe.bytes / 1024 ** 2).toFixed(1)),
  ratio_to_minimal_client_with_journal: Number((genpipe.perSecond / minimal.perSecond).toFixed(3)),
  emulator_cpu_s: {
    for_minimal: minimal.emulatorCpu ? Number((minimal.emulatorCpu.userS + minimal.emulatorCpu.systemS).toFixed(1)) : null,
    for_genpipe: genpipe.emulatorCpu ? Number((genpipe.emulatorCpu.userS + genpipe.emulatorCpu.systemS).toFixed(1)) : null,
  },
};
console.table(results);
writeResults('true-sizes', results);
