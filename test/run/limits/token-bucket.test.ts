import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { GenpipeError } from '../../../src/api/errors.js';
import { TokenBucket, type TokenBucketOptions } from '../../../src/run/limits/token-bucket.js';
import { FakeClock, settle } from '../fake-clock.js';

function setup(options: Partial<TokenBucketOptions> = {}): { clock: FakeClock; bucket: TokenBucket } {
  const clock = new FakeClock(1_000_000);
  const bucket = new TokenBucket({ ratePerSecond: 10, burst: 1, now: clock.now, sleep: clock.sleep, ...options });
  return { clock, bucket };
}

/** Starts `n` takes and records the order in which they are granted. */
function takers(bucket: TokenBucket, n: number, signal?: AbortSignal): { granted: number[]; all: Promise<unknown>[] } {
  const granted: number[] = [];
  const all = Array.from({ length: n }, (_, i) => bucket.take(signal).then(() => void granted.push(i)));
  return { granted, all };
}

describe('TokenBucket: steady rate', () => {
  it('hands out the burst at once, then `rate` tokens per second, first come first served', async () => {
    const { clock, bucket } = setup({ ratePerSecond: 10, burst: 5 });
    const { granted } = takers(bucket, 30);
    await settle();
    expect(granted).toHaveLength(5);
    await clock.advance(1_000);
    expect(granted).toHaveLength(15);
    await clock.advance(1_000);
    expect(granted).toHaveLength(25);
    await clock.advance(1_000);
    expect(granted).toEqual(Array.from({ length: 30 }, (_, i) => i));
    expect(bucket.waiting).toBe(0);
    expect(clock.pendingTimers).toBe(0);
  });

  it('never saves up more than `burst` tokens while idle', async () => {
    const { clock, bucket } = setup({ ratePerSecond: 10, burst: 3 });
    await clock.advance(60_000);
    const { granted } = takers(bucket, 10);
    await settle();
    expect(granted).toHaveLength(3);
  });

  it('tryTake takes a free token but never jumps the queue', async () => {
    const { clock, bucket } = setup({ ratePerSecond: 1, burst: 1 });
    expect(bucket.tryTake()).toBe(true);
    expect(bucket.tryTake()).toBe(false);
    const { granted } = takers(bucket, 1);
    await clock.advance(999);
    expect(granted).toHaveLength(0);
    expect(bucket.tryTake()).toBe(false);
    await clock.advance(1);
    expect(granted).toHaveLength(1);
  });

  it('refuses a rate that is not a positive number', () => {
    for (const ratePerSecond of [0, -1, Number.NaN, Number.POSITIVE_INFINITY])
      expect(() => new TokenBucket({ ratePerSecond })).toThrow(GenpipeError);
  });
});

describe('TokenBucket: abort', () => {
  it('rejects at once with an aborted error when the signal already fired', async () => {
    const { bucket } = setup();
    const controller = new AbortController();
    controller.abort();
    await expect(bucket.take(controller.signal)).rejects.toMatchObject({ code: 'aborted' });
  });

  it('an aborted waiter leaves the queue without using a token; the others keep their order', async () => {
    const { clock, bucket } = setup({ ratePerSecond: 1, burst: 1 });
    bucket.tryTake();
    const controller = new AbortController();
    const order: string[] = [];
    const a = bucket.take().then(() => order.push('a'));
    const b = bucket.take(controller.signal).then(
      () => order.push('b'),
      (error: GenpipeError) => order.push(`b:${error.code}`),
    );
    const c = bucket.take().then(() => order.push('c'));
    await settle();
    controller.abort();
    await settle();
    expect(order).toEqual(['b:aborted']);
    await clock.advance(1_000);
    expect(order).toEqual(['b:aborted', 'a']);
    await clock.advance(1_000);
    expect(order).toEqual(['b:aborted', 'a', 'c']);
    await Promise.all([a, b, c]);
    expect(clock.pendingTimers).toBe(0);
  });

  it('leaves no timer behind when every waiter gives up', async () => {
    const { clock, bucket } = setup({ ratePerSecond: 1, burst: 1 });
    bucket.tryTake();
    const controller = new AbortController();
    const all = takers(bucket, 5, controller.signal).all.map((p) => p.catch((e: unknown) => e));
    await settle();
    controller.abort();
    const results = await Promise.all(all);
    expect(results.every((r) => r instanceof GenpipeError && r.code === 'aborted')).toBe(true);
    await settle();
    expect(bucket.waiting).toBe(0);
    expect(clock.pendingTimers).toBe(0);
  });
});

