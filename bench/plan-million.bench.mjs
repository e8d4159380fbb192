#!/usr/bin/env node
// `genpipe plan` on a manifest that expands to 1,000,000 instances (1,000 seeds x 1,000
// variation indexes), each one rendered and validated. Targets: at most 5 s and 512 MB peak RSS.
// Also measures --json, which streams every instance to stdout (here to /dev/null), and `validate`
// of the same manifest, its baseline (target: plan --json <= 2x validate).
import { spawnSync } from 'node:child_process';
import { mkdirSync, openSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { measuredIn, scratchDir } from './lib/harness.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const dir = scratchDir('plan');
const manifest = join(dir, 'million.yaml');
writeFileSync(
  manifest,
  `version: 1
name: million
steps:
  sheets:
    model: character-sheet
    matrix:
      seed: { range: { from: 1, to: 1000 } }
      variation_index: { range: { from: 0, to: 999 } }
    input:
      tier: cats
      seed: "{{ seed }}"
      variation_index: "{{ variation_index }}"
      body_color: "#E8A33D"
      brief: A million cats
`,
);

function measure(args) {
  const out = openSync('/dev/null', 'w');
  const result = spawnSync(process.execPath, [join(here, 'lib/measure-cli.mjs'), ...args], {
    stdio: ['ignore', out, 'pipe'],
    encoding: 'utf8',
  });
  const measured = measuredIn(result.stderr);
  if (!measured || result.status !== 0) throw new Error(`plan failed (exit ${result.status}): ${result.stderr.slice(0, 500)}`);
  return measured;
}

const runs = Number(process.env.BENCH_RUNS ?? 3);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const summary = [];
for (const [label, args] of [
  ['plan (summary)', ['plan', manifest]],
  ['plan --json (all instances)', ['plan', manifest, '--json']],
  ['validate', ['validate', manifest]],
]) {
  const samples = Array.from({ length: runs }, () => measure(args));
  summary.push({
    label,
    instances: 1_000_000,
    runs,
    median_wall_s: median(samples.map((s) => s.wallMs)) / 1000,
    median_peak_rss_mb: median(samples.map((s) => s.maxRssMb)),
    target_wall_s: 5,
    target_peak_rss_mb: 512,
  });
}
for (const row of summary) {
  row.wall_vs_target = row.median_wall_s / row.target_wall_s;
  row.rss_vs_target = row.median_peak_rss_mb / row.target_peak_rss_mb;
}
const validate = summary.find((r) => r.label === 'validate');
const json = summary.find((r) => r.label.startsWith('plan --json'));
json.ratio_to_validate = Number((json.median_wall_s / validate.median_wall_s).toFixed(3));
json.target_ratio_to_validate = 2;
console.table(
  summary.map((r) => ({
    command: r.label,
    'median s': r.median_wall_s.toFixed(2),
    'x of 5 s target': r.wall_vs_target.toFixed(2),
    'peak RSS MB': r.median_peak_rss_mb.toFixed(0),
    'x of 512 MB': r.rss_vs_target.toFixed(2),
    'x of validate': r.ratio_to_validate ?? '',
  })),
);
mkdirSync(join(here, 'results'), { recursive: true });
writeFileSync(
  join(here, 'results/plan-million.json'),
  `${JSON.stringify({ benchmark: 'plan-million', node: process.version, commit: spawnSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: dirname(fileURLToPath(import.meta.url)), encoding: 'utf8' }).stdout?.trim() || undefined, measured_at: new Date().toISOString(), results: summary }, null, 2)}\n`,
);
