// The confirmation of a big run as a person sees it: the built CLI in a real pseudo-terminal
// (util-linux `script`), its stdin a terminal, answering through it. Runs the built binary
// (`npm test` builds first).
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../../src/emulator/index.js';

const bin = new URL('../../bin/genpipe.js', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'genpipe-confirm-tty-'));
const manifest = join(dir, 'three.yaml');
writeFileSync(
  manifest,
  'version: 1\nname: three\nsteps:\n  s:\n    model: character-sheet\n    matrix: { seed: [1, 2, 3] }\n    input: { tier: cats, seed: "{{ seed }}" }\n',
);

let emulator: Emulator;
beforeAll(async () => {
  emulator = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterAll(async () => {
  await emulator.close();
});
let before = 0;
beforeEach(() => {
  before = emulator.requests.inspect({}).length;
  emulator.stats.reset();
});

/** Runs `genpipe run` in a terminal and types `keys` once the question shows; returns the screen and the exit code. */
function inTerminal(out: string, keys: string): Promise<{ code: number | null; screen: string }> {
  const command = `exec ${process.execPath} ${bin} run ${manifest} --base-url ${emulator.url} --confirm-over 0.1 --out ${out}`;
  const child = spawn('script', ['-qefc', command, '/dev/null'], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', HF_KEY: `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}` },
  });
  let screen = '';
  let typed = false;
  child.stdout.on('data', (chunk: Buffer) => {
    screen += chunk.toString();
    if (!typed && screen.includes('[y/N]')) {
      typed = true;
      child.stdin.write(keys);
    }
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  return new Promise((resolve) => {
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, screen });
    });
  });
}

describe('confirming a big run on a terminal', () => {
  it('y: asks once, then runs', { timeout: 90_000 }, async () => {
    const out = join(dir, 'out-y');
    const { code, screen } = await inTerminal(out, 'y\n');
    expect(code, screen).toBe(0);
    expect(screen).toContain('This run is estimated at US$0.15 (3 instances). Continue? [y/N] y');
    expect(screen.split('Continue?')).toHaveLength(2);
    // The summary wraps to the terminal's width (a word longer than a line is cut).
    expect(screen.replace(/\s+/g, ' ')).toMatch(/three [^:]+: completed; 3 completed/);
    expect(emulator.requests.inspect({}).length - before).toBe(3);
  });

  it('n: refused with exit 2, nothing sent, no run directory', { timeout: 90_000 }, async () => {
    const out = join(dir, 'out-n');
    const { code, screen } = await inTerminal(out, 'n\n');
    expect(code, screen).toBe(2);
    expect(screen).toContain(
      'genpipe: Not confirmed, so nothing was sent; --yes skips the question, and a budget (budget_usd or --budget) replaces it.',
    );
    expect(existsSync(out)).toBe(false);
    expect(emulator.requests.inspect({}).length - before).toBe(0);
    expect(emulator.stats.total).toBe(0);
  });

  it('a repeat: the question names the earlier run and --reuse, once', { timeout: 90_000 }, async () => {
    const out = join(dir, 'out-repeat');
    expect((await inTerminal(out, 'y\n')).code).toBe(0);
    const sent = emulator.requests.inspect({}).length;
    const { code, screen } = await inTerminal(out, 'n\n');
    expect(code, screen).toBe(2);
    const flat = screen.replace(/\s+/g, ' ');
    expect(flat).toMatch(
      /This run is estimated at US\$0\.15 \(3 instances\)\. 3 of 3 instances of this plan already completed in run \S+: run with --reuse to link them in and send nothing for them\. Continue\? \[y\/N\] n/,
    );
    expect(flat.split('already completed')).toHaveLength(2);
    expect(emulator.requests.inspect({}).length).toBe(sent);
  });

  it('a first run: the question says nothing of reuse', { timeout: 90_000 }, async () => {
    const { screen } = await inTerminal(join(dir, 'out-first'), 'n\n');
    expect(screen).toContain('Continue? [y/N]');
    expect(screen).not.toContain('already completed');
  });

  it('Ctrl-C at the question: interrupted (exit 130), nothing sent, no run directory', { timeout: 90_000 }, async () => {
    const out = join(dir, 'out-ctrl-c');
    const { code, screen } = await inTerminal(out, '\u0003');
    expect(code, screen).toBe(130);
    expect(screen).toMatch(/\ngenpipe: Interrupted before the run started; nothing was sent\./);
    expect(existsSync(out)).toBe(false);
    expect(emulator.stats.total).toBe(0);
  });
});
