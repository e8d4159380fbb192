// `genpipe run --metrics-file PATH`: the run's figures in node_exporter's textfile format, written
// on every way the run ends (completed, failed, refused before it had a directory), checked by
// promtool, with the run's money equal to its report's. These run the built binary.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { cleanTemps, findRunDir, runCli, SECRET, sheetsManifest, spentUsd, tempDir } from '../run/runner-helpers.js';
import { FAST_POLLING } from '../fleet/fleet-helpers.js';
import { promtoolCheck } from './prometheus-server.js';

const emulators: Emulator[] = [];
afterEach(async () => {
  for (const emu of emulators.splice(0)) await emu.close();
  cleanTemps();
});

async function emulator(options: { failureRate?: number } = {}): Promise<Emulator> {
  const emu = await startEmulator({ port: 0, timeScale: 0.001, log: () => {}, ...options });
  emulators.push(emu);
  return emu;
}

/** The samples of a textfile: `name{labels}` → value. */
function samples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}

const sum = (s: Map<string, number>, prefix: string, contains = ''): number =>
  [...s].filter(([k]) => k.startsWith(prefix) && k.includes(contains)).reduce((a, [, v]) => a + v, 0);

/** The file, checked: valid for promtool, no secret, no temporary file left beside it. */
function readChecked(path: string): Map<string, number> {
  const text = readFileSync(path, 'utf8');
  const check = promtoolCheck(text);
  expect(check.output).toBe('');
  expect(check.status).toBe(0);
  expect(text).not.toContain(SECRET);
  const dir = join(path, '..');
  expect(readdirSync(dir).filter((name) => name.endsWith('.tmp'))).toEqual([]);
  return samples(text);
}

describe('genpipe run --metrics-file', () => {
  it('a completed run: its status, instances, money equal to the report, requests and 429s', async () => {
    const emu = await emulator();
    // Two submits answered 429 (Retry-After 1 s): counted, waited out, never charged.
    emu.faults.force('submit', 'rate_429', 'rate_429');
    const dir = tempDir('genpipe-metrics-file-');
    const file = join(dir, 'genpipe.prom');
    const run = await runCli(
      [
        'run',
        sheetsManifest(dir, 4, { name: 'nightly', extra: FAST_POLLING }),
        '--out',
        join(dir, 'runs'),
        '--metrics-file',
        file,
        '--quiet',
      ],
      { env: { GENPIPE_BASE_URL: emu.url } },
    );
    expect(run.code, run.stderr).toBe(0);
    const s = readChecked(file);
    const report = JSON.parse(readFileSync(join(findRunDir(join(dir, 'runs'), 'nightly'), 'report.json'), 'utf8')) as {
      total: { netUsd: number; estimatedUsd: number; unknownUsd: number };
    };
    expect(s.get('genpipe_runs{pipeline="nightly",status="completed"}')).toBe(1);
    expect(s.get('genpipe_run_exit_code{pipeline="nightly"}')).toBe(0);
    expect(s.get('genpipe_instances{pipeline="nightly",model="character-sheet",status="completed"}')).toBe(4);
    expect(s.get('genpipe_money_usd{pipeline="nightly",model="character-sheet",kind="net"}')).toBe(report.total.netUsd);
    expect(s.get('genpipe_money_usd{pipeline="nightly",model="character-sheet",kind="charged"}')).toBe(report.total.estimatedUsd);
    expect(s.get('genpipe_money_usd{pipeline="nightly",model="character-sheet",kind="committed"}')).toBe(report.total.netUsd);
    expect(report.total.netUsd).toBeCloseTo(spentUsd(emu), 6);
    // Six submits: four accepted, two refused with 429.
    expect(sum(s, 'genpipe_requests_total{route="POST ', 'status="200"')).toBe(4);
    expect(sum(s, 'genpipe_requests_total{route="POST ', 'status="429"')).toBe(2);
    expect(sum(s, 'genpipe_throttled_requests_total')).toBe(2);
    expect(s.get('genpipe_throttled_seconds_total')).toBeGreaterThan(0.5);
    // Every durable journal write was synced, and timed.
    expect(s.get('genpipe_journal_fsync_seconds_count')).toBeGreaterThan(0);
    const end = s.get('genpipe_run_end_timestamp_seconds{pipeline="nightly"}') ?? 0;
    expect(Math.abs(end - Date.now() / 1000)).toBeLessThan(120);
  }, 60_000);

  it('a failed run: status failed, exit code 1, every instance failed and refunded', async () => {
    const emu = await emulator({ failureRate: 1 });
    const dir = tempDir('genpipe-metrics-file-');
    const file = join(dir, 'genpipe.prom');
    const run = await runCli(
      [
        'run',
        sheetsManifest(dir, 3, { name: 'broken', extra: FAST_POLLING }),
        '--out',
        join(dir, 'runs'),
        '--metrics-file',
        file,
        '--quiet',
      ],
      { env: { GENPIPE_BASE_URL: emu.url } },
    );
    expect(run.code, run.stderr).toBe(1);
    const s = readChecked(file);
    expect(s.get('genpipe_runs{pipeline="broken",status="failed"}')).toBe(1);
    expect(s.get('genpipe_run_exit_code{pipeline="broken"}')).toBe(1);
    expect(s.get('genpipe_instances{pipeline="broken",model="character-sheet",status="failed"}')).toBe(3);
    expect(s.get('genpipe_money_usd{pipeline="broken",model="character-sheet",kind="net"}')).toBe(0);
    expect(spentUsd(emu)).toBe(0);
  }, 60_000);

  it('a run refused before it had a directory still writes its exit code', async () => {
    const dir = tempDir('genpipe-metrics-file-');
    const file = join(dir, 'genpipe.prom');
    const run = await runCli(['run', join(dir, 'missing.yaml'), '--out', join(dir, 'runs'), '--metrics-file', file, '--quiet'], {
      env: { GENPIPE_BASE_URL: 'http://127.0.0.1:9' },
    });
    expect(run.code).toBe(2);
    const s = readChecked(file);
    expect(s.get('genpipe_run_exit_code')).toBe(2);
    expect(sum(s, 'genpipe_runs')).toBe(0);
  });
});
