// A run always ends (reliability.md #19): 50 seeded runs against a faulty emulator, with
// nsfw re-rolls, failures, budgets and Ctrl-C at random moments. Each must settle within a bound,
// leave a journal that ends with run_finished, and never hold two requests for one key. A run that
// was interrupted is resumed once, and must then settle too.
import { afterAll, describe, expect, it } from 'vitest';
import { GenerationClient } from '../../src/api/client.js';
import { resolveConfig } from '../../src/api/config.js';
import { startEmulator } from '../../src/emulator/index.js';
import { loadManifestFile } from '../../src/manifest/load.js';
import { buildPlan } from '../../src/plan/plan.js';
import { createRunDir, planHash } from '../../src/run/files/run-dir.js';
import { runPlan, type RunOptions } from '../../src/run/runner.js';
import type { RunSummary } from '../../src/run/events.js';
import { cleanTemps, expectOneRequestPerKey, HF_KEY, journalOf, prng, sheetsManifest, tempDir } from './runner-helpers.js';

afterAll(cleanTemps);

/** Each run must settle within this; a hang is a failure, not a slow test. */
const BOUND_MS = 30_000;

async function settles(run: Promise<RunSummary>): Promise<RunSummary | 'hung' | { error: unknown }> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<'hung'>((resolve) => (timer = setTimeout(() => resolve('hung'), BOUND_MS)));
  try {
    return await Promise.race([run.catch((error: unknown) => ({ error })), hung]);
  } finally {
    clearTimeout(timer);
  }
}

describe('soak: every run ends', () => {
  it(
    '50 seeded runs with faults, re-rolls, failures, budgets and Ctrl-C at random each end within the bound',
    { timeout: 600_000 },
    async () => {
      const endings = new Map<string, number>();
      for (let seed = 1; seed <= 50; seed++) {
        const random = prng(seed * 7919);
        const emu = await startEmulator({
          port: 0,
          timeScale: 0.0005,
          seed,
          faults: random() < 0.5 ? 'flaky' : 'none',
          nsfwRate: 0.15,
          failureRate: 0.1,
          log: () => {},
        });
        const client = new GenerationClient(resolveConfig({ flags: { baseUrl: emu.url }, env: { HF_KEY } }));
        try {
          const dir = tempDir();
          const count = 6 + Math.floor(random() * 10);
          const extra = `defaults: { on_nsfw: ${random() < 0.7 ? 'reroll' : 'skip'}${random() < 0.3 ? ', on_failure: stop' : ''} }`;
          const manifest = sheetsManifest(dir, count, { name: `soak${seed}`, extra });
          const plan = await buildPlan(loadManifestFile(manifest));
          const hash = planHash(plan);
          const { runId, dir: runDir } = await createRunDir(tempDir(), plan, manifest, hash);
          const options: Omit<RunOptions, 'signal'> = {
            plan,
            client,
            runDir,
            runId,
            planHash: hash,
            concurrency: 1 + Math.floor(random() * 6),
            ratePerSecond: 500,
            ...(random() < 0.3 ? { budgetUsd: 0.05 * Math.floor(random() * count) } : {}),
            retryBudget: 20,
            poll: { floorMs: 1, baseMs: 2, capMs: 20 },
            random,
            watchdogMs: 1_000,
          };
          const controller = new AbortController();
          const abortAt = random() < 0.4 ? Math.floor(random() * 150) : undefined;
          const timer = abortAt === undefined ? undefined : setTimeout(() => controller.abort(new Error('interrupted')), abortAt);
          const first = await settles(runPlan({ ...options, signal: controller.signal }));
          clearTimeout(timer);
          expect(first, `seed ${seed}: the run did not end within ${BOUND_MS} ms`).not.toBe('hung');
          expect(first, `seed ${seed}: the run threw`).not.toHaveProperty('error');
          expect(journalOf(runDir).records.at(-1), `seed ${seed}`).toMatchObject({ type: 'run_finished' });
          const outcome = (first as RunSummary).outcome;
          endings.set(outcome, (endings.get(outcome) ?? 0) + 1);
          if (outcome === 'aborted') {
            const resumed = await settles(runPlan({ ...options, signal: new AbortController().signal }));
            expect(resumed, `seed ${seed}: the resume did not end within ${BOUND_MS} ms`).not.toBe('hung');
            expect(resumed, `seed ${seed}: the resume threw`).not.toHaveProperty('error');
          }
          expectOneRequestPerKey(emu);
        } finally {
          await client.close();
          await emu.close();
        }
      }
      // The seeds do reach the endings the test is about.
      expect(endings.get('aborted') ?? 0).toBeGreaterThan(3);
      expect((endings.get('completed') ?? 0) + (endings.get('failed') ?? 0)).toBeGreaterThan(3);
    },
  );
});
