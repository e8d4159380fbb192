// One start's options are resolved once, every field defaulted: given, else recorded by the run's
// last start, else the manifest's, else genpipe's default; and what the start records is derived
// there, with the lines a resume says for the flags that changed it.
import { describe, expect, it } from 'vitest';
import { DEFAULT_CONFIRM_OVER_USD } from '../../src/plan/guards.js';
import type { Plan } from '../../src/plan/plan.js';
import type { RecordedOptions } from '../../src/run/journal/journal-records.js';
import { resolveRunOptions } from '../../src/run/resolved-options.js';

/** A plan as the resolver reads it: the manifest's defaults and each step's on_failure. */
function plan(defaults: Record<string, unknown>, steps: Record<string, 'stop' | 'continue' | undefined>): Plan {
  return {
    loaded: { manifest: { defaults } },
    steps: Object.entries(steps).map(([id, onFailure]) => ({ id, step: onFailure === undefined ? {} : { on_failure: onFailure } })),
  } as unknown as Plan;
}

const local = { executor: undefined, serviceForgotten: false };

describe('resolveRunOptions', () => {
  it('a new run with nothing given: every field defaulted, the manifest before genpipe', () => {
    const { options, changes } = resolveRunOptions(
      {},
      plan({ concurrency: 3, budget_usd: 7, on_failure: 'stop' }, { a: undefined, b: 'continue' }),
      local,
      undefined,
    );
    expect(options).toEqual({
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
    });
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
    const inherited = resolveRunOptions({}, plan({ budget_usd: 7 }, { a: undefined }), local, was);
    expect(inherited.options.recorded).toEqual(was);
    expect(inherited.options).toMatchObject({ budgetUsd: 2, retryBudget: 9, reuse: true, retry: new Set(['failed']) });
    expect(inherited.changes).toEqual([]);

    const given = resolveRunOptions(
      { budgetUsd: 5, retry: new Set(['unknown']), failFast: true },
      plan({}, { a: 'continue', b: undefined }),
      { executor: 'redis', serviceForgotten: true },
      was,
    );
    expect(given.options.recorded).toEqual({ ...was, budgetUsd: 5, retry: ['unknown'], retryRound: 2, executor: 'redis' });
    expect(given.options).toMatchObject({ budgetUsd: 5, failFastSteps: new Set(['a', 'b']), serviceForgotten: true });
    expect(given.changes).toEqual(['budget: US$2.00 → US$5.00', 'retry: unknown (round 2)', 'executor: local → redis']);
  });
});
