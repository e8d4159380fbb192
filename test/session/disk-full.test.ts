// A disk that refuses a write is the user's to fix: `run`, `resume` and `report` on a small tmpfs
// filled to a few levels (so that a different writer meets the full disk each time: the lock, plan.json,
// the journal, an output, outputs.csv, the report, the gallery) end with one sentence naming the
// folder and exit code 6, never "internal error ... a bug"; once room is made, a resume finishes
// the run without paying twice. Each case runs the built CLI in its own mount namespace
// (`unshare -rm`), where the tmpfs is private and is gone with it.
import { spawn } from 'node:child_process';
import { mkdirSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { BIN, cleanTemps, emuRequests, findRunDir, HF_KEY, runCli, tempDir } from '../run/runner-helpers.js';
import { writeFileSync } from 'node:fs';

const SCRIPT = `set -u
M=$1; SIZE=$2; FREE=$3; SRC=$4; AFTER=$5; shift 5
mount -t tmpfs -o size=\${SIZE}k tmpfs "$M" || { echo "NO-TMPFS" >&2; exit 90; }
if [ -n "$SRC" ]; then cp -a "$SRC" "$M/"; fi
cat /dev/zero > "$M/fill" 2>/dev/null
truncate -s -\${FREE}k "$M/fill"
node "$BIN" "$@"; echo "EXIT=$?" >&2
if [ "$AFTER" = 1 ]; then rm -f "$M/fill"; node "$BIN" "$@"; echo "EXIT=$?" >&2; fi
`;

let emu: Emulator;
let dir: string;
let manifest: string;

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  dir = tempDir('genpipe-disk-');
  manifest = join(dir, 'full.yaml');
  writeFileSync(
    manifest,
    'version: 1\nname: full\nsteps:\n  sheets:\n    model: character-sheet\n    matrix:\n      seed: [1, 2, 3]\n    input: { tier: cats, seed: "{{ seed }}" }\n',
  );
});
afterAll(async () => {
  await emu?.close();
  cleanTemps();
});

interface Ended {
  /** Exit codes, in order (two with `after`). */
  codes: number[];
  stderr: string;
}

/** Runs genpipe `args` with a tmpfs of `sizeKb` at `mount`, `freeKb` left free (after copying `copy` into it). */
function onSmallDisk(
  mount: string,
  sizeKb: number,
  freeKb: number,
  args: string[],
  options: { copy?: string; after?: boolean } = {},
): Promise<Ended> {
  mkdirSync(mount, { recursive: true });
  return new Promise((resolve, reject) => {
    const child = spawn(
      'unshare',
      ['-rm', 'sh', '-c', SCRIPT, 'sh', mount, String(sizeKb), String(freeKb), options.copy ?? '', options.after ? '1' : '0', ...args],
      {
        env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', BIN, HF_KEY, GENPIPE_BASE_URL: emu.url },
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      if (stderr.includes('NO-TMPFS') || code === 90) reject(new Error(`no tmpfs could be mounted (unshare -rm, exit ${code}): ${stderr}`));
      resolve({ codes: [...stderr.matchAll(/^EXIT=(\d+)$/gm)].map((m) => Number(m[1])), stderr });
    });
  });
}

/** The one sentence of a full disk: the folder named, exit 6, no word of a bug. */
function expectFullDisk(ended: Ended, folder: string): void {
  expect(ended.stderr).not.toMatch(/internal error|a bug in genpipe|\n\s+at /);
  const line = ended.stderr.split('\n').find((l) => l.startsWith('genpipe: Could not write to '));
  expect(line, ended.stderr).toBeDefined();
  expect(line).toMatch(/^genpipe: Could not write to \/\S+: its disk is full \(ENOSPC on \w+, [\d.]+ k?B free\)\. Make room there/);
  expect(line!.slice('genpipe: Could not write to '.length).startsWith(folder)).toBe(true);
}

/** Kilobytes of the files under `path`, as a tmpfs counts them (whole 4 kB pages). */
function sizeKb(path: string): number {
  let kb = 0;
  for (const f of readdirSync(path, { recursive: true, encoding: 'utf8' })) {
    const s = statSync(join(path, f));
    kb += 4 * Math.ceil(s.size / 4096) + (s.isDirectory() ? 4 : 0);
  }
  return kb;
}

describe('a full disk', () => {
  it('run: at every fill level the run ends with exit 6 and one sentence naming its folder', { timeout: 120_000 }, async () => {
    // How much a whole run writes, so that each level stops it at a different writer.
    const whole = tempDir('genpipe-disk-whole-');
    expect((await runCli(['run', manifest, '--out', whole, '--quiet'], { env: { GENPIPE_BASE_URL: emu.url } })).code).toBe(0);
    const need = sizeKb(join(whole, 'full'));
    const levels = [0, 4, Math.floor(need / 4), Math.floor(need / 2)];
    for (const free of levels) {
      const mount = join(dir, `run-${free}`);
      const ended = await onSmallDisk(mount, need + 512, free, ['run', manifest, '--out', join(mount, 'runs'), '--quiet']);
      expect(ended.codes, `${free} kB free of ${need} kB needed: ${ended.stderr}`).toEqual([6]);
      expectFullDisk(ended, join(mount, 'runs', 'full'));
    }
  });

  it('resume: exit 6 on a full disk; once room is made, the next resume finishes without paying twice', { timeout: 120_000 }, async () => {
    const out = tempDir('genpipe-disk-resume-');
    const budgeted = await runCli(['run', manifest, '--out', out, '--quiet', '--budget', '0.1', '--concurrency', '1'], {
      env: { GENPIPE_BASE_URL: emu.url },
    });
    expect(budgeted.code, budgeted.stderr).toBe(3);
    const runDir = findRunDir(out, 'full');
    const runId = runDir.split('/').pop() as string;
    const before = emuRequests(emu).length;
    const mount = join(dir, 'resume');
    const inside = join(mount, 'full', runId);
    const ended = await onSmallDisk(mount, sizeKb(join(out, 'full')) + 512, 0, ['resume', inside, '--quiet', '--budget', '1'], {
      copy: join(out, 'full'),
      after: true,
    });
    expect(ended.codes, ended.stderr).toEqual([6, 0]);
    expectFullDisk(ended, inside);
    // One request for each instance the budget left unsent, and none again for those it had paid.
    const sent = emuRequests(emu).slice(before);
    expect(sent.length).toBeLessThanOrEqual(3);
    expect(new Set(emuRequests(emu).map((r) => r.idempotency_key)).size).toBe(emuRequests(emu).length);
  });

  it('report: exit 6 on a full disk, naming the run directory', { timeout: 120_000 }, async () => {
    const out = tempDir('genpipe-disk-report-');
    expect((await runCli(['run', manifest, '--out', out, '--quiet'], { env: { GENPIPE_BASE_URL: emu.url } })).code).toBe(0);
    const runId = findRunDir(out, 'full').split('/').pop() as string;
    const mount = join(dir, 'report');
    const inside = join(mount, 'full', runId);
    const ended = await onSmallDisk(mount, sizeKb(join(out, 'full')) + 512, 0, ['report', inside], { copy: join(out, 'full') });
    expect(ended.codes, ended.stderr).toEqual([6]);
    expectFullDisk(ended, inside);
  });
});
