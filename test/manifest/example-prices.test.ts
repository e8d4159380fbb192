// The example manifests' prices are what the emulator charges at submit for their configurations:
// each example runs against an in-process emulator, and every instance's planned price is set
// against the ledger's charges for its request, within US$0.01.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseCsv } from 'csv-parse/sync';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../src/emulator/index.js';
import { cleanTemps, findRunDir, tempDir } from '../run/runner-helpers.js';

const pipelines = new URL('../../pipelines', import.meta.url).pathname;
let emu: Emulator;
/** What each example's run printed (its summary line). */
const said = new Map<string, string>();
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterAll(async () => {
  await emu.close();
  cleanTemps();
});

/** Each instance's planned price against the ledger's charges at submit for its request. */
async function pricesAgainstLedger(name: string): Promise<{ instance: string; priced: number; charged: number; runDir: string }[]> {
  const out = tempDir();
  const stderr: string[] = [];
  const stdout: string[] = [];
  const io: CliIO = {
    out: (t) => stdout.push(t),
    write: async () => {},
    err: (t) => stderr.push(t),
    env: { HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` },
    signal: new AbortController().signal,
  };
  const args = ['run', join(pipelines, `${name}.yaml`), '--base-url', emu.url, '--out', out, '--yes'];
  expect(await main(args, io), stderr.join('\n')).toBe(0);
  said.set(name, [...stdout, ...stderr].join('\n'));
  const runDir = findRunDir(out, name);
  const plan = JSON.parse(readFileSync(join(runDir, 'plan.json'), 'utf8')) as { steps: { id: string; price_usd: number | null }[] };
  const priceOf = new Map(plan.steps.map((s) => [s.id, s.price_usd]));
  const rows = parseCsv(readFileSync(join(runDir, 'outputs.csv'), 'utf8'), { columns: true }) as Record<string, string>[];
  const seen = new Set<string>();
  const lines: { instance: string; priced: number; charged: number; runDir: string }[] = [];
  for (const row of rows) {
    const id = row.request_id as string;
    if (!id || seen.has(id)) continue;
    seen.add(id);
    const charged = emu.ledger.entries.filter((e) => e.request_id === id && e.kind === 'charge').reduce((sum, e) => sum + e.usd, 0);
    lines.push({ instance: row.instance as string, priced: priceOf.get(row.step as string) ?? Number.NaN, charged, runDir });
  }
  expect(lines.length).toBeGreaterThan(0);
  return lines;
}

const off = (lines: readonly { instance: string; priced: number; charged: number }[]): string[] =>
  lines.filter((l) => !(Math.abs(l.priced - l.charged) <= 0.01 + 1e-9)).map((l) => `${l.instance}: ${l.priced} vs ${l.charged}`);

describe('example prices equal what the emulator charges at submit', () => {
  it('quickstart: every sheet at the list price', { timeout: 30_000 }, async () => {
    const lines = await pricesAgainstLedger('quickstart');
    expect(off(lines)).toEqual([]);
    for (const l of lines) expect(l.charged).toBe(0.05);
    // A sheet is not token-priced: nothing in its report or summary is provisional.
    expect(said.get('quickstart')).toMatch(/; net US\$0\.30; /);
    expect(readFileSync(join((lines[0] as { runDir: string }).runDir, 'report.md'), 'utf8')).not.toContain('Provisional');
  });

  it('campaign: every marketing-image configuration it uses', { timeout: 60_000 }, async () => {
    const lines = await pricesAgainstLedger('campaign');
    expect(off(lines)).toEqual([]);
    // Each configuration the example uses is here: enhanced, direct at 2k and at 4k.
    expect(new Set(lines.map((l) => l.instance.replace(/\[.*$/, '')))).toEqual(new Set(['enhanced', 'direct', 'direct-4k']));
    // The report's charged equals the ledger's charges at submit to the cent, and says what it cannot see.
    const runDir = (lines[0] as { runDir: string }).runDir;
    const report = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { total: { estimatedUsd: number } };
    const ledgerCharged = lines.reduce((sum, l) => sum + l.charged, 0);
    expect(Math.round(report.total.estimatedUsd * 100)).toBe(Math.round(ledgerCharged * 100));
    // The summary line marks its net provisional.
    expect(said.get('campaign')).toMatch(/; net US\$0\.\d\d \(provisional\); /);
    expect(readFileSync(join(runDir, 'report.md'), 'utf8')).toContain(
      'Provisional: the marketing-image figures are the charges at submit, as priced; the service reconciles them later to actual token usage, and the refunds of that reconciliation are not visible to this report.',
    );
  });
});
