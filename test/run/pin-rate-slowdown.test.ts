// Pins reliability.md #9 ("when the service throttles (429), slow down for the
// whole run"): a 429 with Retry-After: 1 on one instance's submit pauses the submits of EVERY
// instance, not just a retry of that one. Mutation this catches: `this.#bucket.slowDown(...)`
// removed from runner.ts #submit (the 429'd instance then retries at once, and the others go on).
//
// By effect, in-process against a real emulator: 40 instances, 16 in flight, a rate far above what
// they need (1,000/s, so the bucket never paces them by itself), jobs of 150-650 ms so that slots
// free up, and new submits go out, all the time. The emulator answers two submits in the middle of
// the run with 429 and Retry-After: 1 (forced faults, so the test does not depend on a seed). The
// client's dispatcher notes when each 429's headers arrive (t); the journal's intents are stamped
// (`at`) the moment their instance took a token from the run's bucket, just before the POST.
//
// Margins: the runner slows the bucket only once it has read the 429's body and the error reached
// #submit, a few event-loop turns after t; an instance that took its token in that gap still
// sends. So: no intent may be stamped in (t + 100 ms, t + 950 ms): 100 ms is far more than that gap
// even on a loaded 2-core machine, and the window still covers most of the 1 s pause. The 429'd
// instance's own retry must leave at t + 950 ms or later (the bucket grants nothing before the
// pause ends, which is at least t + 1000 ms; 50 ms spare for clock granularity). Without the
// slow-down the retry leaves within milliseconds and other instances' intents fill the window.
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startEmulator } from '../../src/emulator/index.js';
import { readJournal } from '../../src/run/journal/journal.js';
import type { JournalRecordOf } from '../../src/run/journal/journal-records.js';
import { runPlan } from '../../src/run/runner.js';
import { closeRun, isSubmit, MARKETING_SUBMIT, prepareRun, type Exchange, type InProcessRun, runOf } from './pin-helpers.js';
import { cleanTemps, marketingManifest, sheetsManifest, tempDir } from './runner-helpers.js';

afterAll(cleanTemps);

const INSTANCES = 40;
const CONCURRENCY = 16;
/** The submits (by dispatch order, from 1) that are answered 429. */
const THROTTLED_AT = new Set([18, 30]);
const GRACE_MS = 100;
const WINDOW_END_MS = 950;

/** The instance a submit is for: its Idempotency-Key's intent (sheets), or its prompt (ads). */
function instanceOf(post: Exchange, intents: readonly JournalRecordOf<'intent'>[]): string {
  if (post.path === MARKETING_SUBMIT) return `ads[n=${/Banner number (\d+) /.exec(JSON.parse(post.body ?? '{}').prompt)?.[1]}]`;
  const id = intents.find((i) => i.idempotencyKey === post.headers['idempotency-key'])?.instance;
  expect(id, 'every keyed submit has an intent with its key').toBeDefined();
  return id as string;
}

async function throttledRun(model: 'marketing-image' | 'character-sheet', oneAttemptPerCall = false): Promise<void> {
  const emu = await startEmulator({
    port: 0,
    timeScale: 1,
    seed: 9,
    log: () => {},
    durations: { [model]: { queuedMs: [0, 50], runMs: [150, 600] } },
  });
  let run: InProcessRun | undefined;
  try {
    const dir = tempDir();
    const manifest = model === 'marketing-image' ? marketingManifest(dir, INSTANCES) : sheetsManifest(dir, INSTANCES, { name: 'sheets' });
    // One attempt per call: the 429 reaches the runner's own retry. With the default attempts, the
    // transport retries a keyed 429 itself, and tells the runner through onThrottle.
    run = await prepareRun(emu, manifest, oneAttemptPerCall ? (c) => ({ ...c, retry: { ...c.retry, maxAttempts: 1 } }) : undefined);
    let submits = 0;
    run.agent.onDispatch = (e) => {
      if (isSubmit(e) && THROTTLED_AT.has(++submits)) emu.forceFaults('submit', 'rate_429');
    };
    const summary = await runPlan({
      ...runOf(run),
      signal: new AbortController().signal,
      concurrency: CONCURRENCY,
      ratePerSecond: 1_000,
      poll: { floorMs: 10, baseMs: 20, capMs: 50 },
    });
    expect(summary.outcome).toBe('completed');
    expect(summary.counts.completed).toBe(INSTANCES);
    expect(emu.faults.injected['submit.rate_429']).toBe(THROTTLED_AT.size);

    const posts = run.agent.exchanges.filter(isSubmit);
    const throttled = posts.filter((p) => p.status === 429);
    expect(throttled).toHaveLength(THROTTLED_AT.size);
    expect(posts).toHaveLength(INSTANCES + THROTTLED_AT.size);
    const intents = (await readJournal(join(run.runDir, 'journal.jsonl'))).records.filter(
      (r): r is JournalRecordOf<'intent'> => r.type === 'intent',
    );
    // A retry inside the transport sends the same intent's request again; the runner's retry journals a new intent.
    const transportRetries = model === 'character-sheet' && !oneAttemptPerCall;
    expect(intents).toHaveLength(INSTANCES + (transportRetries ? 0 : THROTTLED_AT.size));

    const problems: string[] = [];
    for (const answer of throttled) {
      const t = answer.headersAt as number;
      // The 429'd instance's own retry waited out Retry-After.
      const instance = instanceOf(answer, intents);
      const retry = posts.find((p) => p.seq > answer.seq && instanceOf(p, intents) === instance);
      expect(retry, `${instance} was sent again after its 429`).toBeDefined();
      const retryAfter = (retry?.dispatchedAt ?? 0) - t;
      if (retryAfter < WINDOW_END_MS) problems.push(`${instance} was resent ${retryAfter} ms after its 429`);
      // No instance took a token during the pause (past the grace for those already past the bucket).
      for (const i of intents) {
        const offset = (i.at as number) - t;
        if (offset > GRACE_MS && offset < WINDOW_END_MS)
          problems.push(`${i.instance} took a submit token ${offset} ms after the 429 that ${instance} got`);
      }
    }
    expect(problems, 'submits during the 1 s pause after a 429').toEqual([]);
    // Not vacuous: the first pause (with 22 instances not yet submitted) held back other instances
    // than the throttled one. The second 429 may come when every instance has taken its token.
    const first = throttled[0]?.headersAt as number;
    const after = new Set(intents.filter((i) => (i.at as number) - first >= WINDOW_END_MS).map((i) => i.instance));
    expect(after.size, 'instances that submitted after the first pause').toBeGreaterThan(1);
  } finally {
    await closeRun(run);
    await emu.close();
  }
}

describe('a 429 slows the whole run', () => {
  it('keyless marketing images: after a 429 no instance submits until Retry-After has passed', { timeout: 60_000 }, async () => {
    await throttledRun('marketing-image');
  });

  it('keyed character sheets (one attempt per call): the same pause for every instance', { timeout: 60_000 }, async () => {
    await throttledRun('character-sheet', true);
  });

  it(
    'keyed character sheets with the default attempts: a 429 the transport retries by itself pauses every instance too',
    { timeout: 60_000 },
    async () => {
      await throttledRun('character-sheet');
    },
  );
});
