// `--retry rejected` remakes a rejected result of a model without a seed (marketing images): a new
// attempt, whose intent is journaled before its POST, counted in the money. The report equals the
// emulator's ledger, and a repeat with no new decision sends nothing. The CLI runs in-process
// against a real emulator on 127.0.0.1.
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CliIO } from '../../../src/cli/io.js';
import { main } from '../../../src/cli/main.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../../src/emulator/index.js';
import { ReviewStore } from '../../../src/review/review-store.js';

let emu: Emulator;
let dir: string;

beforeEach(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  dir = mkdtempSync(join(tmpdir(), 'genpipe-remake-'));
});
afterEach(async () => {
  await emu.close();
});

async function genpipe(...argv: string[]): Promise<{ code: number; stderr: string }> {
  const stderr: string[] = [];
  const io: CliIO = {
    out: () => {},
    write: async () => {},
    err: (t) => stderr.push(t),
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` },
    signal: new AbortController().signal,
  };
  return { code: await main(argv, io), stderr: stderr.join('\n') };
}

const ledgerUsd = (): number => Math.round(emu.ledger.netMicros((e) => e.key_id === DEFAULT_KEY_ID)) / 1e6;
const requests = (): number => emu.requests.inspect({}).length;

describe('--retry rejected on a model without a seed', () => {
  it('remakes each rejected image as a new attempt, counted in the money; a repeat sends nothing', { timeout: 60_000 }, async () => {
    const path = join(dir, 'heroes.yaml');
    writeFileSync(
      path,
      'version: 1\nname: heroes\nprices: { marketing-image: 0.009156 }\nsteps:\n  hero:\n    model: marketing-image\n    matrix: { n: [1, 2, 3] }\n' +
        '    input: { prompt: "Hero banner {{ n }}", resolution: 1k, quality: low }\n',
    );
    const out = join(dir, 'runs');
    expect((await genpipe('run', path, '--out', out, '--quiet')).code).toBe(0);
    const runDir = join(out, 'heroes', readdirSync(join(out, 'heroes')).find((n) => !n.startsWith('.')) as string);
    expect(requests()).toBe(3);
    const review = new ReviewStore(runDir);
    await review.apply({ instance: 'hero[n=1]', decision: 'rejected' });
    await review.apply({ instance: 'hero[n=3]', decision: 'rejected' });

    const remade = await genpipe('resume', runDir, '--retry', 'rejected', '--quiet');
    expect(remade.code, remade.stderr).toBe(0);
    expect(requests()).toBe(5);
    // Each remake's intent was journaled, as a new attempt, before its request.
    const journal = readFileSync(join(runDir, 'journal.jsonl'), 'utf8');
    const records = journal
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map((line) => JSON.parse(line.slice(line.indexOf('{'))) as { type: string; instance?: string; previous?: string });
    const retries = records.filter((r) => r.type === 'retry' && r.previous === 'rejected').map((r) => r.instance);
    expect(retries.sort()).toEqual(['hero[n=1]', 'hero[n=3]']);
    for (const id of ['hero[n=1]', 'hero[n=3]']) {
      const at = records.findIndex((r) => r.type === 'retry' && r.instance === id);
      expect(records.slice(at).some((r) => r.type === 'intent' && r.instance === id)).toBe(true);
    }
    // The rejected files are kept apart; the report counts both attempts, and equals the ledger.
    expect(readdirSync(join(runDir, 'outputs', 'hero', 'rejected', '0')).length).toBe(2);
    const total = (JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { total: { netUsd: number; unknownUsd: number } })
      .total;
    expect(total.unknownUsd).toBe(0);
    expect(total.netUsd).toBe(ledgerUsd());

    const repeat = await genpipe('resume', runDir, '--retry', 'rejected', '--quiet');
    expect(repeat.code, repeat.stderr).toBe(0);
    expect(requests()).toBe(5);
  });
});
