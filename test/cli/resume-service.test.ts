// `genpipe resume DIR` finds the service its run was made against: plan.json records the
// addresses (never credentials), a flag, the environment or the config file still wins (with a
// warning when it differs), a run made against the embedded emulator says its requests ended
// with that process, and a plan.json from before the record resumes as it always did.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import {
  cleanTemps,
  emuRequests,
  expectCompletedRun,
  expectNoSecret,
  expectOneRequestPerKey,
  filesUnder,
  findRunDir,
  HF_KEY,
  SECRET,
  sheetsManifest,
  tempDir,
  waitForRequests,
} from '../run/runner-helpers.js';

function capture(
  env: NodeJS.ProcessEnv,
  signal: AbortSignal = new AbortController().signal,
): CliIO & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  return { stdout, stderr, out: (t) => stdout.push(t), write: async (t) => void stdout.push(t), err: (t) => stderr.push(t), env, signal };
}

let emu: Emulator;
let other: Emulator;
beforeAll(async () => {
  // Sheets wait queued for 8 s: a run interrupted once its first two are sent still has them in
  // flight when it has stopped, however slow the machine (3 s was once too short under load).
  emu = await startEmulator({
    port: 0,
    timeScale: 1,
    log: () => {},
    durations: { 'character-sheet': { queuedMs: [8_000, 8_000], runMs: [0, 0] } },
  });
  other = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterAll(async () => {
  await emu.close();
  await other.close();
  cleanTemps();
});

const planJson = (runDir: string): Record<string, unknown> =>
  JSON.parse(readFileSync(join(runDir, 'plan.json'), 'utf8')) as Record<string, unknown>;

/** A finished run of `count` sheets against `emu`, made with `env` and `args`; returns its directory. */
async function finishedRun(name: string, count: number, env: NodeJS.ProcessEnv, args: string[] = []): Promise<string> {
  const out = tempDir();
  const io = capture(env);
  expect(
    await main(['run', sheetsManifest(tempDir(), count, { name }), '--out', out, '--rate', '1000', ...args], io),
    io.stderr.join('\n'),
  ).toBe(0);
  return findRunDir(out, name);
}

describe('resume finds the service its run recorded', () => {
  it(
    'after Ctrl-C, resume with no address at all follows the in-flight requests at the recorded service',
    { timeout: 60_000 },
    async () => {
      const out = tempDir();
      const manifest = sheetsManifest(tempDir(), 6, { name: 'recorded' });
      const controller = new AbortController();
      // A CDN address of its own (sheets never use it, so it may point anywhere): each address is recorded.
      const env = { GENPIPE_BASE_URL: emu.url, GENPIPE_CDN_URL: 'http://127.0.0.1:9', HF_KEY };
      const first = capture(env, controller.signal);
      const running = main(['run', manifest, '--out', out, '--concurrency', '2', '--rate', '1000'], first);
      expect(await waitForRequests(emu, 2)).toBe(true);
      controller.abort(new Error('interrupted'));
      expect(await running).toBe(130);
      const runDir = findRunDir(out, 'recorded');
      const inFlight = emuRequests(emu).filter((r) => r.status === 'queued').length;
      expect(inFlight).toBeGreaterThan(0);

      expect(planJson(runDir).service).toEqual({
        base_url: emu.url,
        platform_url: emu.url,
        cdn_url: 'http://127.0.0.1:9',
        vendor: 'vendor',
        embedded_emulator: false,
      });
      expectNoSecret(runDir, '');

      // No flag, no GENPIPE_BASE_URL, no config file: only the credentials.
      const resumed = capture({ HF_KEY });
      expect(await main(['resume', runDir, '--rate', '1000'], resumed), resumed.stderr.join('\n')).toBe(0);
      // Every recorded address was used as recorded (the CDN one included): no warning.
      expect(resumed.stderr.filter((l) => l.startsWith('warning:'))).toEqual([]);
      expect(resumed.stdout.join('\n')).toContain('6 completed, 0 failed');
      expect(expectOneRequestPerKey(emu).size).toBe(6);
      expectCompletedRun(runDir, emu, 6);
    },
  );

  it('a flag, the environment or a config file wins over the record, with one warning line naming each difference', async () => {
    const runDir = await finishedRun('moved', 2, { GENPIPE_BASE_URL: other.url, HF_KEY });
    const moved = `warning: resuming with base_url ${emu.url} (the run recorded ${other.url}), platform_url ${emu.url} (the run recorded ${other.url}), cdn_url ${emu.url} (the run recorded ${other.url}), as a flag, the environment or the config file says; the requests the run sent are known only to the service it recorded.`;

    const byFlag = capture({ HF_KEY });
    expect(await main(['resume', runDir, '--base-url', emu.url], byFlag)).toBe(0);
    expect(byFlag.stderr.filter((l) => l.startsWith('warning:'))).toEqual([moved]);

    const byEnv = capture({ GENPIPE_BASE_URL: emu.url, HF_KEY });
    expect(await main(['resume', runDir], byEnv)).toBe(0);
    expect(byEnv.stderr.filter((l) => l.startsWith('warning:'))).toEqual([moved]);

    const config = join(tempDir(), 'config.yaml');
    writeFileSync(config, `base_url: ${emu.url}\nvendor: vendor\n`);
    const byFile = capture({ GENPIPE_CONFIG: config, HF_KEY });
    expect(await main(['resume', runDir], byFile)).toBe(0);
    expect(byFile.stderr.filter((l) => l.startsWith('warning:'))).toEqual([moved]);

    // A flag naming the recorded address (a trailing slash aside) is no difference.
    const same = capture({ HF_KEY });
    expect(await main(['resume', runDir, '--base-url', `${other.url}/`], same)).toBe(0);
    expect(same.stderr.filter((l) => l.startsWith('warning:'))).toEqual([]);
  });

  it('a plan.json without the record (older runs) resumes as before: it needs an address', async () => {
    const runDir = await finishedRun('older', 2, { GENPIPE_BASE_URL: other.url, HF_KEY });
    const file = planJson(runDir);
    delete file.service;
    writeFileSync(join(runDir, 'plan.json'), `${JSON.stringify(file, null, 2)}\n`);

    const bare = capture({ HF_KEY });
    expect(await main(['resume', runDir], bare)).toBe(2);
    expect(bare.stderr).toEqual([
      'genpipe: No service address is set: use --base-url, GENPIPE_BASE_URL or base_url in the config file (or --emulator).',
    ]);

    const configured = capture({ GENPIPE_BASE_URL: other.url, HF_KEY });
    expect(await main(['resume', runDir], configured)).toBe(0);
    expect(configured.stderr.filter((l) => l.startsWith('warning:'))).toEqual([]);
  });

  it('a malformed record is refused in one sentence (exit 2)', async () => {
    const runDir = await finishedRun('malformed', 1, { GENPIPE_BASE_URL: other.url, HF_KEY });
    writeFileSync(join(runDir, 'plan.json'), JSON.stringify({ ...planJson(runDir), service: { base_url: 5 } }));
    const io = capture({ HF_KEY });
    expect(await main(['resume', runDir], io)).toBe(2);
    expect(io.stderr).toEqual([
      `genpipe: ${join(runDir, 'plan.json')} has a malformed service record (base_url, platform_url, cdn_url, vendor, embedded_emulator).`,
    ]);
  });
});

describe('a run made against the embedded emulator', () => {
  it('records it; resume without --emulator refuses in one sentence, sending and changing nothing', async () => {
    const runDir = await finishedRun('embedded', 2, { HF_KEY: '' }, ['--emulator']);
    const service = planJson(runDir).service as Record<string, unknown>;
    expect(service).toMatchObject({ vendor: 'vendor', embedded_emulator: true });
    expect(service.base_url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(service.platform_url).toBe(service.base_url);
    expect(service.cdn_url).toBe(service.base_url);

    const before = filesUnder(runDir).map((f) => [f, readFileSync(join(runDir, f), 'utf8')]);
    const sentBefore = emuRequests(emu).length;
    // Even with a service configured in the environment: a run made offline is not moved to it silently.
    const io = capture({ GENPIPE_BASE_URL: emu.url, HF_KEY });
    expect(await main(['resume', runDir], io)).toBe(2);
    expect(io.stderr).toEqual([
      `genpipe: This run was made against the embedded emulator (--emulator), so the requests it had in flight ended with that process; genpipe resume ${runDir} --emulator --retry unknown resends them.`,
    ]);
    expect(filesUnder(runDir).map((f) => [f, readFileSync(join(runDir, f), 'utf8')])).toEqual(before);
    expect(emuRequests(emu).length).toBe(sentBefore);
  });

  it('resume --emulator says the same sentence and runs against a fresh embedded emulator', async () => {
    const runDir = await finishedRun('embedded-again', 2, { HF_KEY: '' }, ['--emulator']);
    const runsBefore = readFileSync(join(runDir, 'journal.jsonl'), 'utf8').split('"run_started"').length;
    const io = capture({});
    expect(await main(['resume', runDir, '--emulator'], io)).toBe(0);
    expect(io.stderr).toContain(
      `This run was made against the embedded emulator (--emulator), so the requests it had in flight ended with that process; genpipe resume ${runDir} --emulator --retry unknown resends them.`,
    );
    expect(readFileSync(join(runDir, 'journal.jsonl'), 'utf8').split('"run_started"').length).toBe(runsBefore + 1);
  });

  it('a run made against a service, resumed with --emulator, is warned about', async () => {
    const runDir = await finishedRun('to-embedded', 1, { GENPIPE_BASE_URL: other.url, HF_KEY });
    const io = capture({});
    expect(await main(['resume', runDir, '--emulator'], io)).toBe(0);
    expect(io.stderr.filter((l) => l.startsWith('warning:'))).toEqual([
      `warning: resuming against the embedded emulator, not ${other.url} where the run was made; the requests the run sent are known only there.`,
    ]);
    expect(io.stdout.join('\n')).not.toContain(SECRET);
  });
});
