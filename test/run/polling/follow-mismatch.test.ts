// A followed request must be the one the run submitted: when the service answers a
// status GET about another request (the emulator's foreign_status fault), the run never takes that
// output for the instance. The attempt is unknown, journaled so (a `forgotten` record), so a plain
// resume does not follow it again, and `--retry unknown` sends it anew; the ledger stays within the
// report's [net, net + unknown] (invariant B). In process, against a real emulator on 127.0.0.1.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../../src/cli/io.js';
import { main } from '../../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../../src/emulator/index.js';
import { findRunDir, journalOf, tempDir } from '../runner-helpers.js';

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterAll(async () => {
  await emu.close();
});

async function genpipe(...argv: string[]): Promise<{ code: number; output: string }> {
  const lines: string[] = [];
  const io: CliIO = {
    out: (t) => lines.push(t),
    write: async (t) => void lines.push(t),
    err: (t) => lines.push(t),
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` },
    signal: new AbortController().signal,
  };
  const code = await main(argv, io);
  return { code, output: lines.join('\n') };
}

const ledgerUsd = (): number => Math.round(emu.ledger.netMicros((e) => e.key_id === DEFAULT_KEY_ID)) / 1e6;

describe('a status answer about another request', () => {
  it(
    'leaves the instance unknown, never completed with a foreign output; a resume does not follow it again, --retry unknown sends it anew',
    { timeout: 30_000 },
    async () => {
      const dir = tempDir();
      const out = join(dir, 'runs');
      const path = join(dir, 'foreign.yaml');
      writeFileSync(
        path,
        'version: 1\nname: foreign\nsteps:\n  s:\n    model: character-sheet\n    matrix: { seed: [1, 2] }\n    input: { tier: cats, seed: "{{ seed }}" }\n',
      );
      emu.forceFaults('status', 'foreign_status');
      const first = await genpipe('run', path, '--out', out, '--quiet', '--concurrency', '1');
      expect(first.code, first.output).toBe(1);
      expect(first.output).toMatch(
        /when asked about request .*the answer was not used\. The attempt is left unknown; `genpipe resume --retry unknown` sends it again\./s,
      );
      const runDir = findRunDir(out, 'foreign');
      const forgotten = journalOf(runDir).records.filter((r) => r.type === 'forgotten');
      expect(forgotten).toHaveLength(1);
      const report = (): { netUsd: number; unknownUsd: number; counts: Record<string, number> } =>
        (
          JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as {
            total: { netUsd: number; unknownUsd: number; counts: Record<string, number> };
          }
        ).total;
      expect(report()).toMatchObject({ netUsd: 0.05, unknownUsd: 0.05, counts: expect.objectContaining({ completed: 1, unknown: 1 }) });
      const sent = emu.requests.inspect({}).length;
      const plain = await genpipe('resume', runDir, '--quiet');
      expect(plain.code).toBe(1);
      expect(emu.requests.inspect({}).length).toBe(sent);
      const retried = await genpipe('resume', runDir, '--quiet', '--retry', 'unknown');
      expect(retried.code, retried.output).toBe(0);
      expect(emu.requests.inspect({}).length).toBe(sent + 1);
      // The mismatched attempt was charged at the service; the report holds it as unknown beside the two known.
      const total = report();
      expect(total).toMatchObject({ netUsd: 0.1, unknownUsd: 0.05, counts: expect.objectContaining({ completed: 2 }) });
      expect(ledgerUsd()).toBeGreaterThanOrEqual(total.netUsd);
      expect(ledgerUsd()).toBeLessThanOrEqual(total.netUsd + total.unknownUsd);
    },
  );
});
