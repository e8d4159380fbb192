// Run variables for cron jobs: `{{ run.id }}`, `{{ run.date }}` (UTC,
// YYYY-MM-DD) and `{{ run.started_at }}` are the run's own, rendered again unchanged by a resume.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { ManifestError } from '../../src/manifest/errors.js';
import { loadManifestFile, loadManifestText } from '../../src/manifest/load.js';
import { buildPlan } from '../../src/plan/plan.js';
import { cleanTemps, emuRequests, findRunDir, HF_KEY, sheetsManifest, tempDir } from '../run/runner-helpers.js';

function capture(env: NodeJS.ProcessEnv): CliIO & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  return {
    stdout,
    stderr,
    out: (t) => stdout.push(t),
    write: async (t) => void stdout.push(t),
    err: (t) => stderr.push(t),
    env,
    signal: new AbortController().signal,
  };
}

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterAll(async () => {
  await emu.close();
  cleanTemps();
});

const brief = 'Night of {{ run.date }} ({{ run.started_at }}), run {{ run.id }}';

describe('run variables', () => {
  it('render the run id, its UTC date and its start time', async () => {
    const plan = await buildPlan(loadManifestFile(sheetsManifest(tempDir(), 1, { brief })), {
      run: { id: 'r-1', startedAt: new Date('2026-11-23T23:30:00.000Z') },
    });
    const [instance] = [...plan.instances('sheets')];
    expect((instance?.body as { brief: string }).brief).toBe('Night of 2026-11-23 (2026-11-23T23:30:00.000Z), run r-1');
  });

  it('refuses a run variable that does not exist, at the template', () => {
    const text = `version: 1\nname: t\nsteps:\n  s:\n    model: character-sheet\n    input:\n      tier: cats\n      brief: "{{ run.day }}"\n`;
    let error: unknown;
    try {
      loadManifestText(text, 'm.yaml');
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ManifestError);
    const [problem] = (error as ManifestError).problems;
    expect(problem?.location).toMatchObject({ line: 8, col: 14 });
    expect(problem?.message).toBe('{{ run.day }}: a run variable is one of run.id, run.date, run.started_at');
  });

  it('a resume renders them as the run did (same plan, nothing sent again); a new run gets its own', { timeout: 30_000 }, async () => {
    const env = { GENPIPE_BASE_URL: emu.url, HF_KEY };
    const manifest = sheetsManifest(tempDir(), 2, { name: 'nightly', brief });
    const out = tempDir();
    expect(await main(['run', manifest, '--out', out, '--rate', '1000', '--quiet'], capture(env))).toBe(0);
    const runDir = findRunDir(out, 'nightly');
    const sent = emuRequests(emu).length;
    const resumed = capture(env);
    expect(await main(['resume', runDir, '--quiet'], resumed), resumed.stderr.join('\n')).toBe(0);
    expect(emuRequests(emu)).toHaveLength(sent);
    const runId = (JSON.parse(readFileSync(join(runDir, 'plan.json'), 'utf8')) as { runId: string }).runId;
    expect(runId).toMatch(/^\d{8}T\d{6}Z-[0-9a-f]{4}$/);

    // Another run of the same manifest is another night: other bodies, so other keys.
    const again = tempDir();
    expect(await main(['run', manifest, '--out', again, '--rate', '1000', '--quiet'], capture(env))).toBe(0);
    const keys = new Set(emuRequests(emu).map((r) => r.idempotency_key));
    expect(keys.size).toBe(4);
  });
});