describe('TokenBucket: slowing down on 429', () => {
  it('halves the rate for the whole bucket', async () => {
    const { clock, bucket } = setup({ ratePerSecond: 10, burst: 1, recoveryStepMs: 60_000 });
    bucket.tryTake();
    bucket.slowDown();
    expect(bucket.rate).toBe(5);
    const { granted } = takers(bucket, 50);
    await clock.advance(2_000);
    expect(granted).toHaveLength(10);
  });

  it('gives no token before Retry-After has passed, and drops the saved-up burst', async () => {
    const { clock, bucket } = setup({ ratePerSecond: 10, burst: 10, recoveryStepMs: 60_000 });
    bucket.slowDown(3_000);
    const { granted } = takers(bucket, 50);
    await clock.advance(2_999);
    expect(granted).toHaveLength(0);
    // After the pause, tokens come at half the rate, with no stampede of saved-up ones.
    await clock.advance(1_001);
    expect(granted).toHaveLength(5);
  });

  it('counts a volley of 429s within the cooldown as one decrease, and never goes below the floor', async () => {
    const { clock, bucket } = setup({ ratePerSecond: 16, minRatePerSecond: 1, decreaseCooldownMs: 1_000, recoveryStepMs: 1_000_000 });
    for (let i = 0; i < 20; i++) bucket.slowDown();
    expect(bucket.rate).toBe(8);
    await clock.advance(1_000);
    bucket.slowDown();
    expect(bucket.rate).toBe(4);
    for (let i = 0; i < 10; i++) {
      await clock.advance(1_000);
      bucket.slowDown();
    }
    expect(bucket.rate).toBe(1);
  });

  it('recovers gradually to the configured rate and never above it', async () => {
    const { clock, bucket } = setup({ ratePerSecond: 10, recoveryStepMs: 5_000, recoveryFraction: 0.1 });
    bucket.slowDown();
    const rates: number[] = [bucket.rate];
    for (let i = 0; i < 10; i++) {
      await clock.advance(5_000);
      rates.push(bucket.rate);
    }
    expect(rates.map((r) => Math.round(r * 10) / 10)).toEqual([5, 6, 7, 8, 9, 10, 10, 10, 10, 10, 10]);
  });

  it('throttle holds a reduced rate until the given time, then recovers', async () => {
    const { clock, bucket } = setup({ ratePerSecond: 10, recoveryStepMs: 1_000, recoveryFraction: 0.5 });
    bucket.throttle(0.2, clock.now() + 10_000);
    expect(bucket.rate).toBe(2);
    await clock.advance(9_999);
    expect(bucket.rate).toBe(2);
    await clock.advance(1_001);
    expect(bucket.rate).toBe(7);
    await clock.advance(1_000);
    expect(bucket.rate).toBe(10);
    expect(() => bucket.throttle(0, 0)).toThrow(GenpipeError);
    expect(() => bucket.throttle(1.5, 0)).toThrow(GenpipeError);
  });

  it('a slow-down while callers wait applies to them too', async () => {
    const { clock, bucket } = setup({ ratePerSecond: 10, burst: 1, recoveryStepMs: 60_000 });
    bucket.tryTake();
    const { granted } = takers(bucket, 100);
    await clock.advance(1_000);
    expect(granted).toHaveLength(10);
    bucket.slowDown(2_000);
    await clock.advance(2_000);
    expect(granted).toHaveLength(10);
    await clock.advance(2_000);
    expect(granted).toHaveLength(20);
  });
});

