// The budget a progress view shows is the one the run runs under. A resume given no --budget runs
// under the budget its last start recorded, and its progress says so, instead of the manifest's
// (or none): the view reads the budget from the run_started event, never from its own options.
import { afterAll, describe, expect, it } from 'vitest';
import { cleanTemps, findRunDir, runCli, sheetsManifest, tempDir, withEmulator } from '../run/runner-helpers.js';

afterAll(cleanTemps);

const startedBudget = (stdout: string): unknown[] =>
  stdout
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as { type: string; budgetUsd?: unknown })
    .filter((event) => event.type === 'run_started')
    .map((event) => event.budgetUsd);

describe('the budget a run shows', () => {
  it('is the recorded budget on a resume given none, and the given one on a start', { timeout: 60_000 }, async () => {
    await withEmulator({ timeScale: 0 }, async (emu) => {
      const dir = tempDir();
      const out = tempDir();
      const manifest = sheetsManifest(dir, 2, { name: 'budgeted', extra: 'defaults: { budget_usd: 9 }' });
      const first = await runCli(['run', manifest, '--base-url', emu.url, '--out', out, '--budget', '5', '--json-logs']);
      expect(first.code, first.stderr).toBe(0);
      expect(startedBudget(first.stdout)).toEqual([5]);
      const resumed = await runCli(['resume', findRunDir(out, 'budgeted'), '--base-url', emu.url, '--json-logs']);
      expect(resumed.code, resumed.stderr).toBe(0);
      // The manifest says 9; the run recorded 5 at its start and keeps it.
      expect(startedBudget(resumed.stdout)).toEqual([5]);
    });
  });
});
