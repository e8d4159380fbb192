import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GenerationClient } from '../../src/api/client.js';
import { resolveConfig } from '../../src/api/config.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../src/emulator/index.js';
import { marketingUsage } from '../../src/emulator/token-model.js';
import { loadManifestFile } from '../../src/manifest/load.js';
import { buildPlan } from '../../src/plan/plan.js';
import { buildCostReport } from '../../src/report/cost-report.js';
import { reportCsv, reportJson, reportMarkdown as reportMarkdownOf } from '../../src/report/render.js';
import type { CostReport, GroupLine, InstanceLine } from '../../src/report/cost-report.js';
import { writeCostReport } from '../../src/report/write-report.js';
import { createRunDir, planHash } from '../../src/run/files/run-dir.js';
import { runPlan } from '../../src/run/runner.js';

let emulator: Emulator;
let client: GenerationClient;
const dir = mkdtempSync(join(tmpdir(), 'genpipe-report-'));

beforeAll(async () => {
  emulator = await startEmulator({ port: 0, timeScale: 0.001, log: () => {} });
  client = new GenerationClient(
    resolveConfig({ flags: { baseUrl: emulator.url }, env: { HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` } }),
  );
});
afterAll(async () => {
  await client.close();
  await emulator.close();
});

async function run(manifestText: string, agentPoll?: { initialMs: number; maxMs: number; factor: number }): Promise<string> {
  const manifest = join(dir, `m${Math.random().toString(16).slice(2)}.yaml`);
  writeFileSync(manifest, manifestText);
  const plan = await buildPlan(loadManifestFile(manifest));
  const hash = planHash(plan);
  const { runId, dir: runDir } = await createRunDir(join(dir, 'runs'), plan, manifest, hash);
  await runPlan({
    plan,
    client,
    runDir,
    runId,
    planHash: hash,
    signal: new AbortController().signal,
    poll: { floorMs: 10, baseMs: 10, capMs: 50 },
    agentPoll,
  });
  return runDir;
}

describe('the cost report', () => {
  it('matches the emulator ledger to the cent: character sheets completed, failed and nsfw (refunded)', async () => {
    const before = emulator.ledger.netMicros();
    const runDir = await run(`version: 1
name: mixed
steps:
  sheets:
    model: character-sheet
    matrix:
      brief: ["fine", "fine too", "[emulator:fail] broken", "[emulator:nsfw] flagged", "fine again"]
    input: { tier: cats, seed: 7, brief: "{{ brief }}" }
`);
    const report = await buildCostReport(runDir);
    const ledgerNetUsd = (emulator.ledger.netMicros() - before) / 1e6;
    expect(report.total.counts).toMatchObject({ completed: 3, failed: 1, nsfw: 1 });
    expect(report.total.estimatedUsd).toBe(0.25);
    expect(report.total.refundedUsd).toBe(0.1);
    expect(report.total.netUsd).toBe(0.15);
    expect(report.total.netUsd).toBeCloseTo(ledgerNetUsd, 2);
    expect(Math.round(report.total.netUsd * 100)).toBe(Math.round(ledgerNetUsd * 100));
  });

  it('matches the ledger to the cent for a mixed pipeline: sheets, marketing images, agent turns, failures and nsfw', async () => {
    // Three marketing prompts of one length: one estimate each (§8 rule 2: prompt length, images,
    // resolution and quality set it). The step's price is that estimate, as a user's price table
    // would state what the service charges at submit.
    const prompts = [
      'a red running shoe on a wet rock, take 1',
      'a red running shoe on a wet rock, take 2',
      '[emulator:fail] a shoe on a rock, take 3',
    ];
    const estimates = new Set(prompts.map((prompt) => marketingUsage({ prompt }, '2k', 'high', 1).estimate.micros));
    expect(estimates.size).toBe(1);
    const marketingPriceUsd = [...estimates][0]! / 1e6;
    const first = emulator.ledger.entries.length;
    const runDir = await run(
      `version: 1
name: mixed-models
prices: { agent: 0.5 }
steps:
  sheets:
    model: character-sheet
    matrix:
      brief: ["fine", "fine too", "[emulator:fail] broken", "[emulator:nsfw] flagged"]
    input: { tier: dogs, seed: 11, brief: "{{ brief }}" }
  ads:
    model: marketing-image
    price_usd: ${marketingPriceUsd}
    matrix:
      prompt: ${JSON.stringify(prompts)}
    input: { prompt: "{{ prompt }}" }
  chat:
    model: agent
    matrix:
      content: ["What is a good name for a capybara?", "Tell me a joke #fail"]
    input: { content: "{{ content }}" }
`,
      { initialMs: 10, maxMs: 50, factor: 1.5 },
    );
    const report = await buildCostReport(runDir);
    const entries = emulator.ledger.entries.slice(first);
    const micros = (usd: number): number => Math.round(usd * 1e6);
    const ledgerNet = entries.reduce((sum, e) => sum + (e.kind === 'refund' ? -micros(e.usd) : micros(e.usd)), 0);
    // What no endpoint reports: the service reconciling marketing estimates to actual token usage.
    const reconciled = entries
      .filter((e) => e.reason.includes('reconciled to actual usage'))
      .reduce((sum, e) => sum + (e.kind === 'refund' ? micros(e.usd) : -micros(e.usd)), 0);

    const byName = (lines: GroupLine[], name: string): GroupLine => lines.find((l) => l.name === name)!;
    expect(byName(report.steps, 'sheets').counts).toMatchObject({ completed: 2, failed: 1, nsfw: 1 });
    expect(byName(report.steps, 'ads').counts).toMatchObject({ completed: 2, failed: 1 });
    expect(byName(report.steps, 'chat').counts).toMatchObject({ completed: 1, failed: 1 });
    // Sheets: US$0.05 each, the failed and the nsfw one refunded.
    expect(byName(report.steps, 'sheets')).toMatchObject({ estimatedUsd: 0.2, refundedUsd: 0.1, netUsd: 0.1 });
    // Agent turns: the completed one at its llm_cost_usd, the failed one refunded in full.
    const chat = byName(report.steps, 'chat');
    const turnLedger = entries
      .filter((e) => e.message_id !== undefined)
      .reduce((sum, e) => sum + (e.kind === 'refund' ? -micros(e.usd) : micros(e.usd)), 0);
    expect(micros(chat.netUsd)).toBe(turnLedger);
    expect(chat.actualUsd).toBeGreaterThan(0);
    // The whole run: the report's net, less the reconciliation it cannot see, is the ledger's, to the cent.
    expect(reconciled).toBeGreaterThanOrEqual(0);
    expect(Math.round((micros(report.total.netUsd) - reconciled) / 1e4)).toBe(Math.round(ledgerNet / 1e4));
    expect(micros(report.total.netUsd) - reconciled).toBe(ledgerNet);
  });

  it('writes report.json, report.csv and report.md, in US$ and credits', async () => {
    const runDir = await run(`version: 1
name: small
steps:
  a:
    model: character-sheet
    matrix: { seed: [1, 2] }
    input: { tier: dogs, seed: "{{ seed }}" }
`);
    const report = await writeCostReport(runDir, { creditsPerUsd: 200 });
    const json = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { total: { netUsd: number; netCredits: number } };
    expect(json.total).toMatchObject({ netUsd: 0.1, netCredits: 20 });
    const csv = readFileSync(join(runDir, 'report.csv'), 'utf8').split('\r\n');
    expect(csv[0]).toBe(
      'level,name,step,model,status,request_id,estimated_usd,actual_usd,refunded_usd,net_usd,net_credits,unknown_usd,unpriced_instances',
    );
    expect(csv.filter((l) => l.startsWith('instance,'))).toHaveLength(2);
    expect(csv.find((l) => l.startsWith('total,'))).toMatch(/,0\.1,20,0,0$/);
    expect(readFileSync(join(runDir, 'report.md'), 'utf8')).toContain('Net **US$0.10** (20.00 credits at 200 credits per US$)');
    expect(report.steps).toHaveLength(1);
  });

  it('counts planned instances that never started (the budget stopped them)', async () => {
    const runDir = await run(`version: 1
name: budgeted
defaults: { budget_usd: 0.05 }
steps:
  a:
    model: character-sheet
    matrix: { seed: [1, 2, 3] }
    input: { tier: dogs, seed: "{{ seed }}" }
`);
    const report = await buildCostReport(runDir);
    expect(report.total.counts.completed).toBe(1);
    expect(report.total.counts.not_started).toBe(2);
    expect(report.total.netUsd).toBe(0.05);
  });

  it('shows an instance of unknown price as unpriced, never as $0 spent', async () => {
    const runDir = await run(`version: 1
name: unpriced
steps:
  b:
    model: marketing-image
    input: { prompt: "a shoe" }
`);
    const report = await buildCostReport(runDir);
    expect(report.total.counts.completed).toBe(1);
    expect(report.total.unpricedInstances).toBe(1);
    expect(report.total.estimatedUsd).toBe(0);
    const md = reportMarkdownOf(report);
    expect(md).toContain('1 submitted instance(s) are unpriced');
    // Its line reads "unpriced", not $0.00: nothing was priced, which is not free.
    expect(md).toMatch(/\| b \| completed \| [^|]+ \| unpriced \|/);
    expect(md).not.toMatch(/\| b \| completed \| [^|]+ \| \$0\.00 \|/);
  });
});

describe('genpipe runs', () => {
  it('lists the runs of a folder newest first, with status, completed count and spend', async () => {
    const { listRuns } = await import('../../src/report/run-list.js');
    const runs = await listRuns(join(dir, 'runs'));
    expect(runs.length).toBeGreaterThanOrEqual(3);
    expect(runs.map((r) => r.runId)).toEqual([...runs.map((r) => r.runId)].sort().reverse());
    const mixed = runs.find((r) => r.pipeline === 'mixed');
    expect(mixed).toMatchObject({ status: 'failed', completed: 3, instances: 5, netUsd: 0.15 });
    const budgeted = runs.find((r) => r.pipeline === 'budgeted');
    expect(budgeted).toMatchObject({ status: 'budget', completed: 1, instances: 3 });
    expect(await listRuns(join(dir, 'runs'), 'small')).toHaveLength(1);
    expect(await listRuns(join(dir, 'nowhere'))).toEqual([]);
  });
});

describe('the report files, written in pieces', () => {
  const group = (name: string, net: number): GroupLine => ({
    name,
    counts: { completed: 1, reused: 0, failed: 0, nsfw: 0, canceled: 0, unknown: 0, in_flight: 0, not_started: 0 },
    estimatedUsd: net,
    actualUsd: null,
    refundedUsd: 0,
    netUsd: net,
    unknownUsd: 0,
    unpricedInstances: 0,
    rerolls: 0,
    rerolledNetUsd: 0,
  });
  const line = (i: number): InstanceLine => ({
    instance: `a[seed=${i}]`,
    step: 'a',
    model: 'character-sheet',
    status: 'completed',
    requestId: `r${i}`,
    rerolls: 0,
    estimatedUsd: 0.05,
    actualUsd: null,
    refundedUsd: 0,
    netUsd: 0.05,
    unknownUsd: 0,
    unpricedInstances: 0,
  });
  const report = (count: number): CostReport => ({
    pipeline: 'p "quoted"',
    runId: 'r1',
    creditsPerUsd: 100,
    instances: Array.from({ length: count }, (_, i) => line(i)),
    steps: [group('a', 0.05 * count)],
    models: [group('character-sheet', 0.05 * count)],
    total: group('total', 0.05 * count),
  });

  it('report.json is the whole report with credits, for no, one and many instances', () => {
    for (const count of [0, 1, 3]) {
      const r = report(count);
      const parsed = JSON.parse(reportJson(r)) as Record<string, unknown>;
      const credited = <T extends { netUsd: number; refundedUsd: number }>(m: T) => ({
        ...m,
        netCredits: Math.round(m.netUsd * 100 * 100) / 100,
        refundedCredits: 0,
      });
      expect(parsed).toEqual({
        pipeline: r.pipeline,
        runId: 'r1',
        creditsPerUsd: 100,
        instances: r.instances.map(credited),
        steps: r.steps.map(credited),
        models: r.models.map(credited),
        total: credited(r.total),
      });
    }
  });

  it('report.csv and report.md have a row per instance', () => {
    const r = report(3);
    expect(
      reportCsv(r)
        .split('\r\n')
        .filter((l) => l.startsWith('instance,')),
    ).toHaveLength(3);
    expect(
      reportMarkdownOf(r)
        .split('\n')
        .filter((l) => l.startsWith('| a[seed=')),
    ).toHaveLength(3);
    expect(reportMarkdownOf(report(0))).toContain('| instance | status | request | net |');
  });
});
