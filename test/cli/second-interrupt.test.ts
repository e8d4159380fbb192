// A second Ctrl-C ends genpipe at once, and still leaves the journal
// consistent, releases the pipeline's lock and prints one line saying what was skipped; the run
// resumes to its end without paying twice. The built CLI against an emulator on 127.0.0.1.
import { spawn } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { BIN, expectOneRequestPerKey, findRunDir, HF_KEY, journalOf, runCli, sheetsManifest, tempDir } from '../run/runner-helpers.js';

let emu: Emulator;
beforeAll(async () => {
  // Requests stay queued 2 s: the run is mid-flight when it is interrupted.
  emu = await startEmulator({
    port: 0,
    timeScale: 1,
    log: () => {},
    durations: { 'character-sheet': { queuedMs: [2_000, 2_000], runMs: [0, 0] } },
  });
});
afterAll(async () => {
  await emu.close();
});

describe('a second Ctrl-C', () => {
  it('ends at once, with the journal whole, the lock released and one line naming what was skipped', { timeout: 60_000 }, async () => {
    const dir = tempDir();
    const out = join(dir, 'runs');
    const child = spawn(
      process.execPath,
      [BIN, 'run', sheetsManifest(dir, 6, { name: 'twice' }), '--out', out, '--rate', '1000', '--concurrency', '3'],
      {
        env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', HF_KEY, GENPIPE_BASE_URL: emu.url },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const end = Date.now() + 20_000;
    // Bounded by the deadline: until requests are in flight at the emulator.
    while (emu.requests.byId.size < 3 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    // The second as soon as the first stop has begun (its first line), while the run is still stopping.
    child.kill('SIGINT');
    const stopping = Date.now() + 10_000;
    // Bounded by the deadline.
    while (!stderr.includes('Interrupted:') && Date.now() < stopping) await new Promise((r) => setTimeout(r, 5));
    child.kill('SIGINT');
    expect(await exited).toBe(130);
    expect(stderr).toMatch(
      /genpipe: the run in \S+ stopped at once: its journal is kept as written and its lock released; the report, outputs\.csv and gallery were skipped/,
    );
    const runDir = findRunDir(out, 'twice');
    const journal = journalOf(runDir);
    expect(journal.corrupt).toEqual([]);
    // The lock's newest generation is marked released: the next run takes it with no stale wait.
    const lock = join(out, 'twice', '.lock');
    const top = readdirSync(lock)
      .filter((n) => /^g-\d+$/.test(n))
      .sort((a, b) => Number(b.slice(2)) - Number(a.slice(2)))[0] as string;
    expect(existsSync(join(lock, top, 'released'))).toBe(true);
    const resumed = await runCli(['resume', runDir], { env: { GENPIPE_BASE_URL: emu.url } });
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stderr).not.toContain('took over the stale lock');
    expect(expectOneRequestPerKey(emu).size).toBe(6);
  });
});