describe('TokenBucket: the rate is never exceeded (property)', () => {
  it('grants at most burst + rate·t tokens over any run of takes, waits and slow-downs', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 50 }),
        fc.integer({ min: 1, max: 10 }),
        fc.array(
          fc.oneof(
            fc.record({ kind: fc.constant('take' as const), n: fc.integer({ min: 1, max: 20 }) }),
            fc.record({ kind: fc.constant('wait' as const), ms: fc.integer({ min: 0, max: 3_000 }) }),
            fc.record({
              kind: fc.constant('slow' as const),
              retryAfter: fc.option(fc.integer({ min: 0, max: 5_000 }), { nil: undefined }),
            }),
          ),
          { maxLength: 25 },
        ),
        async (rate, burst, steps) => {
          const clock = new FakeClock(0);
          const bucket = new TokenBucket({ ratePerSecond: rate, burst, now: clock.now, sleep: clock.sleep, recoveryStepMs: 500 });
          let granted = 0;
          let elapsed = 0;
          const pending: Promise<unknown>[] = [];
          for (const step of steps) {
            if (step.kind === 'take') for (let i = 0; i < step.n; i++) pending.push(bucket.take().then(() => granted++));
            else if (step.kind === 'wait') {
              await clock.advance(step.ms);
              elapsed += step.ms;
            } else bucket.slowDown(step.retryAfter);
            await settle();
            expect(granted).toBeLessThanOrEqual(burst + Math.floor((rate * elapsed) / 1000) + 1);
          }
          // Drain, so no promise is left hanging.
          for (let i = 0; i < 1_000 && bucket.waiting > 0; i++) await clock.advance(1_000);
          expect(bucket.waiting).toBe(0);
          await Promise.all(pending);
        },
      ),
      { numRuns: 60 },
    );
  });
});

/** Every reading after the scripted ones comes from `clock`; readings never go backwards. */
function scripted(clock: FakeClock, readings: number[]): () => number {
  const script = [...readings];
  return () => script.shift() ?? clock.now();
}

describe('TokenBucket: a waiter granted on the spot never stalls the queue', () => {
  it('serves later waiters after the pump granted its first waiter synchronously (clock 0, 0, 49.5, 50.5)', async () => {
    // The readings: construction 0; the first take 0 (takes the burst token); the second take's
    // tryTake 49.5 (0.99 token: queued); the pump 50.5 (1.01 tokens: granted before `take` returns).
    const clock = new FakeClock(50.5);
    const bucket = new TokenBucket({ ratePerSecond: 20, burst: 1, now: scripted(clock, [0, 0, 49.5]), sleep: clock.sleep });
    const order: number[] = [];
    const all = [0, 1, 2, 3].map((i) => bucket.take().then(() => void order.push(i)));
    await settle();
    expect(order).toEqual([0, 1]);
    // 20 tokens per second: the two left are due within 100 ms; give them a full second.
    await clock.advance(1_000);
    expect(order).toEqual([0, 1, 2, 3]);
    await Promise.all(all);
    expect(bucket.waiting).toBe(0);
    expect(clock.pendingTimers).toBe(0);
  });
});

type Op =
  | { kind: 'take'; n: number; abortable: boolean }
  | { kind: 'abort'; which: number }
  | { kind: 'throttle'; factor: number; forMs: number }
  | { kind: 'pause'; forMs: number }
  | { kind: 'slowDown'; retryAfter: number | undefined }
  | { kind: 'wait'; ms: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('take' as const), n: fc.integer({ min: 1, max: 6 }), abortable: fc.boolean() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('abort' as const), which: fc.nat() }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('throttle' as const),
      factor: fc.double({ min: 0.01, max: 1, noNaN: true }),
      forMs: fc.integer({ min: -1_000, max: 5_000 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('pause' as const), forMs: fc.integer({ min: -1_000, max: 5_000 }) }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('slowDown' as const),
      retryAfter: fc.option(fc.integer({ min: 0, max: 5_000 }), { nil: undefined }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('wait' as const), ms: fc.integer({ min: 0, max: 500 }) }) },
);

