// Pins reliability.md #11 (the receiver "dedupes by request_id ... and confirms every payload with a
// status GET before trusting it") by its effect on a run: with every webhook delivered twice and
// half of them late, each request costs exactly one confirming status GET, not one per delivery,
// and no fallback poll. Mutation this catches: the receiver's `#seen` Set made to never remember
// (its `add` removed in webhook-receiver.ts #accept).
//
// The Set is the receiver's memory of deliveries by request_id. It is what makes a delivery count
// when it arrives before the instance waits for it: here every submit answer reaches the runner
// ~450 ms after the job was created (the emulator writes the submit bodies slowly), while the job
// ends and its webhook (and the duplicate, 2 ms later) arrive within tens of ms. A receiver that
// forgets them leaves those instances waiting for the 30 s fallback poll; the run is then stopped
// at 20 s (it needs about 2 s) and the test fails on its outcome and on the missing GETs. The
// late half (the first delivery 1.2 s after the job ends) arrive while the runner waits, so both
// paths are exercised; the test checks that they were.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startEmulator } from '../../src/emulator/index.js';
import { runPlan } from '../../src/run/runner.js';
import { WebhookReceiver } from '../../src/run/polling/webhook-receiver.js';
import { closeRun, isSubmit, prepareRun, STATUS_PATH, type InProcessRun, runOf } from './pin-helpers.js';
import { cleanTemps, sheetsManifest, tempDir, freePort } from './runner-helpers.js';

afterAll(cleanTemps);

const INSTANCES = 12;
/** The runner polls anyway after 30 s without a delivery; a run that needs it is stopped before. */
const RUN_DEADLINE_MS = 20_000;

describe('webhook dedupe, by effect', () => {
  it('every delivery twice, half of them late: one confirming GET per request, no fallback poll', { timeout: 60_000 }, async () => {
    const dir = tempDir();
    const faults = join(dir, 'webhooks.yaml');
    // Time scale 0.002: a sheet takes 17-44 ms, a late delivery comes 1.2 s late, a duplicate 2 ms
    // after the first. Submit bodies come in 4 pieces 150 ms apart: the answer takes ~450 ms.
    writeFileSync(
      faults,
      'submit:\n  slow_body: 1\n  slow_body_chunk_ms: 150\nwebhooks:\n  duplicate_rate: 1\n  late_rate: 0.5\n  late_ms: 600000\n',
    );
    const emu = await startEmulator({ port: 0, timeScale: 0.002, seed: 3, faults, log: () => {} });
    const port = await freePort();
    const receiver = await WebhookReceiver.start({ host: '127.0.0.1', port, publicUrl: `http://127.0.0.1:${port}/hooks` });
    let run: InProcessRun | undefined;
    const deadline = new AbortController();
    const timer = setTimeout(() => deadline.abort(), RUN_DEADLINE_MS);
    try {
      run = await prepareRun(emu, sheetsManifest(dir, INSTANCES, { name: 'hooked' }));
      const summary = await runPlan({
        ...runOf(run),
        signal: deadline.signal,
        concurrency: INSTANCES,
        ratePerSecond: 10_000,
        webhook: receiver,
      });
      expect(summary.outcome, `the run ended within ${RUN_DEADLINE_MS} ms, without waiting for fallback polls`).toBe('completed');
      expect(summary.counts.completed).toBe(INSTANCES);
      await emu.webhooks.whenIdle();

      // The request ids, from the submit answers the client read.
      const submits = run.agent.exchanges.filter(isSubmit);
      expect(submits).toHaveLength(INSTANCES);
      const answered = new Map<string, number>();
      for (const s of submits) {
        expect(s.status).toBe(200);
        answered.set((JSON.parse(s.responseBody ?? '{}') as { request_id: string }).request_id, s.completedAt as number);
      }
      expect(answered.size).toBe(INSTANCES);

      // Every request was delivered twice (the second flagged duplicate), and both were accepted.
      const deliveries = emu.webhooks.deliveries;
      for (const id of answered.keys()) {
        const mine = deliveries.filter((d) => d.request_id === id);
        expect(
          mine.map((d) => [d.duplicate, d.state]),
          id,
        ).toEqual([
          [false, 'delivered'],
          [true, 'delivered'],
        ]);
      }
      expect(receiver.stats).toMatchObject({ received: 2 * INSTANCES, duplicates: INSTANCES, refused: 0, malformed: 0 });

      // One status GET per request: the confirmation of its first delivery, nothing for the second.
      const gets = new Map<string, number>();
      for (const e of run.agent.exchanges) {
        const id = e.method === 'GET' ? STATUS_PATH.exec(e.path)?.[1] : undefined;
        if (id !== undefined) gets.set(id, (gets.get(id) ?? 0) + 1);
      }
      expect(Object.fromEntries(gets), 'status GETs per request id').toEqual(Object.fromEntries([...answered.keys()].map((id) => [id, 1])));
      expect(emu.stats.byRoute.get('GET /requests/:id/status')).toBe(INSTANCES);

      // Both paths were taken: deliveries (both of them) that came before the runner knew the
      // request id, and first deliveries that came while it waited.
      const sentAt = (id: string, duplicate: boolean): number =>
        Date.parse(deliveries.find((d) => d.request_id === id && d.duplicate === duplicate)?.attempts.at(-1)?.at ?? '');
      const early = [...answered].filter(([id, at]) => sentAt(id, true) < at);
      const late = [...answered].filter(([id, at]) => sentAt(id, false) > at);
      expect(early.length, 'requests whose deliveries all came before the submit answer').toBeGreaterThan(0);
      expect(late.length, 'requests whose first delivery came after the submit answer').toBeGreaterThan(0);
    } finally {
      clearTimeout(timer);
      await closeRun(run);
      await receiver.close();
      await emu.close();
    }
  });
});
