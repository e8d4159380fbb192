/** §3.2: one test per row of the agent state table, plus `after`, created_at and the scripted agent. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentMessage } from '../../src/api/wire.js';
import { CLARIFYING_QUESTION, planReply, planTurn } from '../../src/emulator/scripted-agent.js';
import type { Emulator } from '../../src/emulator/start-emulator.js';
import { AUTH, http, netCents, start, until } from './helpers.js';

let emu: Emulator;
beforeAll(async () => {
  // Steps of 1.5 s at scale 0.001 take 1.5 ms: fast, yet turns are visibly asynchronous.
  emu = await start({ timeScale: 0.001 });
});
afterAll(() => emu.close());

async function session(target: Emulator = emu): Promise<string> {
  const res = await http(target, 'POST', '/v1/agent/sessions', { headers: AUTH, json: { config: {} } });
  expect(res.status).toBe(201);
  return res.json.session_id;
}
const send = (id: string, content: string, target: Emulator = emu) =>
  http(target, 'POST', `/v1/agent/sessions/${id}/messages`, { headers: AUTH, json: { content } });
const list = (id: string, after?: string, target: Emulator = emu) =>
  http(target, 'GET', `/v1/agent/sessions/${id}/messages${after ? `?after=${after}` : ''}`, { headers: AUTH });
const interrupt = (id: string, target: Emulator = emu) => http(target, 'POST', `/v1/agent/sessions/${id}/interrupt`, { headers: AUTH });
const waitStatus = (id: string, status: string, target: Emulator = emu) =>
  until(async () => {
    const l = await list(id, undefined, target);
    return l.json.status === status ? l.json : undefined;
  });

describe('§3.2 state table', () => {
  it('idle + POST messages → processing; a reserve is placed', async () => {
    const id = await session();
    const res = await send(id, 'hello #hold');
    expect(res.status).toBe(202);
    expect(res.json.status).toBe('processing');
    expect((await list(id)).json.status).toBe('processing');
    const reserve = emu.ledger.entries.find((e) => e.message_id === res.json.message_id && e.kind === 'reserve');
    expect(reserve?.credits).toBe(50);
    await interrupt(id);
  });

  it('processing + POST messages → 409 session_busy, no charge', async () => {
    const id = await session();
    await send(id, 'busy #hold');
    const entries = emu.ledger.entries.length;
    const res = await send(id, 'me too');
    expect(res.status).toBe(409);
    expect(res.json.detail).toContain('session_busy');
    expect(emu.ledger.entries.length).toBe(entries);
    expect((await list(id)).json.messages.filter((m: any) => m.role === 'user')).toHaveLength(1);
    await interrupt(id);
  });

  it('processing + agent needs a decision → awaiting_input; the assistant message holds the question', async () => {
    const id = await session();
    await send(id, 'create something for me');
    const parked = await waitStatus(id, 'awaiting_input');
    const last = parked.messages[parked.messages.length - 1];
    expect(last.role).toBe('assistant');
    expect(last.message.parts.at(-1).text).toBe(CLARIFYING_QUESTION);
  });

  it('awaiting_input + reply → processing, resuming the same turn (no second reserve)', async () => {
    // The resumed turn's generation runs 2 s of real time, so the session is still busy when it is
    // listed even on a loaded machine (at the shared emulator's speed the whole turn could end first).
    const local = await start({ timeScale: 0.001, durations: { 'marketing-image': { runMs: [2_000_000, 2_000_000], queuedMs: [1, 1] } } });
    try {
      const id = await session(local);
      const first = await send(id, 'please draw it', local);
      await waitStatus(id, 'awaiting_input', local);
      const reply = await send(id, 'a marketing image', local);
      expect(reply.status).toBe(202);
      expect((await list(id, undefined, local)).json.status).toBe('processing');
      const done = await waitStatus(id, 'idle', local);
      expect(
        local.ledger.entries.filter(
          (e) => e.kind === 'reserve' && (e.message_id === first.json.message_id || e.message_id === reply.json.message_id),
        ),
      ).toHaveLength(1);
      const answer = done.messages[done.messages.length - 1];
      expect(answer.status).toBe('completed');
      expect(answer.message.parts.some((p: any) => p.type === 'tool_call' && p.name === 'marketing-image')).toBe(true);
    } finally {
      await local.close();
    }
  });

  it('an injected 502 on a reply is applied: 502, the session stays parked, nothing sent on, nothing charged', async () => {
    const id = await session();
    await send(id, 'please draw it');
    await waitStatus(id, 'awaiting_input');
    const before = (await list(id)).json.messages.length;
    const entries = emu.ledger.entries.length;
    const generations = emu.requests.byId.size;
    emu.forceFaults('agent', 'error_502');
    const reply = await send(id, 'a character sheet');
    expect(reply.status).toBe(502);
    expect(emu.faults.injected['agent.error_502']).toBeGreaterThan(0);
    const after = (await list(id)).json;
    expect(after.status).toBe('awaiting_input');
    expect(after.messages).toHaveLength(before);
    expect(emu.ledger.entries.length).toBe(entries);
    expect(emu.requests.byId.size).toBe(generations);
    // The same reply once the backend is back resumes the turn as usual.
    expect((await send(id, 'a character sheet')).status).toBe(202);
    await waitStatus(id, 'idle');
  });

  it('an injected 502 on a busy session or a refused message is answered 502, with nothing charged', async () => {
    const id = await session();
    await send(id, 'busy #hold');
    const entries = emu.ledger.entries.length;
    emu.forceFaults('agent', 'error_502');
    expect((await send(id, 'me too')).status).toBe(502);
    emu.forceFaults('agent', 'error_502');
    expect((await send(id, '')).status).toBe(502);
    expect(emu.ledger.entries.length).toBe(entries);
    expect((await list(id)).json.messages.filter((m: any) => m.role === 'user')).toHaveLength(1);
    await interrupt(id);
  });

  it('processing or awaiting_input + interrupt → processing, then idle; the turn settles normally', async () => {
    const id = await session();
    const m = await send(id, 'long job #hold');
    const res = await interrupt(id);
    expect(res.status).toBe(202);
    expect(res.json.status).toBe('processing');
    const done = await waitStatus(id, 'idle');
    expect(done.messages.at(-1).status).toBe('completed');
    expect(done.messages.at(-1).message.parts.at(-1).text).toMatch(/interrupted/);
    expect(netCents(emu, { messageId: m.json.message_id })).toBeGreaterThan(0);
    expect(netCents(emu, { messageId: m.json.message_id })).toBeLessThan(50);

    const parkedId = await session();
    await send(parkedId, 'make a thing');
    await waitStatus(parkedId, 'awaiting_input');
    expect((await interrupt(parkedId)).json.status).toBe('processing');
    expect((await waitStatus(parkedId, 'idle')).messages.at(-1).status).toBe('completed');
  });

  it('interrupt does not undo a finished generation', async () => {
    const local = await start({ timeScale: 0.001, durations: { 'character-sheet': { runMs: [1, 1], queuedMs: [1, 1] } } });
    const id = await session(local);
    await send(id, 'create a character sheet of cats', local);
    const gen = await until(() => [...local.requests.byId.values()][0]);
    await until(() => (local.requests.statusOf(gen) === 'completed' ? true : undefined));
    await interrupt(id, local);
    await waitStatus(id, 'idle', local);
    expect(local.requests.statusOf(gen)).toBe('completed');
    expect(netCents(local, { requestId: gen.id })).toBe(5);
    await local.close();
  });

  it('processing + turn completes → idle; reserve reconciled and the difference refunded', async () => {
    const id = await session();
    const m = await send(id, 'just a question about pricing');
    const done = await waitStatus(id, 'idle');
    const user = done.messages.find((x: any) => x.message_id === m.json.message_id);
    expect(user.status).toBe('completed');
    expect(done.messages.at(-1).status).toBe('completed');
    const refund = emu.ledger.entries.find((e) => e.message_id === m.json.message_id && e.kind === 'refund');
    expect(refund).toBeDefined();
    expect(netCents(emu, { messageId: m.json.message_id }) / 100).toBeCloseTo(user.llm_cost_usd, 10);
  });

  it('processing + turn errors → idle; assistant failed, reserve refunded in full', async () => {
    const id = await session();
    const m = await send(id, 'break please #fail');
    const done = await waitStatus(id, 'idle');
    expect(done.messages.at(-1).status).toBe('failed');
    expect(done.messages.find((x: any) => x.message_id === m.json.message_id).status).toBe('failed');
    expect(netCents(emu, { messageId: m.json.message_id })).toBe(0);
  });
});

describe('agent messages listing', () => {
  it('after returns only later messages; created_at is ISO 8601 UTC with milliseconds', async () => {
    const id = await session();
    const m1 = await send(id, 'one');
    await waitStatus(id, 'idle');
    const m2 = await send(id, 'two');
    await waitStatus(id, 'idle');
    const all = (await list(id)).json.messages;
    expect(all).toHaveLength(4);
    for (const m of all) {
      expect(AgentMessage.safeParse(m).success).toBe(true);
      expect(m.created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    }
    const after = (await list(id, m1.json.message_id)).json.messages;
    expect(after.map((m: any) => m.message_id)).toEqual(all.slice(1).map((m: any) => m.message_id));
    expect((await list(id, m2.json.message_id)).json.messages).toHaveLength(1);
    expect((await list(id, 'msg_unknown')).status).toBe(400);
  });

  it('refuses empty and over-long content with 422 and no reserve', async () => {
    const id = await session();
    const entries = emu.ledger.entries.length;
    expect((await send(id, '')).status).toBe(422);
    expect((await send(id, 'x'.repeat(20_001))).status).toBe(422);
    expect(emu.ledger.entries.length).toBe(entries);
  });
});

describe('scripted agent', () => {
  it('plans deterministically from the text', () => {
    expect(planTurn('hello').kind).toBe('answer');
    expect(planTurn('please create something')).toEqual({ kind: 'ask', question: CLARIFYING_QUESTION });
    expect(planTurn('Create a character sheet of dogs')).toMatchObject({ kind: 'generate', model: 'character-sheet', tier: 'dogs' });
    expect(planTurn('make an ad for shoes')).toMatchObject({ kind: 'generate', model: 'marketing-image' });
    expect(planTurn('x #fail').kind).toBe('fail');
    expect(planTurn('x #hold').kind).toBe('hold');
    expect(planReply('draw it', 'whatever')).toMatchObject({ kind: 'generate', model: 'character-sheet' });
  });

  it('runs a billed generation and answers with text plus other part types', async () => {
    const id = await session();
    const m = await send(id, 'create a character sheet of frogs');
    const done = await waitStatus(id, 'idle');
    const parts = done.messages.at(-1).message.parts;
    expect(parts.map((p: any) => p.type)).toEqual(['reasoning', 'tool_call', 'tool_result', 'image', 'text']);
    const requestId = parts[1].request_id;
    expect(emu.requests.get(requestId)?.details.tier).toBe('frogs');
    expect(netCents(emu, { requestId })).toBe(5);
    expect(netCents(emu, { messageId: m.json.message_id })).toBeLessThan(50);
  });

  it('a failed generation is refunded and the turn still completes', async () => {
    const id = await session();
    await send(id, 'create a character sheet [emulator:fail]');
    const done = await waitStatus(id, 'idle');
    const requestId = done.messages.at(-1).message.parts[1].request_id;
    expect(done.messages.at(-1).status).toBe('completed');
    expect(emu.requests.statusOf(emu.requests.get(requestId)!)).toBe('failed');
    expect(netCents(emu, { requestId })).toBe(0);
  });

  it('sessions are durable: later turns cost more as the memory grows', async () => {
    const id = await session();
    const a = await send(id, 'x'.repeat(4_000));
    await waitStatus(id, 'idle');
    const b = await send(id, 'short');
    const done = await waitStatus(id, 'idle');
    const cost = (mid: string) => done.messages.find((m: any) => m.message_id === mid).llm_cost_usd;
    expect(cost(b.json.message_id)).toBeGreaterThan(0);
    expect(cost(b.json.message_id)).toBeGreaterThanOrEqual(cost(a.json.message_id));
  });
});
