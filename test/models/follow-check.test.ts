// A followed request must be the one submitted: the model adapters' track checks
// that a status answer echoes the request id it was asked about (and status_url and cancel_url name
// it), and that a job set echoes its id, its type and the input_params sent. Against a real
// emulator whose `foreign_status` fault answers about another request; a mismatch throws
// FollowMismatchError (code `mismatch`), never a result.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GenerationClient } from '../../src/api/client.js';
import { FollowMismatchError } from '../../src/api/errors.js';
import type { JobSet, RequestStatus } from '../../src/api/wire.js';
import type { Emulator } from '../../src/emulator/index.js';
import type { AdapterContext, ModelAdapter, Submission, TrackResult } from '../../src/models/adapter.js';
import { characterSheet } from '../../src/models/character-sheet.js';
import { dop } from '../../src/models/dop.js';
import { checkJobSetFollow, checkRequestFollow } from '../../src/models/follow-check.js';
import { soul } from '../../src/models/soul.js';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { clientFor, KEY, start } from '../emulator/helpers.js';

let emu: Emulator;
let client: GenerationClient;
let ctx: AdapterContext;

beforeAll(async () => {
  emu = await start();
  client = clientFor(emu);
  ctx = { client, signal: new AbortController().signal };
});
afterAll(async () => {
  await client.close();
  await emu.close();
});

/** Tracks until the submission is final (the emulator runs at time scale 0; bounded by the test timeout). */
async function trackToEnd(
  adapter: ModelAdapter,
  submission: Submission,
  context: AdapterContext = ctx,
): Promise<Extract<TrackResult, { done: true }>> {
  for (;;) {
    const result = await adapter.track(submission, {}, context);
    if (result.done) return result;
  }
}

const sheetBody = (seed: number): unknown => characterSheet.build({ tier: 'cats', seed, brief: 'A mascot' }, {});
const soulBody = (seed: number): { prompt: string; seed: number; width_and_height: string } => ({
  prompt: `A lighthouse ${seed}`,
  seed,
  width_and_height: '1024x1024',
});
const requestIdOf = (s: Submission): string => (s.kind === 'request' ? s.requestId : '');
const jobSetIdOf = (s: Submission): string => (s.kind === 'job_set' ? s.jobSetId : '');

describe('request status: the answer must be about the request followed', () => {
  let first: Submission;
  let second: Submission;

  it('a matching answer is taken: each request completes with its own id', async () => {
    const adapter = characterSheet.adapter;
    first = await adapter.submit(sheetBody(1), { idempotencyKey: 'follow-1', script: {} }, ctx);
    // No other request yet: the foreign answer is this one's under an id that is not its own.
    emu.forceFaults('status', 'foreign_status');
    const lone = await adapter.track(first, {}, ctx).catch((e: unknown) => e);
    expect(lone).toBeInstanceOf(FollowMismatchError);
    expect((lone as FollowMismatchError).returned).not.toBe(requestIdOf(first));

    second = await adapter.submit(sheetBody(2), { idempotencyKey: 'follow-2', script: {} }, ctx);
    for (const s of [first, second]) {
      const result = await trackToEnd(adapter, s);
      expect(result.status).toBe('completed');
      expect(result.outputs.request_id).toBe(requestIdOf(s));
      expect(result.files).toHaveLength(1);
    }
  });

  it('an answer about another request is refused with one sentence naming both ids; the next matching answer is taken again', async () => {
    const adapter = characterSheet.adapter;
    const applied = emu.faults.injected['status.foreign_status'] ?? 0;
    emu.forceFaults('status', 'foreign_status');
    const refused = await adapter.track(first, {}, ctx).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(FollowMismatchError);
    const error = refused as FollowMismatchError;
    expect(error.code).toBe('mismatch');
    expect(error.field).toBe('request_id');
    // The emulator answered with the account's latest other character sheet: the second one.
    expect(error.message).toBe(
      `The service answered about request ${requestIdOf(second)} when asked about request ${requestIdOf(first)}; the answer was not used.`,
    );
    expect(emu.faults.injected['status.foreign_status']).toBe(applied + 1);
    expect((await trackToEnd(adapter, first)).outputs.request_id).toBe(requestIdOf(first));
  });

  it('a forced foreign answer waits for a status GET: a cancel of the same class does not take it', async () => {
    emu.forceFaults('status', 'foreign_status');
    // A cancel is a status-class route that echoes no followed answer: it goes through untouched.
    await client.requests.cancel(requestIdOf(second)).catch(() => undefined);
    await expect(characterSheet.adapter.track(second, {}, ctx)).rejects.toBeInstanceOf(FollowMismatchError);
  });

  it('genpipe status of a request answered about another one exits 1 with that sentence, printing no status', async () => {
    const stdout: string[] = [];
    const stderr: string[] = [];
    const io: CliIO = {
      out: (t) => stdout.push(t),
      write: async (t) => void stdout.push(t),
      err: (t) => stderr.push(t),
      env: { GENPIPE_BASE_URL: emu.url, HF_KEY: KEY },
      signal: new AbortController().signal,
    };
    emu.forceFaults('status', 'foreign_status');
    expect(await main(['status', requestIdOf(first)], io)).toBe(1);
    expect(stdout).toEqual([]);
    expect(stderr).toEqual([
      `genpipe: The service answered about request ${requestIdOf(second)} when asked about request ${requestIdOf(first)}; the answer was not used.`,
    ]);
    expect(await main(['status', requestIdOf(first)], io)).toBe(0);
    expect(stdout[0]).toBe(`${requestIdOf(first)}: completed`);
  });

  it('a status_url or cancel_url naming another request is refused too (the URL shapes of §4.1)', () => {
    const id = '11111111-1111-4111-8111-111111111111';
    const other = '22222222-2222-4222-8222-222222222222';
    const status = (extra: Partial<RequestStatus>): RequestStatus => ({ status: 'completed', request_id: id, ...extra });
    expect(() =>
      checkRequestFollow(
        id,
        status({ status_url: `https://api.test/requests/${id}/status`, cancel_url: `https://platform.test/requests/${id}/cancel` }),
      ),
    ).not.toThrow();
    expect(() => checkRequestFollow(id.toUpperCase(), status({}))).not.toThrow();
    expect(() => checkRequestFollow(id, status({ status_url: `https://api.test/requests/${other}/status` }))).toThrow(
      `The service's answer about request ${id} has a status_url for another request (https://api.test/requests/${other}/status); the answer was not used.`,
    );
    expect(() => checkRequestFollow(id, status({ cancel_url: `https://platform.test/requests/${other}/cancel` }))).toThrow(
      FollowMismatchError,
    );
    // A URL of another shape says nothing about the id: not a mismatch.
    expect(() => checkRequestFollow(id, status({ status_url: 'https://api.test/poll?token=abc' }))).not.toThrow();
  });
});

