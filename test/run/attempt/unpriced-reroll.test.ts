// A budget is never exceeded by an attempt counted at US$0: a re-roll whose new seed its step's
// price table cannot price is not sent (the instance fails, saying why), against a real emulator
// that answers nsfw to every sheet; a re-roll the table prices is sent, each at its price.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../../src/cli/io.js';
import { main } from '../../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../../src/emulator/index.js';
import { findRunDir, journalOf } from '../runner-helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'genpipe-unpriced-reroll-'));
let emulator: Emulator;
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  emulator = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  env = { GENPIPE_BASE_URL: emulator.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` };
});
afterAll(async () => {
  await emulator.close();
});

function io(): CliIO & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  return {
    stdout,
    stderr,
    out: (t) => stdout.push(t),
    write: async (t) => void stdout.push(t),
    err: (t) => stderr.push(t),
    env,
    signal: new AbortController().signal,
  };
}

/** An always-nsfw sheet, re-rolled, priced by a table with a row for seed 5 and, if `fallback`, a default row. */
function manifest(name: string, fallback: boolean): string {
  const path = join(dir, `${name}.yaml`);
  writeFileSync(
    path,
    `version: 1
name: ${name}
defaults: { on_nsfw: reroll, budget_usd: 1 }
prices:
  character-sheet:
    - { when: { seed: 5 }, usd: 0.05 }
${fallback ? '    - { usd: 0.05 }\n' : ''}steps:
  a:
    model: character-sheet
    input: { tier: cats, seed: 5, brief: "[emulator:nsfw] always flagged" }
`,
  );
  return path;
}

/** The emulator's ledger for the requests of these ids: charges at submit (US$ each) and their net after refunds. */
function ledgerOf(ids: ReadonlySet<string>): { charges: number[]; netUsd: number } {
  const entries = emulator.ledger.entries.filter((e) => e.request_id !== undefined && ids.has(e.request_id));
  const sum = (kind: string): number => entries.filter((e) => e.kind === kind).reduce((n, e) => n + e.usd, 0);
  return {
    charges: entries.filter((e) => e.kind === 'charge').map((e) => e.usd),
    netUsd: sum('reserve') + sum('charge') - sum('refund'),
  };
}

/** The ids of the requests the emulator took after the first `before`. */
function requestIds(before: number): Set<string> {
  return new Set(
    emulator.requests
      .inspect({})
      .slice(before)
      .map((r) => (r as { request_id: string }).request_id),
  );
}

describe('a re-roll of a step priced per instance', () => {
  it('is not sent when the table has no price for its new seed: one request, the instance failed saying why', async () => {
    const before = emulator.requests.inspect({}).length;
    const out = join(dir, 'out');
    const run = io();
    expect(await main(['run', manifest('no-row', false), '--out', out], run)).toBe(1);
    // Only the planned attempt reached the service; its nsfw answer was refunded.
    expect(emulator.requests.inspect({}).length - before).toBe(1);
    const runDir = findRunDir(out, 'no-row');
    const ids = requestIds(before);
    expect(ids.size).toBe(1);
    expect(ledgerOf(ids).charges).toEqual([0.05]);
    const said = [...run.stdout, ...run.stderr].join('\n');
    expect(said).toContain('Not sent: step a prices each request, and no row of the price table matches this request');
    expect(said).toContain('genpipe sends nothing it cannot price, so a budget holds.');
    const intents = journalOf(runDir).records.filter((r) => r.type === 'intent') as { priceUsd?: number | null }[];
    expect(intents.map((r) => r.priceUsd)).toEqual([0.05]);
    expect(await main(['report', runDir, '--json'], io())).toBe(0);
    const report = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { total: { estimatedUsd: number } };
    expect(report.total.estimatedUsd).toBe(ledgerOf(ids).netUsd);
  });

  it("is sent when the table prices its new seed: four requests, each journaled at its row's price, as the ledger charged it", async () => {
    const before = emulator.requests.inspect({}).length;
    const out = join(dir, 'out');
    expect(await main(['run', manifest('default-row', true), '--out', out], io())).toBe(1);
    expect(emulator.requests.inspect({}).length - before).toBe(4);
    const runDir = findRunDir(out, 'default-row');
    const ids = requestIds(before);
    expect(ids.size).toBe(4);
    expect(ledgerOf(ids).charges).toEqual([0.05, 0.05, 0.05, 0.05]);
    const intents = journalOf(runDir).records.filter((r) => r.type === 'intent') as { priceUsd?: number | null }[];
    expect(intents.map((r) => r.priceUsd)).toEqual([0.05, 0.05, 0.05, 0.05]);
    expect(ledgerOf(ids).netUsd).toBe(0);
  });
});
