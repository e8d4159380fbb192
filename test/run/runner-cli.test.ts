// The runner through the built CLI: the README's main command, exit codes and stops (budget,
// --fail-fast, invalid manifest, SIGINT, refused credentials), secrets, and an agent step whose
// journaled session a resume reuses.
import { copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  BIN,
  cleanTemps,
  emuRequests,
  expectCompletedRun,
  expectNoSecret,
  expectOneRequestPerKey,
  filesUnder,
  findRunDir,
  journalOf,
  KEY_ID,
  marketingManifest,
  runCli,
  SECRET,
  sheetsManifest,
  tempDir,
  waitForRequests,
  withEmulator,
} from './runner-helpers.js';

afterAll(cleanTemps);

const PIPELINES = new URL('../../pipelines/', import.meta.url).pathname;

describe('genpipe run', () => {
  it("the README's main command writes 6 PNGs with the embedded emulator", { timeout: 120_000 }, async () => {
    const cwd = tempDir();
    mkdirSync(join(cwd, 'pipelines'));
    copyFileSync(join(PIPELINES, 'quickstart.yaml'), join(cwd, 'pipelines', 'quickstart.yaml'));
    const result = await runCli(['run', 'pipelines/quickstart.yaml', '--emulator', '--out', 'out'], { cwd, env: { HF_KEY: '' } });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('completed; 6 completed, 0 failed');
    const runDir = findRunDir(join(cwd, 'out'), 'quickstart');
    const files = filesUnder(runDir);
    const pngs = files.filter((f) => f.endsWith('.png'));
    expect(pngs).toHaveLength(6);
    for (const png of pngs) expect(readFileSync(join(runDir, png)).subarray(0, 8).toString('hex')).toBe('89504e470d0a1a0a');
    expect(files).toEqual(expect.arrayContaining(['journal.jsonl', 'outputs.csv', 'plan.json']));
    expect(readFileSync(join(runDir, 'outputs.csv'), 'utf8').trim().split('\n')).toHaveLength(7);
    expectNoSecret(runDir, result.stdout + result.stderr);
  });

  it('--budget stops new submits with exit 3, and a resume with a larger budget does the rest', { timeout: 120_000 }, async () => {
    await withEmulator({ timeScale: 0.01, seed: 3 }, async (emu) => {
      const dir = tempDir();
      const out = tempDir();
      const manifest = sheetsManifest(dir, 10, { name: 'budget' });
      const common = ['--base-url', emu.url, '--concurrency', '2', '--rate', '1000'];
      const first = await runCli(['run', manifest, '--out', out, ...common, '--budget', '0.2']);
      expect(first.code, first.stderr).toBe(3);
      expect(first.stderr).toContain('Stopped before going over the budget of US$0.20');
      expect(first.stdout).toContain('4 completed');
      expect(first.stdout).toContain('6 not started');
      expect(emuRequests(emu)).toHaveLength(4);
      const runDir = findRunDir(out, 'budget');
      const resumed = await runCli(['resume', runDir, ...common, '--budget', '1']);
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(resumed.stdout).toContain('10 completed, 0 failed');
      expect(expectOneRequestPerKey(emu).size).toBe(10);
      expectCompletedRun(runDir, emu, 10);
      expectNoSecret(runDir, first.stdout + first.stderr + resumed.stdout + resumed.stderr);
    });
  });

  it('--fail-fast stops submitting at the first failure; without it every instance runs', { timeout: 120_000 }, async () => {
    await withEmulator({ timeScale: 0.01, seed: 4 }, async (emu) => {
      const dir = tempDir();
      const path = join(dir, 'failing.yaml');
      writeFileSync(
        path,
        `version: 1
name: failing
steps:
  sheets:
    model: character-sheet
    matrix:
      brief: ["[emulator:fail] a broken brief", "A fine brief"]
      seed: { range: { from: 1, to: 3 } }
    input:
      tier: cats
      seed: "{{ seed }}"
      brief: "{{ brief }}"
`,
      );
      const common = ['--base-url', emu.url, '--concurrency', '1', '--rate', '1000'];
      const out = tempDir();
      const fast = await runCli(['run', path, '--out', out, ...common, '--fail-fast']);
      expect(fast.code).toBe(1);
      expect(fast.stderr).toContain(
        'Stopped at the first failure (sheets[brief="[emulator:fail] a broken brief",seed=1]); resume after fixing it.',
      );
      expect(fast.stdout).toContain('stopped; 0 completed, 1 failed');
      expect(emuRequests(emu)).toHaveLength(1);
      expectNoSecret(findRunDir(out, 'failing'), fast.stdout + fast.stderr);

      const out2 = tempDir();
      const all = await runCli(['run', path, '--out', out2, ...common]);
      expect(all.code).toBe(1);
      expect(all.stdout).toContain('failed; 3 completed, 3 failed, 0 nsfw');
      // Failed generations report their status (instance_finished), counted in the status line.
      expect(all.stderr.match(/: failed/g)).toHaveLength(3);
      // 6 new requests: keys belong to a run, so the second run never gets the first run's failed
      // request back (reusing results is --reuse, a choice).
      expect(emuRequests(emu)).toHaveLength(7);
      expectNoSecret(findRunDir(out2, 'failing'), all.stdout + all.stderr);
    });
  });

  it('an invalid manifest ends with exit 2, one message naming the file, and zero requests', { timeout: 60_000 }, async () => {
    await withEmulator({ timeScale: 0 }, async (emu) => {
      const dir = tempDir();
      const out = tempDir();
      const path = join(dir, 'broken.yaml');
      writeFileSync(
        path,
        'version: 1\nname: broken\nsteps:\n  sheets:\n    model: character-sheet\n    input:\n      tier: no-such-tier\n      seed: 1\n',
      );
      const result = await runCli(['run', path, '--out', out, '--base-url', emu.url]);
      expect(result.code).toBe(2);
      expect(result.stderr).toContain('broken.yaml:');
      expect(result.stderr).not.toMatch(/\n\s+at /);
      expect(result.stdout).toBe('');
      expect(emu.stats.total).toBe(0);
      expect(emuRequests(emu)).toHaveLength(0);
      expect(readdirSync(out)).toEqual([]);
    });
  });

  it('SIGINT stops with exit 130 and an intact journal; a resume finishes without duplicates', { timeout: 120_000 }, async () => {
    await withEmulator({ timeScale: 0.01, seed: 5 }, async (emu) => {
      const dir = tempDir();
      const out = tempDir();
      const manifest = sheetsManifest(dir, 24, { name: 'interrupted' });
      const common = ['--base-url', emu.url, '--concurrency', '6', '--rate', '1000'];
      const first = await runCli(['run', manifest, '--out', out, ...common], {
        onSpawn: (send) => void waitForRequests(emu, 3).then(() => send('SIGINT')),
      });
      expect(first.code, first.stderr).toBe(130);
      expect(first.stderr).toContain('Interrupted: stopped submitting');
      // Said once: as it happened on stderr, not again under the summary.
      expect((first.stdout + first.stderr).split('Interrupted: stopped submitting')).toHaveLength(2);
      expect(first.stdout).toContain('interrupted');
      const runDir = findRunDir(out, 'interrupted');
      const journal = journalOf(runDir);
      expect(journal.tornTail).toBe(false);
      expect(journal.corrupt).toEqual([]);
      expect(journal.records.at(-1)).toMatchObject({ type: 'run_finished', outcome: 'aborted' });
      const submittedBefore = emuRequests(emu).length;
      expect(submittedBefore).toBeLessThan(24);

      const resumed = await runCli(['resume', runDir, ...common]);
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(expectOneRequestPerKey(emu).size).toBe(24);
      expectCompletedRun(runDir, emu, 24);
      expectNoSecret(runDir, first.stdout + first.stderr + resumed.stdout + resumed.stderr);
    });
  });

  it(
    'refused credentials end with exit 5 and one sentence, leak no secret, and a resume with the right key completes',
    { timeout: 120_000 },
    async () => {
      await withEmulator({ timeScale: 0.01, seed: 6 }, async (emu) => {
        const dir = tempDir();
        const out = tempDir();
        const manifest = sheetsManifest(dir, 5, { name: 'creds' });
        const wrong = 'wrong-secret-5f1d2c';
        const common = ['--base-url', emu.url, '--concurrency', '2', '--rate', '1000'];
        const first = await runCli(['run', manifest, '--out', out, ...common], { env: { HF_KEY: `${KEY_ID}:${wrong}` } });
        expect(first.code).toBe(5);
        const errors = first.stderr.split('\n').filter((l) => l.startsWith('genpipe:'));
        expect(errors).toEqual([
          expect.stringMatching(
            /^genpipe: The service refused the credentials[^\n]*; the run stopped, and `genpipe resume` continues it once the credentials are fixed\.$/,
          ),
        ]);
        expect(first.stderr).not.toMatch(/\n\s+at /);
        expect(emuRequests(emu)).toHaveLength(0);
        const runDir = findRunDir(out, 'creds');
        expectNoSecret(runDir, first.stdout + first.stderr, wrong);
        expectNoSecret(runDir, first.stdout + first.stderr, SECRET);
        // Nothing was marked failed: a resume with the right key does every instance.
        expect(journalOf(runDir).records.filter((r) => r.type === 'failed')).toEqual([]);
        const resumed = await runCli(['resume', runDir, ...common]);
        expect(resumed.code, resumed.stderr).toBe(0);
        expectCompletedRun(runDir, emu, 5);
        expectNoSecret(runDir, resumed.stdout + resumed.stderr, wrong);
        expectNoSecret(runDir, resumed.stdout + resumed.stderr, SECRET);
      });
    },
  );
  it(
    'a keyless submit refused for its credentials (401) is journaled as refused: the resume sends it as new, not as unknown',
    { timeout: 120_000 },
    async () => {
      await withEmulator({ timeScale: 0.01, seed: 7 }, async (emu) => {
        const dir = tempDir();
        const out = tempDir();
        const manifest = marketingManifest(dir, 4, 'ads-creds');
        const common = ['--base-url', emu.url, '--concurrency', '2', '--rate', '1000'];
        const first = await runCli(['run', manifest, '--out', out, ...common], { env: { HF_KEY: `${KEY_ID}:wrong-secret-9a7b` } });
        expect(first.code).toBe(5);
        expect(emuRequests(emu)).toHaveLength(0);
        const runDir = findRunDir(out, 'ads-creds');
        const records = journalOf(runDir).records;
        const intents = records.filter((r) => r.type === 'intent').map((r) => (r as { instance: string }).instance);
        expect(intents.length).toBeGreaterThan(0);
        expect(
          records
            .filter((r) => r.type === 'refused')
            .map((r) => (r as { instance: string }).instance)
            .sort(),
        ).toEqual([...intents].sort());
        // Without --resubmit-unknown: a refused submit created nothing, so nothing is unknown.
        const resumed = await runCli(['resume', runDir, ...common]);
        expect(resumed.code, resumed.stderr).toBe(0);
        expect(resumed.stderr).not.toMatch(/unknown/);
        const requests = emuRequests(emu);
        expect(requests).toHaveLength(4);
        // One request per instance: four different bodies.
        expect(new Set(requests.map((r) => r.body_hash)).size).toBe(4);
        expect(filesUnder(join(runDir, 'outputs')).filter((f) => f.endsWith('.png'))).toHaveLength(4);
      });
    },
  );
});

