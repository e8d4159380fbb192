// Start-up, timed as a user meets it: whole processes, module loading included, side by side with
// `node -e 0` in the same run (targets: `genpipe --help` within 2x, `validate` within 3x).
// Medians of 9 runs each, interleaved so a slow minute hits every contender alike.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { bin, median, root, writeResults } from './lib/harness.mjs';

const ROUNDS = 9;
const contenders = {
  'node -e 0': [process.execPath, ['-e', '0']],
  'genpipe --help': [process.execPath, [bin, '--help']],
  'genpipe validate quickstart': [process.execPath, [bin, 'validate', join(root, 'pipelines', 'quickstart.yaml')]],
};
const times = Object.fromEntries(Object.keys(contenders).map((name) => [name, []]));
for (let round = 0; round < ROUNDS; round++) {
  for (const [name, [command, args]] of Object.entries(contenders)) {
    const started = process.hrtime.bigint();
    const result = spawnSync(command, args, { stdio: 'ignore', timeout: 30_000 });
    if (result.status !== 0) throw new Error(`${name} exited ${result.status}`);
    times[name].push(Number(process.hrtime.bigint() - started) / 1e6);
  }
}
const base = median(times['node -e 0']);
const rows = Object.entries(times).map(([name, ms]) => ({
  command: name,
  'median ms': Math.round(median(ms)),
  'x node -e 0': (median(ms) / base).toFixed(2),
}));
console.table(rows);
const help = median(times['genpipe --help']) / base;
const validate = median(times['genpipe validate quickstart']) / base;
console.log(
  `--help ${help.toFixed(2)}x (target <= 2x): ${help <= 2 ? 'PASS' : 'MISS'}; validate ${validate.toFixed(2)}x (target <= 3x): ${validate <= 3 ? 'PASS' : 'MISS'}`,
);
writeResults('startup', {
  rounds: ROUNDS,
  medianMs: Object.fromEntries(Object.entries(times).map(([k, v]) => [k, median(v)])),
  helpRatio: help,
  validateRatio: validate,
});
