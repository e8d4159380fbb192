// The example manifests' prices are what the emulator charges at submit for their configurations:
// each example runs against an in-process emulator, and every instance's price as genpipe journaled
// it (in its attempt's intent) is set against the ledger's charges at submit for its request:
// within US$0.01, and exactly where the price is a formula over the request.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../src/emulator/index.js';
import { pageIndex } from '../gallery/read-gallery.js';
import { cleanTemps, findRunDir, journalOf, tempDir } from '../run/runner-helpers.js';

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

interface Line {
  instance: string;
  step: string;
  /** The price journaled in the instance's intent. */
  priced: number;
  /** The ledger's charges at submit (an agent turn: its reserve) for the instance's request. */
  charged: number;
  runDir: string;
}

/** The ledger's charges at submit for what one submission made: a request, a job set's jobs, an agent message. */
function chargedAtSubmit(handle: Record<string, unknown>): number {
  const entries = emu.ledger.entries;
  if (handle.kind === 'agent_message' || handle.kind === 'agent_turn')
    return entries
      .filter((e) => e.message_id === handle.firstMessageId || e.message_id === handle.messageId)
      .filter((e) => e.kind === 'reserve')
      .reduce((s, e) => s + e.usd, 0);
  const ids = handle.kind === 'job_set' ? (emu.legacy.jobSets.get(handle.jobSetId as string)?.jobIds ?? []) : [handle.requestId as string];
  // The first charge of a request is its charge at submit; a later one is a reconciliation.
  return ids.reduce((sum, id) => sum + (entries.find((e) => e.request_id === id && e.kind === 'charge')?.usd ?? 0), 0);
}

/** Each instance's journaled price against the ledger's charges at submit for its request. */
async function pricesAgainstLedger(name: string, extra: readonly string[] = []): Promise<Line[]> {
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
  const args = ['run', join(pipelines, `${name}.yaml`), '--base-url', emu.url, '--out', out, '--yes', ...extra];
  expect(await main(args, io), stderr.join('\n')).toBe(0);
  said.set(name, [...stdout, ...stderr].join('\n'));
  const runDir = findRunDir(out, name);
  const priced = new Map<string, number | null | undefined>();
  const lines: Line[] = [];
  for (const record of journalOf(runDir).records) {
    const r = record as { type: string; instance?: string; priceUsd?: number | null; handle?: Record<string, unknown> };
    if (r.type === 'intent') priced.set(r.instance as string, r.priceUsd);
    if (r.type !== 'submitted' || r.handle === undefined) continue;
    const instance = r.instance as string;
    const price = priced.get(instance);
    lines.push({
      instance,
      step: instance.replace(/\[.*$/, ''),
      priced: typeof price === 'number' ? price : Number.NaN,
      charged: chargedAtSubmit(r.handle),
      runDir,
    });
  }
  expect(lines.length).toBeGreaterThan(0);
  return lines;
}

/** Which of a run's gallery steps the page marks provisional. */
const galleryProvisional = (runDir: string): Record<string, boolean> =>
  Object.fromEntries(pageIndex(readFileSync(join(runDir, 'gallery.html'), 'utf8')).steps.map((s) => [s.id, s.provisional === true]));

const off = (lines: readonly Line[], within = 0.01): string[] =>
  lines.filter((l) => !(Math.abs(l.priced - l.charged) <= within + 1e-9)).map((l) => `${l.instance}: ${l.priced} vs ${l.charged}`);

describe('example prices equal what the emulator charges at submit', () => {
  it('quickstart: every sheet at the list price', { timeout: 30_000 }, async () => {
    const lines = await pricesAgainstLedger('quickstart');
    expect(off(lines, 0)).toEqual([]);
    for (const l of lines) expect(l.charged).toBe(0.05);
    // A sheet is not token-priced: nothing in its report or summary is provisional.
    expect(said.get('quickstart')).toMatch(/; net US\$0\.30; /);
    expect(readFileSync(join((lines[0] as Line).runDir, 'report.md'), 'utf8')).not.toContain('Provisional');
    expect(galleryProvisional((lines[0] as Line).runDir)).toEqual({ cats: false });
  });

  it('campaign: every marketing-image configuration it uses', { timeout: 60_000 }, async () => {
    const lines = await pricesAgainstLedger('campaign');
    expect(off(lines)).toEqual([]);
    // The enhanced step is priced by a formula over its request: to the micro-dollar.
    expect(
      off(
        lines.filter((l) => l.step === 'enhanced'),
        0,
      ),
    ).toEqual([]);
    // Each configuration the example uses is here: enhanced, and direct at 2k and at 4k from one step's table.
    const configurations = new Set(lines.map((l) => `${l.step} ${/resolution=(\w+)/.exec(l.instance)?.[1] ?? ''}`.trim()));
    expect(configurations).toEqual(new Set(['enhanced', 'direct 2k', 'direct 4k']));
    // The report's charged equals the ledger's charges at submit to the cent, and says what it cannot see.
    const runDir = (lines[0] as Line).runDir;
    const report = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { total: { estimatedUsd: number } };
    const ledgerCharged = lines.reduce((sum, l) => sum + l.charged, 0);
    expect(Math.round(report.total.estimatedUsd * 100)).toBe(Math.round(ledgerCharged * 100));
    // The summary line marks its net provisional.
    expect(said.get('campaign')).toMatch(/; net US\$0\.\d\d \(provisional\); /);
    expect(readFileSync(join(runDir, 'report.md'), 'utf8')).toContain(
      'Provisional: the marketing-image figures are the charges at submit, as priced; the service reconciles them later to actual token usage, and the refunds of that reconciliation are not visible to this report.',
    );
    // The gallery marks the steps whose cost rests on those charges, with the same word.
    expect(galleryProvisional(runDir)).toEqual({ enhanced: true, direct: true });
  });

  it('bulk-characters: its sheets at the list price (a few of each step: one configuration)', { timeout: 60_000 }, async () => {
    const lines = await pricesAgainstLedger('bulk-characters', ['--limit', '3']);
    expect(off(lines, 0)).toEqual([]);
    expect(new Set(lines.map((l) => l.step))).toEqual(new Set(['animals', 'beetles']));
  });

  it('nightly: sheets, clips, the agent turn and the banner', { timeout: 60_000 }, async () => {
    const lines = await pricesAgainstLedger('nightly');
    expect(off(lines)).toEqual([]);
    expect(new Set(lines.map((l) => l.step))).toEqual(new Set(['sheets', 'clips', 'release-note', 'banner']));
  });
});
