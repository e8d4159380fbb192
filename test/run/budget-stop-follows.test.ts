// A stop ends the sending, never the following (found by the random-history test, seed 10043 of
// `npm run soak`): a resume that the budget stops at once still follows the attempts an earlier
// process sent and never saw end. Before, the scheduler launched nothing once the run was stopping,
// so such an attempt stayed "in flight" in the report, counted as charged, while the service
// refunded it: the report said US$0.05, the ledger US$0.00 (invariant A). In-process CLI against a
// real emulator on 127.0.0.1.
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../src/emulator/index.js';

let emu: Emulator;
let dir: string;
beforeEach(async () => {
  // Slow enough that a submitted sheet is still running when the run is interrupted (425 ms at least).
  emu = await startEmulator({ port: 0, timeScale: 0.05, log: () => {} });
  dir = mkdtempSync(join(tmpdir(), 'genpipe-budget-follow-'));
});
afterEach(async () => {
  await emu.close();
});

function io(signal: AbortSignal, onRunDir?: (d: string) => Promise<void>): CliIO {
  return {
    out: () => {},
    write: async () => {},
    err: () => {},
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` },
    signal,
    ...(onRunDir ? { onRunDir } : {}),
  };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const ledgerUsd = (): number => {
  emu.requests.inspect({}); // the emulator settles ended requests (and refunds) when they are read
  return emu.ledger.netMicros((e) => e.key_id === DEFAULT_KEY_ID) / 1e6;
};

it(
  'a resume stopped by the budget at once still follows the attempt in flight to its end, and the report is the ledger',
  { timeout: 60_000 },
  async () => {
    const manifest = join(dir, 'follow.yaml');
    // Three sheets the service fails (the marker), a budget for one at a time, one at a time.
    writeFileSync(
      manifest,
      'version: 1\nname: follow\ndefaults: { concurrency: 1, budget_usd: 0.05, polling: { initial_ms: 100, min_ms: 20, max_ms: 200 } }\nsteps:\n  s:\n    model: character-sheet\n    matrix: { n: [1, 2, 3] }\n    input: { tier: cats, brief: "[emulator:fail] sheet {{ n }}" }\n',
    );
    const out = join(dir, 'runs');
    // The run: s[n=1] and s[n=2] fail (refunded), s[n=3] is sent; Ctrl-C once its submit is journaled, while it runs.
    const controller = new AbortController();
    let runDir = '';
    const interrupted = main(
      ['run', manifest, '--out', out, '--yes', '--quiet'],
      io(controller.signal, async (d) => void (runDir = d)),
    );
    const deadline = Date.now() + 20_000;
    // Bounded by the deadline.
    while (Date.now() < deadline) {
      const journal = runDir && existsSync(join(runDir, 'journal.jsonl')) ? readFileSync(join(runDir, 'journal.jsonl'), 'utf8') : '';
      if (/"type":"submitted","instance":"s\[n=3\]"/.test(journal)) break;
      await sleep(5);
    }
    controller.abort(new Error('interrupted'));
    expect(await interrupted).toBe(130);
    expect(emu.requests.byId.size).toBe(3);

    // The resume remakes s[n=1] first, which the budget refuses (s[n=3] holds it): the run stops at once,
    // before the walk reaches s[n=3].
    const resumed = await main(['resume', runDir, '--retry', 'failed', '--quiet'], io(new AbortController().signal));
    expect(resumed).toBe(3);
    expect(emu.requests.byId.size).toBe(3);
    // s[n=3] was followed to its end (failed, refunded), not left in flight.
    const journal = readFileSync(join(runDir, 'journal.jsonl'), 'utf8');
    expect(journal).toMatch(/"type":"status","instance":"s\[n=3\]","status":"failed"/);
    const report = await main(['report', runDir, '--json'], io(new AbortController().signal));
    expect(report).toBe(0);
    const total = (
      JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as {
        total: { netUsd: number; unknownUsd: number; counts: Record<string, number> };
      }
    ).total;
    expect(total.counts.in_flight).toBe(0);
    expect(total).toMatchObject({ netUsd: 0, unknownUsd: 0 });
    expect(ledgerUsd()).toBe(0);
    expect(readdirSync(join(out, 'follow')).filter((n) => !n.startsWith('.'))).toHaveLength(1);
  },
);
