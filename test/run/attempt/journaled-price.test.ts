// Each attempt's price is journaled in its intent, and every money fold reads it there: the budget
// a resume runs under, the report, the gallery. So a price edited between two starts changes nothing
// already sent. Here a run of three sheets at US$0.05 stops at a budget of US$0.10 after two; the
// price is then edited down to US$0.02 and the run resumed under the same budget. Read from the
// manifest, the two sent would count US$0.04 and the third would go; read from the journal, they
// count US$0.10, and nothing more is sent.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cleanTemps, emuRequests, findRunDir, journalOf, runCli, spentUsd, tempDir, withEmulator } from '../runner-helpers.js';

afterAll(cleanTemps);

const manifest = (path: string, price: number): void =>
  writeFileSync(
    path,
    `version: 1
name: priced
defaults: { concurrency: 1 }
steps:
  sheets:
    model: character-sheet
    price_usd: ${price}
    matrix: { seed: { range: { from: 1, to: 3 } } }
    input: { tier: cats, seed: "{{ seed }}" }
`,
  );

describe("an attempt's price", () => {
  it('is journaled in its intent, and a price edited before a resume changes nothing already sent', { timeout: 60_000 }, async () => {
    await withEmulator({ timeScale: 0 }, async (emu) => {
      const dir = tempDir();
      const out = join(dir, 'out');
      const path = join(dir, 'priced.yaml');
      manifest(path, 0.05);
      const first = await runCli(['run', path, '--base-url', emu.url, '--out', out, '--budget', '0.10']);
      expect(first.stdout + first.stderr).toMatch(/budget/);
      expect(emuRequests(emu)).toHaveLength(2);
      const runDir = findRunDir(out, 'priced');
      const intents = journalOf(runDir).records.filter((r) => r.type === 'intent');
      expect(intents.map((r) => (r as { priceUsd?: unknown }).priceUsd)).toEqual([0.05, 0.05]);

      manifest(path, 0.02);
      const resumed = await runCli(['resume', runDir, '--base-url', emu.url, '--budget', '0.10', '--allow-changed']);
      expect(resumed.stdout + resumed.stderr).toMatch(/budget/);
      // Under the journaled prices the budget is spent: the third sheet is not sent.
      expect(emuRequests(emu)).toHaveLength(2);

      const report = await runCli(['report', runDir, '--json']);
      expect(report.code, report.stderr).toBe(0);
      const json = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { total: { netUsd: number } };
      // The report reads the same prices: what the service charged, not the edited price.
      expect(json.total.netUsd).toBeCloseTo(spentUsd(emu), 6);
      expect(json.total.netUsd).toBeCloseTo(0.1, 6);
    });
  });
});