describe('agent steps', () => {
  it(
    'pipelines/nightly.yaml completes with its scripted reply; a resume after a crash reuses the journaled session',
    { timeout: 120_000 },
    async () => {
      await withEmulator({ timeScale: 0.005, seed: 8, agent: { stepMs: 200 } }, async (emu) => {
        const out = tempDir();
        const common = ['--base-url', emu.url, '--rate', '1000'];
        const manifest = join(PIPELINES, 'nightly.yaml');
        // Killed (a power cut) once the agent's session is journaled, while its turn is still going:
        // a crash point, not a watch of the journal, which a loaded machine could see too late.
        const first = await runCli(['run', manifest, '--out', out, ...common], { env: { GENPIPE_CRASH_AT: 'after_agent_session' } });
        const runDir = findRunDir(out, 'nightly');
        expect(first.signal, first.stderr).toBe('SIGKILL');
        expect(emu.agent.sessions.size).toBe(1);
        const session = journalOf(runDir).records.find((r) => r.type === 'agent_session');
        expect(session).toBeDefined();

        const resumed = await runCli(['resume', runDir, ...common]);
        expect(resumed.code, resumed.stderr).toBe(0);
        // 6 sheets, 6 clips, the agent turn and the banner.
        expect(resumed.stdout).toContain('completed; 14 completed, 0 failed');
        // The same session, one turn: no second session, no second message of the instance.
        expect(emu.agent.sessions.size).toBe(1);
        const records = journalOf(runDir).records;
        const status = records.find((r) => r.type === 'status' && r.instance.startsWith('release-note'));
        expect(status).toMatchObject({
          status: 'completed',
          result: { session_id: session?.type === 'agent_session' ? session.sessionId : '' },
        });
        const answer = String((status as { result?: { answer?: unknown } }).result?.answer ?? '');
        expect(answer.length).toBeGreaterThan(0);
        const handles = records.filter((r) => r.type === 'submitted' && r.instance.startsWith('release-note'));
        // The first message, then the scripted reply to the agent's question.
        expect(
          new Set(handles.map((r) => (r.type === 'submitted' && r.handle.kind === 'agent_turn' ? r.handle.firstMessageId : ''))),
        ).toHaveProperty('size', 1);
        expectNoSecret(runDir, first.stdout + first.stderr + resumed.stdout + resumed.stderr);
        expect(BIN).toContain('genpipe.js');
      });
    },
  );
});