describe('job sets: the answer must echo the id, the type and the input_params sent', () => {
  let setA: Submission;
  let setB: Submission;
  const withBody = (body: unknown): AdapterContext => ({ ...ctx, sentBody: body });

  it('matching answers are taken, with the body sent compared to input_params', async () => {
    setA = await soul.adapter.submit(soulBody(7), { script: {} }, ctx);
    setB = await soul.adapter.submit(soulBody(8), { script: {} }, ctx);
    const a = await trackToEnd(soul.adapter, setA, withBody(soulBody(7)));
    expect(a.status).toBe('completed');
    expect(a.outputs.job_set_id).toBe(jobSetIdOf(setA));
    // The body's members in another order are the same body.
    const reordered = { width_and_height: '1024x1024', seed: 8, prompt: 'A lighthouse 8' };
    expect((await trackToEnd(soul.adapter, setB, withBody(reordered))).outputs.job_set_id).toBe(jobSetIdOf(setB));
    // Without the body (a caller that does not pass it), the id and type checks still hold and pass.
    expect((await trackToEnd(soul.adapter, setA)).status).toBe('completed');
  });

  it('an answer about another job set is refused naming both ids', async () => {
    emu.forceFaults('status', 'foreign_status');
    const refused = await soul.adapter.track(setA, {}, withBody(soulBody(7))).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(FollowMismatchError);
    expect((refused as FollowMismatchError).message).toBe(
      `The service answered about job set ${jobSetIdOf(setB)} when asked about job set ${jobSetIdOf(setA)}; the answer was not used.`,
    );
  });

  it('the same id with input_params that differ from the body sent is refused (a reused id, another job)', async () => {
    const refused = await soul.adapter.track(setA, {}, withBody(soulBody(9))).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(FollowMismatchError);
    expect((refused as FollowMismatchError).message).toBe(
      `The service's answer about job set ${jobSetIdOf(setA)} has input_params.prompt "A lighthouse 7" where "A lighthouse 9" was sent; the answer was not used.`,
    );
  });

  it('only plain members both hold are compared: defaults added, members left out and re-hosted images are not a mismatch', () => {
    const id = '33333333-3333-4333-8333-333333333333';
    const set = (input_params: Record<string, unknown>): JobSet => ({
      id,
      type: 'image2video',
      created_at: '2026-01-01T00:00:00Z',
      jobs: [],
      input_params,
    });
    const sent = {
      prompt: 'A boat',
      seed: 4,
      enhance_prompt: false,
      input_images: [{ type: 'image_url', image_url: 'https://mine.test/a.png' }],
    };
    const echoed = {
      prompt: 'A boat',
      seed: 4,
      quality: 'high',
      input_images: [{ type: 'image_url', image_url: 'https://service.test/copy/a.png' }],
    };
    expect(() => checkJobSetFollow(id, set(echoed), { type: 'image2video', sentParams: sent })).not.toThrow();
    expect(() => checkJobSetFollow(id, set({ ...echoed, seed: 5 }), { sentParams: sent })).toThrow(
      `The service's answer about job set ${id} has input_params.seed 5 where 4 was sent; the answer was not used.`,
    );
    // A plain member echoed as something else (an object) is another value.
    expect(() => checkJobSetFollow(id, set({ ...echoed, prompt: { text: 'A boat' } }), { sentParams: sent })).toThrow(FollowMismatchError);
  });

  it('a set of another model family is refused by its type (a DoP followed, a Soul set answered)', async () => {
    const refused = await dop.adapter.track(setA, {}, ctx).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(FollowMismatchError);
    expect((refused as FollowMismatchError).message).toBe(
      `The service's answer about job set ${jobSetIdOf(setA)} has type text2image_soul where image2video was expected; the answer was not used.`,
    );
  });
});
