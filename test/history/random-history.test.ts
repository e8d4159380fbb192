// The model-based random-history test (issue 26, "How it is checked"): seeded histories of runs,
// kills (kill -9 at a named crash point or after a delay), resumes with random flags, review
// decisions, and on the fleet worker kills and Redis restarts, against a real emulator, on both
// executors; after each, invariants A and B, one charge per attempt, the budget and the exit codes
// hold (history-invariants.ts). CI runs a small fixed set of seeds; `npm run soak` runs many more.
// A failing history prints its seed and operations; GENPIPE_HISTORY_SEED=n replays seed n alone.
//
// Seeds kept out of the CI set because they find a genpipe bug not yet fixed (see the report of
// the branch that added this file): none yet.
import { describe, expect, it } from 'vitest';
import { describeHistory, generateHistory, type Executor } from './history-model.js';
import { runHistory } from './history-run.js';

const BIN = new URL('../../bin/genpipe.js', import.meta.url).pathname;
const replay = process.env.GENPIPE_HISTORY_SEED;
const SEEDS: readonly number[] = replay === undefined ? [1, 2, 3] : [Number(replay)];
const EXECUTORS: readonly Executor[] = ['local', 'fleet'];

describe.concurrent.each(EXECUTORS)('random histories on the %s executor', (executor) => {
  it.each(SEEDS)('seed %i keeps every invariant', { timeout: 180_000 }, async (seed) => {
    const history = generateHistory(seed, executor);
    const outcome = await runHistory(history, { bin: BIN, boundMs: 90_000 });
    const commands = outcome.commands.map((c) => `  ${c.label}: ${c.code ?? c.signal} in ${c.ms} ms`).join('\n');
    // The history and what each command did, so that a failure can be replayed and read.
    expect(outcome.violations, `${describeHistory(history)}\ncommands:\n${commands}\nnotes: ${outcome.notes.join('; ')}`).toEqual([]);
    // The history ran: it sent something and every command reported back.
    expect(outcome.requests).toBeGreaterThan(0);
    expect(outcome.commands.some((c) => c.label.startsWith('report') && c.code === 0)).toBe(true);
  });
});
