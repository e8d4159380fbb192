/**
 * Run policies against a real emulator: a per-model limit shared by steps, nsfw re-rolls with a new
 * variation (and so a new key), and a resume that refuses a changed plan unless told.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cleanTemps, emuRequests, findRunDir, journalOf, runCli, tempDir, withEmulator } from './runner-helpers.js';

afterAll(() => cleanTemps());

describe('run policies', () => {
  it('defaults.model_concurrency limits every step of a model together, under a larger global limit', async () => {
    await withEmulator({ timeScale: 0.02 }, async (emu) => {
      const dir = tempDir();
      const manifest = join(dir, 'models.yaml');
      writeFileSync(
        manifest,
        `version: 1
name: models
defaults:
  concurrency: 10
  model_concurrency: { character-sheet: 2 }
steps:
  cats:
    model: character-sheet
    matrix: { seed: { range: { from: 1, to: 6 } } }
    input: { tier: cats, seed: "{{ seed }}" }
  dogs:
    model: character-sheet
    matrix: { seed: { range: { from: 1, to: 6 } } }
    input: { tier: dogs, seed: "{{ seed }}" }
`,
      );
      emu.requests.peakActive = 0;
      const result = await runCli(['run', manifest, '--base-url', emu.url, '--out', join(dir, 'out')]);
      expect(result.code).toBe(0);
      expect(emuRequests(emu)).toHaveLength(12);
      expect(emu.requests.peakActive).toBe(2);
    });
  }, 60_000);

  it('on_nsfw: reroll tries a seed no instance of the plan has, with a new key, at most 3 times; skip leaves it nsfw', async () => {
    await withEmulator({ timeScale: 0 }, async (emu) => {
      const dir = tempDir();
      const manifest = (name: string, policy: string): string => {
        const path = join(dir, `${name}.yaml`);
        writeFileSync(
          path,
          `version: 1\nname: ${name}\ndefaults: { on_nsfw: ${policy} }\nsteps:\n  a:\n    model: character-sheet\n    input: { tier: cats, seed: 5, variation_index: 10, brief: "[emulator:nsfw] always flagged" }\n`,
        );
        return path;
      };
      const rerolled = await runCli(['run', manifest('rerolled', 'reroll'), '--base-url', emu.url, '--out', join(dir, 'out')]);
      expect(rerolled.code).toBe(1);
      const rows = emuRequests(emu);
      expect(rows).toHaveLength(4);
      expect(new Set(rows.map((r) => r.idempotency_key)).size).toBe(4);
      const details = rows.map((r) => (r as unknown as { details: { variation_index: number; seed_given: number } }).details);
      // Same variation, four different seeds: the planned 5, then three re-rolls that avoid it and each other.
      expect(details.map((d) => d.variation_index)).toEqual([10, 10, 10, 10]);
      const seeds = details.map((d) => d.seed_given);
      expect(seeds[0]).toBe(5);
      expect(new Set(seeds).size).toBe(4);
      const journal = journalOf(findRunDir(join(dir, 'out'), 'rerolled')).records;
      const rerolls = journal.filter((r) => r.type === 'reroll') as { attempt: number; seed: number }[];
      expect(rerolls.map((r) => r.attempt)).toEqual([1, 2, 3]);
      // The journal holds the seeds actually sent.
      expect(rerolls.map((r) => r.seed)).toEqual(seeds.slice(1));
      expect(rerolled.stdout).toMatch(/0 completed, 0 failed, 1 nsfw.*3 re-rolled/);

      const skipped = await runCli(['run', manifest('skipped', 'skip'), '--base-url', emu.url, '--out', join(dir, 'out')]);
      expect(skipped.code).toBe(1);
      expect(emuRequests(emu)).toHaveLength(5);
      expect(skipped.stdout).toMatch(/0 completed, 0 failed, 1 nsfw/);
    });
  }, 60_000);

  it('a resume refuses a manifest whose plan changed (exit 2), and continues with --allow-changed', async () => {
    await withEmulator({ timeScale: 0 }, async (emu) => {
      const dir = tempDir();
      const path = join(dir, 'grow.yaml');
      const write = (seeds: number): void =>
        writeFileSync(
          path,
          `version: 1\nname: grow\nsteps:\n  a:\n    model: character-sheet\n    matrix: { seed: { range: { from: 1, to: ${seeds} } } }\n    input: { tier: cats, seed: "{{ seed }}" }\n`,
        );
      write(3);
      expect((await runCli(['run', path, '--base-url', emu.url, '--out', join(dir, 'out')])).code).toBe(0);
      const runDir = findRunDir(join(dir, 'out'), 'grow');
      write(5);
      const refused = await runCli(['resume', runDir, '--base-url', emu.url]);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toMatch(/changed since run .* started; resume with --allow-changed/);
      expect(emuRequests(emu)).toHaveLength(3);
      const allowed = await runCli(['resume', runDir, '--base-url', emu.url, '--allow-changed']);
      expect(allowed.code).toBe(0);
      expect(emuRequests(emu)).toHaveLength(5);
      // --allow-changed accepts a changed plan of the same pipeline, never another pipeline's manifest.
      const other = join(dir, 'other.yaml');
      writeFileSync(other, readFileSync(path, 'utf8').replace('name: grow', 'name: other'));
      const foreign = await runCli(['run', other, '--resume', runDir, '--base-url', emu.url, '--allow-changed']);
      expect(foreign.code).toBe(2);
      expect(foreign.stderr).toContain(`is the pipeline other, but run`);
      expect(foreign.stderr).toContain(`is of the pipeline grow; resume a run with its own manifest.`);
      expect(emuRequests(emu)).toHaveLength(5);
    });
  }, 60_000);

  it('a second run of a pipeline while one holds its lock exits 4 and leaves no run directory, only its record; --overlap wait runs after it', async () => {
    await withEmulator({ timeScale: 0.1 }, async (emu) => {
      const dir = tempDir();
      const path = join(dir, 'locked.yaml');
      writeFileSync(
        path,
        'version: 1\nname: locked\nsteps:\n  a:\n    model: character-sheet\n    matrix: { seed: [1, 2, 3] }\n    input: { tier: cats, seed: "{{ seed }}" }\n',
      );
      const out = join(dir, 'out');
      const first = runCli(['run', path, '--base-url', emu.url, '--out', out]);
      // Once the first run has submitted, it holds the lock (sheets take about a second here).
      for (let i = 0; i < 400 && emuRequests(emu).length === 0; i++) await new Promise((r) => setTimeout(r, 25));
      expect(emuRequests(emu).length).toBeGreaterThan(0);
      const refused = await runCli(['run', path, '--base-url', emu.url, '--out', out]);
      expect(refused.code).toBe(4);
      expect(refused.stderr).toMatch(/^genpipe: Another run of this pipeline holds the lock: run \S+, pid \d+/);
      const waiting = runCli(['run', path, '--base-url', emu.url, '--out', out, '--overlap', 'wait']);
      expect((await first).code).toBe(0);
      expect((await waiting).code).toBe(0);
      // The refused run left no run directory, only its line among the nights that did not run;
      // the first and the waiting one left theirs.
      const left = readdirSync(join(out, 'locked')).filter((n) => !n.startsWith('.'));
      expect(left.filter((n) => n !== 'not-started.jsonl')).toHaveLength(2);
      const skipped = readFileSync(join(out, 'locked', 'not-started.jsonl'), 'utf8')
        .trim()
        .split('\n');
      expect(skipped).toHaveLength(1);
      expect(JSON.parse(skipped[0] as string)).toMatchObject({ status: 'skipped', exit_code: 4 });
    });
  }, 60_000);
});