/**
 * How far each reading of the clock moves ahead of the fake clock's own time: often 0 (equal
 * readings), else a fraction of a millisecond up to more than a token's interval at the lowest
 * rate. A token coming due between two readings inside one call is the case that hung the run.
 */
const stepArb = fc.oneof(
  { weight: 3, arbitrary: fc.constant(0) },
  { weight: 2, arbitrary: fc.double({ min: 0, max: 5, noNaN: true }) },
  { weight: 2, arbitrary: fc.integer({ min: 0, max: 200 }) },
  { weight: 1, arbitrary: fc.integer({ min: 200, max: 1_500 }) },
);

describe('TokenBucket: every waiter is served or rejected, in arrival order (property)', () => {
  it('holds over random monotone clocks and random takes, aborts, throttles, pauses and slow-downs', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 50 }),
        fc.integer({ min: 1, max: 4 }),
        fc.array(stepArb, { minLength: 1, maxLength: 30 }),
        fc.array(opArb, { maxLength: 30 }),
        async (rate, burst, steps, ops) => {
          const clock = new FakeClock(0);
          // Readings: the fake clock's time plus a drift that grows by the next step at every
          // reading, so readings are monotone, repeat, and move within a synchronous call.
          let drift = 0;
          let reads = 0;
          let last = -Infinity;
          const now = (): number => {
            drift += steps[reads++ % steps.length] ?? 0;
            const reading = clock.now() + drift;
            expect(reading).toBeGreaterThanOrEqual(last);
            last = reading;
            return reading;
          };
          const bucket = new TokenBucket({ ratePerSecond: rate, burst, now, sleep: clock.sleep, recoveryStepMs: 500 });
          const controllers: AbortController[] = [];
          const outcomes = new Map<number, 'granted' | 'rejected'>();
          const abortable = new Set<number>();
          const grants: number[] = [];
          let arrivals = 0;
          for (const op of ops) {
            if (op.kind === 'take') {
              for (let i = 0; i < op.n; i++) {
                const id = arrivals++;
                let signal: AbortSignal | undefined;
                if (op.abortable) {
                  const controller = new AbortController();
                  controllers.push(controller);
                  abortable.add(id);
                  signal = controller.signal;
                }
                bucket.take(signal).then(
                  () => {
                    outcomes.set(id, 'granted');
                    grants.push(id);
                  },
                  () => outcomes.set(id, 'rejected'),
                );
              }
            } else if (op.kind === 'abort') {
              if (controllers.length > 0) controllers[op.which % controllers.length]?.abort();
            } else if (op.kind === 'throttle') bucket.throttle(op.factor, clock.now() + drift + op.forMs);
            else if (op.kind === 'pause') bucket.pause(clock.now() + drift + op.forMs);
            else if (op.kind === 'slowDown') bucket.slowDown(op.retryAfter);
            else await clock.advance(op.ms);
            await settle();
          }
          // Drive the fake sleep to completion. Bounded: at the floor rate (rate/16, at least
          // 1/16 per second) a waiter needs at most 16 s, plus at most 5 s of pause per op.
          const budget = Math.ceil(((arrivals + 1) * 16_000 + ops.length * 5_000) / 1_000) + 10;
          for (let i = 0; i < budget && outcomes.size < arrivals; i++) await clock.advance(1_000);
          expect(outcomes.size).toBe(arrivals);
          expect(bucket.waiting).toBe(0);
          // Only an abortable waiter may be rejected, and the grants follow arrival order.
          for (const [id, outcome] of outcomes) if (outcome === 'rejected') expect(abortable.has(id)).toBe(true);
          expect(grants).toEqual([...grants].sort((a, b) => a - b));
          expect(clock.pendingTimers).toBe(0);
        },
      ),
      { numRuns: 300 },
    );
  });
});
