// The model-based random-history test, which checks every path of the run lifecycle at once: seeded histories of runs,
// kills (kill -9 at a named crash point or after a delay), resumes with random flags, review
// decisions, and on the fleet worker kills, Redis restarts and worker–Redis partitions, against a real emulator, on both
// executors; after each, invariants A and B, one charge per attempt, the budget and the exit codes
// hold (history-invariants.ts). About half the seeds (3 of the CI set) add a storage sink (s3rver)
// at one prefix every run shares, each new run with other bytes: kills land during uploads, later
// runs meet earlier runs' objects, and no object may be lost or overwritten (sink-invariants.ts). CI runs a small fixed set of seeds; `npm run soak` runs many more.
// A failing history prints its seed and operations; GENPIPE_HISTORY_SEED=n replays seed n alone.
//
// Seeds the soak found bugs with, kept out of the CI set (`npm run soak -- --seed S --histories 1
// --executor E` replays one; timing decides whether the bug shows):
// - 10043, local: a resume the budget stopped at once left an attempt in flight, unfollowed, and
//   the report counted it as charged while the service refunded it. Fixed in src/run/scheduler.ts,
//   pinned by test/run/budget-stop-follows.test.ts.
// - 10001, fleet: the ledger US$0.05 over net + unknown after kill -9 of the coordinator, a
//   --resubmit-unknown resume killed, a --retry rejected resume stopped by a double Ctrl-C and a
//   budget-stopped --retry unknown,failed (invariant B). Not reproduced in replays: open.
// - 20027, fleet (soak with --break-lock): Redis killed while a coordinator starts, after its run
//   directory is made and before its journal: "internal error: Connection is closed." and the
//   process never exits (the bound kills it); resumes of the journal-less directory exit 2. Fixed:
//   exit 5 and one sentence (session/run-session.ts), no directory left without a journal.
import { describe, expect, it } from 'vitest';
import { describeHistory, generateHistory, type Executor } from './history-model.js';
import { runHistory } from './history-run.js';

const BIN = new URL('../../bin/genpipe.js', import.meta.url).pathname;
const replay = process.env.GENPIPE_HISTORY_SEED;
const SEEDS: readonly number[] = replay === undefined ? [1, 2, 3] : [Number(replay)];
const EXECUTORS: readonly Executor[] = ['local', 'fleet'];

// Partitions: the worker's link to Redis dropped or stalled (a loopback proxy) and healed, some past
// its lock lease, on the fleet only; a couple of seeds here, `npm run soak -- --partitions` runs more.
const PARTITION_SEEDS: readonly number[] = replay === undefined ? [1, 2] : [Number(replay)];
const GROUPS: readonly { executor: Executor; partitions: boolean; seeds: readonly number[] }[] = [
  ...EXECUTORS.map((executor) => ({ executor, partitions: false, seeds: SEEDS })),
  { executor: 'fleet', partitions: true, seeds: PARTITION_SEEDS },
];

describe.concurrent.each(GROUPS)(
  'random histories on the $executor executor (partitions: $partitions)',
  ({ executor, partitions, seeds }) => {
    it.each(seeds)('seed %i keeps every invariant', { timeout: 180_000 }, async (seed) => {
      const history = generateHistory(seed, executor, { partitions });
      const outcome = await runHistory(history, { bin: BIN, boundMs: 90_000 });
      const commands = outcome.commands.map((c) => `  ${c.label}: ${c.code ?? c.signal} in ${c.ms} ms`).join('\n');
      // The history and what each command did, so that a failure can be replayed and read.
      expect(outcome.violations, `${describeHistory(history)}\ncommands:\n${commands}\nnotes: ${outcome.notes.join('; ')}`).toEqual([]);
      // The history ran: it sent something and every command reported back.
      expect(outcome.requests).toBeGreaterThan(0);
      expect(outcome.commands.some((c) => c.label.startsWith('report') && c.code === 0)).toBe(true);
      // A world with a sink delivered something to it.
      if (history.world.sink) expect(outcome.sinkObjects, outcome.notes.join('; ')).toBeGreaterThan(0);
      if (process.env.GENPIPE_HISTORY_NOTES === '1') console.log(describeHistory(history), '\n', outcome.notes.join('\n'));
    });
  },
);
