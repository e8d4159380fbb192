// A repeat offers reuse: a new run whose plan has instances an earlier run of the same pipeline
// (in the same output folder) already completed says so in one line, with the count, the run id
// and the --reuse flag, before it spends; nothing is said when nothing matches, or with --reuse.
// `genpipe runs` then counts the reused instances as done (`2/2: 0 made, 2 reused`).
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../src/emulator/index.js';
import { tempDir } from '../run/runner-helpers.js';

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterAll(async () => {
  await emu.close();
});

async function run(args: string[]): Promise<{ code: number; err: string[] }> {
  const err: string[] = [];
  const io: CliIO = {
    out: () => {},
    write: async () => {},
    err: (t) => err.push(t),
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` },
    signal: new AbortController().signal,
  };
  return { code: await main(args, io), err };
}

function sheets(dir: string, seeds: number[], brief = 'a mascot'): string {
  const path = join(dir, 'repeat.yaml');
  writeFileSync(
    path,
    `version: 1\nname: repeat\ndefaults:\n  polling: { initial_ms: 100, min_ms: 20, max_ms: 200 }\nsteps:\n  s:\n    model: character-sheet\n    matrix: { seed: ${JSON.stringify(seeds)} }\n    input: { tier: cats, seed: "{{ seed }}", brief: ${JSON.stringify(brief)} }\n`,
  );
  return path;
}

const HINT = /already completed in run/;

describe('a repeat offers reuse', () => {
  it(
    'names the count, the earlier run and --reuse before spending; says nothing when nothing matches or with --reuse',
    { timeout: 60_000 },
    async () => {
      const dir = tempDir();
      const out = join(dir, 'runs');
      const first = await run(['run', sheets(dir, [1, 2, 3]), '--out', out, '--quiet']);
      expect(first.code).toBe(0);
      // The first run has no earlier one: no hint.
      expect(first.err.filter((l) => HINT.test(l))).toEqual([]);
      const [firstId] = readdirSync(join(out, 'repeat')).filter((n) => !n.startsWith('.'));

      // Two of four instances were made by the first run.
      const before = emu.requests.byId.size;
      const second = await run(['run', sheets(dir, [2, 3, 4, 5]), '--out', out, '--quiet']);
      expect(second.code).toBe(0);
      expect(second.err.filter((l) => HINT.test(l))).toEqual([
        `2 of 4 instances of this plan already completed in run ${firstId}: run with --reuse to link them in and send nothing for them.`,
      ]);
      // A hint only: this run still sent its four.
      expect(emu.requests.byId.size - before).toBe(4);

      // With --reuse the run takes them: no hint.
      const runsBefore = readdirSync(join(out, 'repeat'));
      const reused = await run(['run', sheets(dir, [1, 2]), '--out', out, '--reuse', '--quiet']);
      expect(reused.code).toBe(0);
      expect(reused.err.filter((l) => HINT.test(l))).toEqual([]);
      // Its report says what the reused cost, in the formatter's words (US$0.00, as every total).
      const reusedId = readdirSync(join(out, 'repeat')).find((n) => !n.startsWith('.') && !runsBefore.includes(n)) as string;
      expect(readFileSync(join(out, 'repeat', reusedId, 'report.md'), 'utf8')).toContain(
        "2 instance(s) reused an earlier run's result: nothing was sent for them, US$0.00.",
      );
      // genpipe runs counts the reused ones as done, beside the ones made.
      const listed: string[] = [];
      const io: CliIO = { out: (t) => listed.push(t), write: async () => {}, err: () => {}, env: {}, signal: new AbortController().signal };
      expect(await main(['runs', '--out', out], io)).toBe(0);
      // Runs started within one second list in any order: each line is found by its counts.
      expect(listed.filter((l) => / completed {2}2\/2: 0 made, 2 reused {2}US\$0\.00 /.test(l))).toHaveLength(1);
      expect(listed.filter((l) => / 4\/4 completed /.test(l))).toHaveLength(1);

      // Other inputs (another brief): nothing of this plan was made before, nothing is said.
      const other = await run(['run', sheets(dir, [1, 2], 'another brief'), '--out', out, '--quiet']);
      expect(other.code).toBe(0);
      expect(other.err.filter((l) => HINT.test(l))).toEqual([]);
    },
  );
});
