/**
 * Contract tests: the foundation's GenerationClient against the emulator on port 0, for every
 * endpoint of the spec and every status code of §7.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GenpipeError } from '../../src/api/errors.js';
import { JobSet, OptionsCatalog, RequestStatus } from '../../src/api/wire.js';
import { answerText } from '../../src/api/agent.js';
import { drawArt } from '../../src/emulator/png.js';
import type { Emulator } from '../../src/emulator/start-emulator.js';
import { clientFor, http, start, until } from '../emulator/helpers.js';
import type { GenerationClient } from '../../src/api/client.js';

const OTHER = '11111111-1111-4111-8111-111111111111';
const POOR = '22222222-2222-4222-8222-222222222222';
const NO_AGENT = '33333333-3333-4333-8333-333333333333';

let emu: Emulator;
let client: GenerationClient;

beforeAll(async () => {
  emu = await start({
    accounts: [
      { keyId: '00000000-0000-4000-8000-000000000000', secret: 'emulator-secret', credits: 1_000_000, agentEnabled: true },
      { keyId: OTHER, secret: 'other-secret', credits: 1_000, agentEnabled: true },
      { keyId: POOR, secret: 'poor-secret', credits: 10, agentEnabled: true },
      { keyId: NO_AGENT, secret: 'no-agent-secret', credits: 1_000, agentEnabled: false },
    ],
  });
  client = clientFor(emu);
});
afterAll(async () => {
  await client.close();
  await emu.close();
});

async function code(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return 'resolved';
  } catch (error) {
    if (error instanceof GenpipeError) return `${error.code}:${error.status ?? ''}`;
    throw error;
  }
}

async function finalStatus(c: GenerationClient, id: string): Promise<RequestStatus> {
  return until(async () => {
    const s = await c.requests.status(id);
    return ['completed', 'failed', 'nsfw', 'canceled'].includes(s.status) ? s : undefined;
  });
}

describe('contract: requests and character sheet', () => {
  it('submits a character sheet and polls it to completed, with a 16:9 PNG at images[0].url', async () => {
    const submitted = await client.characterSheet.submit({ tier: 'cats', seed: 7, variation_index: 2 }, { idempotencyKey: 'contract-1' });
    expect(submitted.status).toBe('queued');
    expect(submitted.status_url).toBe(`${emu.url}/requests/${submitted.request_id}/status`);
    expect(submitted.cancel_url).toBe(`${emu.url}/requests/${submitted.request_id}/cancel`);
    const done = await finalStatus(client, submitted.request_id);
    expect(done.status).toBe('completed');
    const png = await http(emu, 'GET', new URL(done.images![0]!.url).pathname);
    expect(png.headers['content-type']).toBe('image/png');
    expect(png.bytes.readUInt32BE(16) * 9).toBe(png.bytes.readUInt32BE(20) * 16);
  });

  it('401 on status without valid credentials', async () => {
    const bad = clientFor(emu, '00000000-0000-4000-8000-000000000000:wrong-secret');
    const r = await client.characterSheet.submit({});
    expect(await code(bad.requests.status(r.request_id))).toBe('unauthorized:401');
    await bad.close();
  });

  it("404 for a missing request and for another account's request", async () => {
    expect(await code(client.requests.status('9b2e1c1e-0000-4000-8000-000000000001'))).toBe('not_found:404');
    const other = clientFor(emu, `${OTHER}:other-secret`);
    const mine = await client.characterSheet.submit({});
    expect(await code(other.requests.status(mine.request_id))).toBe('not_found:404');
    await other.close();
  });

  it('cancel: 202 (true) while queued, 400 (false) once final', async () => {
    const slow = await start({ timeScale: 1, durations: { 'character-sheet': { queuedMs: [3_600_000, 3_600_000] } } });
    const c = clientFor(slow);
    const r = await c.characterSheet.submit({});
    expect(await c.requests.cancel(r.request_id)).toBe(true);
    expect((await c.requests.status(r.request_id)).status).toBe('canceled');
    await c.close();
    await slow.close();
    const done = await client.characterSheet.submit({});
    await finalStatus(client, done.request_id);
    expect(await client.requests.cancel(done.cancel_url!)).toBe(false);
  });

  it('422 idempotency_mismatch and 409 conflict come back typed', async () => {
    await client.characterSheet.submit({ brief: 'a' }, { idempotencyKey: 'contract-idem' });
    expect(await code(client.characterSheet.submit({ brief: 'b' }, { idempotencyKey: 'contract-idem' }))).toBe('idempotency_mismatch:422');
    const release = emu.holdSubmits();
    const first = client.characterSheet.submit({ brief: 'held' }, { idempotencyKey: 'contract-held' });
    await until(() => (emu.stats.inFlight >= 1 ? true : undefined));
    const noRetry = clientFor(emu);
    (noRetry.config.retry as { maxAttempts: number }).maxAttempts = 1;
    expect(await code(noRetry.characterSheet.submit({ brief: 'held' }, { idempotencyKey: 'contract-held' }))).toBe('conflict:409');
    release();
    expect((await first).request_id).toMatch(/^[0-9a-f-]{36}$/);
    await noRetry.close();
  });
});

describe('contract: options catalog', () => {
  it('fetches the catalog without auth, and gets model_unavailable (404) while hidden', async () => {
    const catalog = await client.options.fetch();
    expect(OptionsCatalog.safeParse(catalog).success).toBe(true);
    expect(catalog.categories.length).toBeGreaterThanOrEqual(12);
    emu.hideOptionsModel(true);
    expect(await code(client.options.fetch())).toBe('model_unavailable:404');
    emu.hideOptionsModel(false);
  });

  it('the catalog cache sees a bumped config_revision', async () => {
    await client.catalog.refresh();
    emu.bumpConfigRevision();
    expect((await client.catalog.refresh()).changed).toBe(true);
  });
});

describe('contract: marketing image and presets', () => {
  it('lists every visible preset across pages and submits an enhanced request', async () => {
    const presets = [];
    for await (const p of client.marketingImage.presets({ pageSize: 7 })) presets.push(p);
    expect(presets.length).toBe(emu.presets.visible().length);
    const r = await client.marketingImage.submit({
      prompt: 'a bottle',
      enhance_prompt: true,
      preset_id: presets[0]!.id,
      image_urls: ['https://example.com/p.png'],
    });
    expect((await finalStatus(client, r.request_id)).status).toBe('completed');
  });
});

describe('contract: agent', () => {
  it('session, message, poll to completed with a text answer and llm_cost_usd', async () => {
    const s = await client.agent.createSession();
    const m = await client.agent.sendMessage(s.session_id, 'hello there');
    const outcome = await client.agent.waitForTurn(s.session_id, m.message_id, { poll: { initialMs: 1, maxMs: 5, factor: 1.5 } });
    expect(outcome.kind).toBe('completed');
    if (outcome.kind === 'completed') {
      expect(outcome.answer).toContain('hello there');
    }
    // waitForTurn lists after the user message, so the cost is read from the full listing.
    const listing = await client.agent.listMessages(s.session_id);
    const user = listing.messages.find((x) => x.message_id === m.message_id);
    expect(user?.llm_cost_usd).toBeGreaterThan(0);
    expect(user?.status).toBe('completed');
  });

  it('409 session_busy while a turn runs', async () => {
    const s = await client.agent.createSession();
    await client.agent.sendMessage(s.session_id, 'keep going #hold');
    expect(await code(client.agent.sendMessage(s.session_id, 'again'))).toBe('session_busy:409');
    await client.agent.interrupt(s.session_id);
  });

  it('402 when the balance cannot cover the reserve', async () => {
    const poor = clientFor(emu, `${POOR}:poor-secret`);
    const s = await poor.agent.createSession();
    expect(await code(poor.agent.sendMessage(s.session_id, 'hello'))).toBe('insufficient_credits:402');
    await poor.close();
  });

  it('403 when the agent API is not enabled for the account', async () => {
    const c = clientFor(emu, `${NO_AGENT}:no-agent-secret`);
    expect(await code(c.agent.createSession())).toBe('forbidden:403');
    await c.close();
  });

  it("404 for another account's session", async () => {
    const s = await client.agent.createSession();
    const other = clientFor(emu, `${OTHER}:other-secret`);
    expect(await code(other.agent.listMessages(s.session_id))).toBe('not_found:404');
    await other.close();
  });

  it('502 is refunded and retried by the client until it succeeds', async () => {
    const s = await client.agent.createSession();
    emu.forceFaults('agent', 'error_502', 'error_502');
    const m = await client.agent.sendMessage(s.session_id, 'after two 502s');
    expect(m.status).toBe('processing');
    const refunds = emu.ledger.entries.filter((e) => e.reason.includes('502'));
    expect(refunds).toHaveLength(2);
    const noRetry = clientFor(emu);
    (noRetry.config.retry as { maxAttempts: number }).maxAttempts = 1;
    const s2 = await noRetry.agent.createSession();
    emu.forceFaults('agent', 'error_502');
    expect(await code(noRetry.agent.sendMessage(s2.session_id, 'x'))).toBe('backend_unavailable:502');
    await noRetry.close();
  });

  it('asks a clarifying question for an ambiguous request and resumes on the reply', async () => {
    const s = await client.agent.createSession();
    const m = await client.agent.sendMessage(s.session_id, 'please create something nice');
    const poll = { initialMs: 1, maxMs: 5, factor: 1.5 };
    const asked = await client.agent.waitForTurn(s.session_id, m.message_id, { poll });
    expect(asked.kind).toBe('awaiting_input');
    const reply = await client.agent.sendMessage(s.session_id, 'character please');
    const done = await client.agent.waitForTurn(s.session_id, reply.message_id, { poll });
    expect(done.kind).toBe('completed');
    expect(answerText(done.message)).toMatch(/character sheet: http/);
  });

  it('uploads media, confirms it and reads it back from the CDN url', async () => {
    // A PNG that decodes: image media that does not is not_ready at confirm.
    const bytes = drawArt({ width: 16, height: 9, seedText: 'contract upload', layout: 'render' });
    const record = await client.media.create('png', 'image');
    expect(await client.media.confirm(record)).toBe('not_ready');
    await client.media.put(record, bytes);
    expect(await client.media.confirm(record)).toBe('uploaded');
    const got = await http(emu, 'GET', new URL(record.url).pathname);
    expect(got.bytes.equals(bytes)).toBe(true);
  });
});

describe('contract: legacy platform and soul standard', () => {
  it('DoP, Soul and Speak job sets progress, and GET /v1/job-sets/{id} follows them', async () => {
    const sets = [
      await client.legacy.dop({ prompt: 'wave' }),
      await client.legacy.soul({ prompt: 'cat', batch_size: 2 }),
      await client.legacy.speak({ prompt: 'hi' }),
    ];
    expect(sets.map((s) => s.jobs.length)).toEqual([1, 2, 1]);
    for (const set of sets) {
      const done = await until(async () => {
        const s = await client.legacy.jobSet(set.id);
        return s.jobs.every((j) => j.status === 'completed') ? s : undefined;
      });
      expect(JobSet.safeParse(done).success).toBe(true);
      expect(done.jobs[0]!.results!.raw.url).toMatch(/^http/);
    }
  });

  it('legacy endpoints answer 401 without hf-secret', async () => {
    const bad = clientFor(emu, '00000000-0000-4000-8000-000000000000:nope');
    expect(await code(bad.legacy.soul({ prompt: 'x' }))).toBe('unauthorized:401');
    await bad.close();
  });

  it('soul standard submits and completes', async () => {
    const r = await client.soulStandard.submit({ prompt: 'p', aspect_ratio: '1:1', resolution: '1k' });
    expect((await finalStatus(client, r.request_id)).images).toHaveLength(1);
  });
});
