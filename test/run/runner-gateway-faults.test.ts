// Genpipe pays no instance twice under the gateway failures that come *after*
// processing (502 and 504 after the request was made and charged, and a dropped connection). The
// built CLI runs a pipeline of keyed character sheets and keyless marketing images against an
// emulator with those faults, and the emulator's ledger is compared with what genpipe reports:
// keyed instances are charged once each (their retries carry the key), keyless ones hit by a fault
// end unknown and are never resent, neither by the run nor by a plain resume.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { profileFromSpec } from '../../src/emulator/faults.js';
import { startEmulator } from '../../src/emulator/index.js';
import { cleanTemps, emuRequests, findRunDir, journalOf, runCli, tempDir } from './runner-helpers.js';

afterAll(cleanTemps);

const SHEETS = 20;
const ADS = 20;
/** The manifest's price of a marketing image (the emulator's token price is another figure). */
const AD_PRICE = 0.02;

function manifest(dir: string): string {
  const path = join(dir, 'gateway.yaml');
  writeFileSync(
    path,
    `version: 1
name: gateway
prices:
  marketing-image: ${AD_PRICE}
steps:
  sheets:
    model: character-sheet
    matrix:
      seed: { range: { from: 1, to: ${SHEETS} } }
    input:
      tier: cats
      seed: "{{ seed }}"
  ads:
    model: marketing-image
    matrix:
      n: { range: { from: 1, to: ${ADS} } }
    input:
      prompt: "Banner number {{ n }} for a pet food brand"
      resolution: 1k
      quality: low
`,
  );
  return path;
}

interface ReportGroup {
  name: string;
  counts: Record<string, number>;
  netUsd: number;
  unknownUsd: number;
  estimatedUsd: number;
}

describe('gateway faults after processing', () => {
  it(
    'keyed instances are charged once each; keyless ones hit by a fault end unknown and are never resent',
    { timeout: 120_000 },
    async () => {
      const faults = profileFromSpec({ submit: { error_502_after: 0.25, error_504_after: 0.15, reset_after: 0.1 } }, 'gateway');
      const emu = await startEmulator({ port: 0, timeScale: 0, seed: 27, faults, log: () => {} });
      try {
        const dir = tempDir();
        const out = tempDir();
        const result = await runCli(['run', manifest(dir), '--out', out, '--base-url', emu.url, '--concurrency', '8', '--yes']);
        const injected = emu.faults.injected;
        for (const kind of ['error_502_after', 'error_504_after'])
          expect(injected[`submit.${kind}`] ?? 0, JSON.stringify(injected)).toBeGreaterThan(0);

        const rows = emuRequests(emu);
        const sheets = rows.filter((r) => r.model === 'character-sheet');
        const ads = rows.filter((r) => r.model === 'marketing-image');
        // Keyed: one request per key at the emulator, every sheet completed, US$0.05 each, no more.
        expect(sheets).toHaveLength(SHEETS);
        expect(new Set(sheets.map((r) => r.idempotency_key)).size).toBe(SHEETS);
        expect(sheets.every((r) => r.status === 'completed')).toBe(true);
        const sheetIds = new Set(sheets.map((r) => r.request_id));
        const netOf = (ids: Set<string>): number => emu.ledger.netMicros((e) => e.request_id !== undefined && ids.has(e.request_id)) / 1e6;
        expect(netOf(sheetIds)).toBeCloseTo(SHEETS * 0.05, 9);

        // Keyless: each instance was sent exactly once (one request per distinct body at the emulator).
        expect(ads).toHaveLength(ADS);
        expect(new Set(ads.map((r) => r.body_hash)).size).toBe(ADS);
        const journal = journalOf(findRunDir(out, 'gateway'));
        const known = new Set(
          journal.records.flatMap((r) => (r.type === 'submitted' && r.handle.kind === 'request' ? [r.handle.requestId] : [])),
        );
        // The ads the emulator made but genpipe never heard of: processed, charged, answered 502/504 or dropped.
        const lost = new Set(ads.filter((r) => !known.has(r.request_id)).map((r) => r.request_id));
        expect(lost.size).toBeGreaterThan(0);
        expect(netOf(lost)).toBeGreaterThan(0);
        for (const id of sheetIds) expect(known.has(id), `sheet request ${id} is in the journal`).toBe(true);

        // genpipe's account of it: the lost ones are unknown, the run says so and does not succeed.
        expect(result.code, result.stderr.slice(-2_000)).not.toBe(0);
        expect(result.stdout).toContain(`${SHEETS + ADS - lost.size} completed, 0 failed, 0 nsfw, 0 canceled, ${lost.size} unknown`);
        expect(result.stderr).toContain('it was not resent, to avoid paying twice');
        const runDir = findRunDir(out, 'gateway');
        const report = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { steps: ReportGroup[]; total: ReportGroup };
        const step = (name: string): ReportGroup => report.steps.find((s) => s.name === name) as ReportGroup;
        expect(step('sheets').counts.completed).toBe(SHEETS);
        expect(step('sheets').netUsd).toBeCloseTo(netOf(sheetIds), 9);
        expect(step('ads').counts.unknown).toBe(lost.size);
        expect(report.total.counts.unknown).toBe(lost.size);
        // An unknown instance is shown apart (invariant B of test/history/history-invariants.ts): not in the net, up to its price in unknownUsd.
        expect(step('ads').estimatedUsd).toBeCloseTo(ADS * AD_PRICE, 9);
        expect(step('ads').netUsd).toBeCloseTo((ADS - lost.size) * AD_PRICE, 9);
        expect(step('ads').unknownUsd).toBeCloseTo(lost.size * AD_PRICE, 9);

        // A plain resume (no --retry unknown) sends nothing for them.
        const resumed = await runCli(['resume', runDir, '--base-url', emu.url, '--yes']);
        expect(resumed.stdout + resumed.stderr).toContain(`${lost.size} unknown`);
        const after = emuRequests(emu);
        expect(after).toHaveLength(SHEETS + ADS);
      } finally {
        await emu.close();
      }
    },
  );
});
