// One start's options are resolved once, every field defaulted: given, else recorded by the run's
// last start, else the manifest's, else genpipe's default; and what the start records is derived
// there, with the lines a resume says for the flags that changed it.
import { describe, expect, it } from 'vitest';
import { DEFAULT_CONFIRM_OVER_USD } from '../../src/plan/guards.js';
import { GenerationClient } from '../../src/api/client.js';
import { resolveConfig } from '../../src/api/config.js';
import type { Plan } from '../../src/plan/plan.js';
import { localExecutor, type Executor } from '../../src/run/attempt/executor.js';
import type { RecordedOptions } from '../../src/run/journal/journal-records.js';
import { resolveRunOptions } from '../../src/run/resolved-options.js';
import type { GivenRunOptions, RunOptions } from '../../src/run/run-options.js';

/** A plan as the resolver reads it: the manifest's defaults and each step's on_failure. */
function plan(defaults: Record<string, unknown>, steps: Record<string, 'stop' | 'continue' | undefined>): Plan {
  return {
    loaded: { manifest: { defaults } },
    steps: Object.entries(steps).map(([id, onFailure]) => ({ id, step: onFailure === undefined ? {} : { on_failure: onFailure } })),
  } as unknown as Plan;
}

/** A client that is never asked anything here: the resolver only passes it on. */
const client = new GenerationClient(resolveConfig({ flags: { baseUrl: 'http://127.0.0.1:9' }, env: { HF_KEY: 'key:secret' } }));
const signal = new AbortController().signal;

/** The run's options: the flags given, the plan, and the wiring the resolver passes on or defaults. */
function run(given: GivenRunOptions, p: Plan, extra: Partial<RunOptions> = {}): RunOptions {
  return { ...given, plan: p, client, runDir: '/nowhere', runId: 'r1', planHash: 'h', signal, ...extra };
}

describe('resolveRunOptions', () => {
  it('a new run with nothing given: every field defaulted, the manifest before genpipe', async () => {
    const p = plan({ concurrency: 3, budget_usd: 7, on_failure: 'stop' }, { a: undefined, b: 'continue' });
    const { options, changes } = resolveRunOptions(run({}, p), undefined);
    expect(options).toMatchObject({
      recorded: { budgetUsd: null, reuse: false, retryBudget: null, confirmOverUsd: null, retry: [], retryRound: 0, executor: 'local' },
      budgetUsd: 7,
      confirmOverUsd: DEFAULT_CONFIRM_OVER_USD,
      concurrency: 3,
      ratePerSecond: 20,
      retryBudget: 200,
      maxDownloadBytes: 256 * 1024 * 1024,
      watchdogMs: 5_000,
      reuse: false,
      retry: new Set(),
      failFastSteps: new Set(['a']),
      resubmitUnknown: false,
      cancelOnAbort: false,
      serviceForgotten: false,
      remakeRejected: false,
      plan: p,
      runId: 'r1',
      runDir: '/nowhere',
      signal,
      client,
      catalog: undefined,
      executor: localExecutor,
      random: Math.random,
      pollSchedule: {},
      pollPrior: new Map(),
      sinks: undefined,
      webhook: undefined,
      fence: undefined,
    });
    // Review decisions not given: none approved, none rejected.
    expect(await options.review.approved()).toEqual(new Set());
    expect(await options.review.rejected()).toEqual(new Map());
    expect(changes).toEqual([]);
  });

  it('a resume inherits what its run recorded, and a flag given wins and is said', () => {
    const was: RecordedOptions = {
      budgetUsd: 2,
      reuse: true,
      retryBudget: 9,
      confirmOverUsd: null,
      retry: ['failed'],
      retryRound: 1,
      executor: 'local',
    };
    const inherited = resolveRunOptions(run({}, plan({ budget_usd: 7 }, { a: undefined })), was);
    expect(inherited.options.recorded).toEqual(was);
    expect(inherited.options).toMatchObject({ budgetUsd: 2, retryBudget: 9, reuse: true, retry: new Set(['failed']) });
    expect(inherited.changes).toEqual([]);

    const redis: Executor = { ...localExecutor, name: 'redis' };
    const given = resolveRunOptions(
      run({ budgetUsd: 5, retry: new Set(['unknown']), failFast: true }, plan({}, { a: 'continue', b: undefined }), {
        executor: redis,
        serviceForgotten: true,
      }),
      was,
    );
    expect(given.options.recorded).toEqual({ ...was, budgetUsd: 5, retry: ['unknown'], retryRound: 2, executor: 'redis' });
    expect(given.options).toMatchObject({ budgetUsd: 5, failFastSteps: new Set(['a', 'b']), serviceForgotten: true, executor: redis });
    expect(given.options.remakeRejected).toBe(false);
    expect(given.changes).toEqual(['budget: US$2.00 → US$5.00', 'retry: unknown (round 2)', 'executor: local → redis']);
  });

  it("wiring: the manifest polling under the caller's, and only a --retry rejected given now remakes", () => {
    const p = plan({ polling: { initial_ms: 100, min_ms: 20, max_ms: 400 } }, { a: undefined });
    const random = (): number => 0.5;
    const now = resolveRunOptions(run({ retry: new Set(['rejected']) }, p, { poll: { capMs: 900 }, random }), undefined).options;
    expect(now.pollSchedule).toEqual({ baseMs: 100, floorMs: 20, capMs: 900 });
    expect(now.random).toBe(random);
    expect(now.remakeRejected).toBe(true);
    // A resume inherits the selection with its round, but was not asked to remake again.
    const later = resolveRunOptions(run({}, p), now.recorded).options;
    expect(later.retry).toEqual(new Set(['rejected']));
    expect(later.remakeRejected).toBe(false);
  });
});
