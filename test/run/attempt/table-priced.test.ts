// The money promise for a token-priced model priced by configuration: a run of marketing images
// over every resolution x quality, whose price table holds what the emulator charges at submit for
// each, reports charged equal to the ledger's charges to the cent, and says that the service's
// later reconciliation (its refunds to actual token usage) is not visible to it. A configuration
// the table does not price is refused before anything is sent.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { costMicros, inputTokens, nominalOutputTokens } from '../../../src/emulator/token-model.js';
import { cleanTemps, emuRequests, findRunDir, journalOf, runCli, tempDir, withEmulator } from '../runner-helpers.js';

afterAll(cleanTemps);

const PROMPT = 'A studio shot of a red running shoe';
const RESOLUTIONS = ['1k', '2k', '4k'];
const QUALITIES = ['low', 'medium', 'high'];

/** The emulator's charge at submit for a direct request of this configuration, in US$. */
const chargeOf = (resolution: string, quality: string): number =>
  costMicros(
    inputTokens({ prompt: PROMPT, image_urls: ['https://assets.example.test/shoe.png'] }),
    nominalOutputTokens(resolution, quality),
  ) / 1e6;

const manifest = (path: string, qualities: readonly string[]): void => {
  const rows = RESOLUTIONS.flatMap((r) =>
    QUALITIES.map((q) => `    - { when: { resolution: "${r}", quality: ${q} }, usd: ${chargeOf(r, q)} }`),
  );
  writeFileSync(
    path,
    `version: 1
name: shoes
defaults: { concurrency: 4 }
prices:
  marketing-image:
${rows.join('\n')}
steps:
  shots:
    model: marketing-image
    matrix: { resolution: [${RESOLUTIONS.join(', ')}], quality: [${qualities.join(', ')}] }
    input:
      prompt: ${PROMPT}
      image_urls: ["https://assets.example.test/shoe.png"]
      resolution: "{{ resolution }}"
      quality: "{{ quality }}"
`,
  );
};

describe('marketing images priced by a table of the charges at submit', () => {
  it(
    "report charged equal to the ledger's charges to the cent, and say the reconciliation is not visible",
    { timeout: 60_000 },
    async () => {
      await withEmulator({ timeScale: 0 }, async (emu) => {
        const dir = tempDir();
        const out = join(dir, 'out');
        const path = join(dir, 'shoes.yaml');
        manifest(path, QUALITIES);
        const run = await runCli(['run', path, '--base-url', emu.url, '--out', out, '--yes']);
        expect(run.code, run.stderr).toBe(0);
        expect(emuRequests(emu)).toHaveLength(9);
        const runDir = findRunDir(out, 'shoes');
        // Each intent journaled its configuration's price, from the table row that matches its request.
        const intents = journalOf(runDir).records.filter((r) => r.type === 'intent') as { instance: string; priceUsd?: number }[];
        expect(intents).toHaveLength(9);
        for (const intent of intents) {
          const [, resolution, quality] = /resolution=(\w+),quality=(\w+)/.exec(intent.instance) ?? [];
          expect(intent.priceUsd, intent.instance).toBe(chargeOf(resolution as string, quality as string));
        }
        expect(new Set(intents.map((r) => r.priceUsd)).size).toBe(5);

        const charges = emu.ledger.entries.filter((e) => e.kind === 'charge' && e.reason.endsWith('submitted'));
        expect(charges).toHaveLength(9);
        const ledgerCharged = charges.reduce((sum, e) => sum + e.usd, 0);
        const report = await runCli(['report', runDir, '--json']);
        expect(report.code, report.stderr).toBe(0);
        const json = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { total: { estimatedUsd: number } };
        expect(Math.round(json.total.estimatedUsd * 100)).toBe(Math.round(ledgerCharged * 100));
        // The service then refunded part of each charge, to actual usage: genpipe cannot see it, and says so.
        expect(emu.ledger.entries.some((e) => e.kind === 'refund' && e.reason.includes('reconciled to actual usage'))).toBe(true);
        const md = readFileSync(join(runDir, 'report.md'), 'utf8');
        expect(md).toContain('the refunds of that reconciliation are not visible to this report');
        expect(run.stdout + run.stderr).toMatch(/\(provisional\)/);
      });
    },
  );

  it('refuses a configuration the table does not price, located at the table, with nothing sent', { timeout: 60_000 }, async () => {
    await withEmulator({ timeScale: 0 }, async (emu) => {
      const dir = tempDir();
      const path = join(dir, 'shoes.yaml');
      manifest(path, [...QUALITIES, 'max']);
      const run = await runCli(['run', path, '--base-url', emu.url, '--out', join(dir, 'out'), '--yes']);
      expect(run.code).toBe(2);
      expect(run.stderr).toContain(
        `${path}:6:5: prices.marketing-image: shots[resolution=1k,quality=max]: no row of the price table matches this request`,
      );
      expect(emuRequests(emu)).toHaveLength(0);
    });
  });
});
