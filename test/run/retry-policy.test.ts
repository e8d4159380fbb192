// One retry policy for a run: every retry, the transport's own included, draws
// from the run's retry budget, so a service that answers 429 to every submit ends the run (exit 5)
// instead of being retried attempt by attempt without end; progress says it is being throttled.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../src/emulator/index.js';

let emu: Emulator;
let dir: string;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'genpipe-retry-policy-'));
  const faults = join(dir, 'faults.yaml');
  writeFileSync(faults, 'submit:\n  rate_429: 1\n  retry_after_s: 1\n');
  emu = await startEmulator({ port: 0, timeScale: 0, faults, log: () => {} });
});
afterEach(async () => {
  await emu.close();
});

describe('one retry budget for the whole run', () => {
  it(
    'a service that answers 429 to every submit ends the run with exit 5, each retry drawn from the budget',
    { timeout: 60_000 },
    async () => {
      const manifest = join(dir, 'm.yaml');
      writeFileSync(
        manifest,
        'version: 1\nname: throttled\nsteps:\n  s:\n    model: character-sheet\n    matrix: { seed: [1, 2, 3] }\n    input: { tier: cats, seed: "{{ seed }}" }\n',
      );
      const stderr: string[] = [];
      const io: CliIO = {
        out: () => {},
        write: async () => {},
        err: (t) => stderr.push(t),
        env: { GENPIPE_BASE_URL: emu.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` },
        signal: new AbortController().signal,
      };
      const code = await main(['run', manifest, '--out', join(dir, 'runs'), '--retry-budget', '6', '--rate', '50'], io);
      expect(code).toBe(5);
      // Three first submits, then at most the six retries of the budget, the transport's own included.
      expect(emu.stats.total).toBeLessThanOrEqual(3 + 6 + 3);
      expect(emu.requests.inspect({})).toHaveLength(0);
      expect(stderr.join('\n')).toMatch(/throttled by the service: waiting 1 s; retry budget \d+ left/);
    },
  );
});
