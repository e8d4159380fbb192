import { describe, expect, it } from 'vitest';
import { AGENT_POLL, agentPollInterval, answerText, turnOutcome, type TurnPollOptions } from '../../src/api/agent.js';
import { InvalidInputError } from '../../src/api/errors.js';
import type { AgentMessage, MessagesResponse } from '../../src/api/wire.js';
import { AUTHORIZATION, BASE, harness, issuePaths, jsonBody, rejection, SESSION_ID } from './helpers.js';

const root = '/v1/agent';
const messagesPath = `${root}/sessions/${SESSION_ID}/messages`;
const TINY: TurnPollOptions = { initialMs: 1, maxMs: 3, factor: 1.5 };

const user = (id: string, status: AgentMessage['status'], extra: Partial<AgentMessage> = {}): AgentMessage => ({
  message_id: id,
  role: 'user',
  status,
  message: { type: 'text', text: 'Make a poster' },
  created_at: '2025-03-01T12:00:00.000Z',
  ...extra,
});
const assistant = (id: string, status: AgentMessage['status'], parts: { type: string; text?: string }[]): AgentMessage => ({
  message_id: id,
  role: 'assistant',
  status,
  message: { id, role: 'assistant', parts },
  created_at: '2025-03-01T12:00:01.123Z',
});

describe('§4.6 agent endpoints', () => {
  it('create session: POST /v1/agent/sessions with {config}, 201 -> session_id, status', async () => {
    const { agent, client, calls } = harness();
    agent
      .get(BASE)
      .intercept({ path: `${root}/sessions`, method: 'POST', headers: { authorization: AUTHORIZATION } })
      .reply(201, { session_id: SESSION_ID, status: 'idle' });
    expect(await client.agent.createSession({ model: 'x' })).toEqual({ session_id: SESSION_ID, status: 'idle' });
    expect(jsonBody(calls()[0])).toEqual({ config: { model: 'x' } });
  });

  it('create session: config fields are all optional (an empty config is sent)', async () => {
    const { agent, client, calls } = harness();
    agent
      .get(BASE)
      .intercept({ path: `${root}/sessions`, method: 'POST' })
      .reply(201, { session_id: SESSION_ID, status: 'idle' });
    await client.agent.createSession();
    expect(jsonBody(calls()[0])).toEqual({ config: {} });
  });

  it('send message: POST /sessions/{id}/messages with {content}, 202 -> message_id, status processing', async () => {
    const { agent, client, calls } = harness();
    agent
      .get(BASE)
      .intercept({ path: messagesPath, method: 'POST', headers: { authorization: AUTHORIZATION, 'content-type': 'application/json' } })
      .reply(202, { message_id: 'm-1', status: 'processing' });
    expect(await client.agent.sendMessage(SESSION_ID, 'Make a poster')).toEqual({ message_id: 'm-1', status: 'processing' });
    expect(jsonBody(calls()[0])).toEqual({ content: 'Make a poster' });
  });

  it('content is plain text of 1 to 20,000 characters — 1 and 20000 accepted', async () => {
    const { agent, client, calls } = harness();
    agent.get(BASE).intercept({ path: messagesPath, method: 'POST' }).reply(202, { message_id: 'm-1', status: 'processing' }).times(2);
    await client.agent.sendMessage(SESSION_ID, 'x');
    await client.agent.sendMessage(SESSION_ID, 'x'.repeat(20_000));
    expect(calls()).toHaveLength(2);
  });

  it('content counts characters as the spec does: 20,000 emoji are sent, 20,001 refused with zero requests', async () => {
    const { agent, client, calls } = harness();
    agent.get(BASE).intercept({ path: messagesPath, method: 'POST' }).reply(202, { message_id: 'm-1', status: 'processing' });
    await client.agent.sendMessage(SESSION_ID, '🦫'.repeat(20_000));
    expect(calls()).toHaveLength(1);
    const error = await rejection(client.agent.sendMessage(SESSION_ID, '🦫'.repeat(20_001)));
    expect(issuePaths(error as InvalidInputError)).toContain('content');
    expect(calls()).toHaveLength(1);
  });

  it('content is plain text of 1 to 20,000 characters — empty and 20001 refused with zero requests', async () => {
    const { client, calls } = harness();
    for (const content of ['', 'x'.repeat(20_001)]) {
      const error = await rejection(client.agent.sendMessage(SESSION_ID, content));
      expect(error).toBeInstanceOf(InvalidInputError);
      expect(error.code).toBe('invalid_input');
      expect(issuePaths(error as InvalidInputError)).toContain('content');
    }
    expect(calls()).toHaveLength(0);
  });

  it('list messages: GET /sessions/{id}/messages, and ?after=<message_id> when given', async () => {
    const { agent, client, calls } = harness();
    const pool = agent.get(BASE);
    const listing: MessagesResponse = { status: 'idle', messages: [user('m-1', 'completed')] };
    pool.intercept({ path: messagesPath, method: 'GET', headers: { authorization: AUTHORIZATION } }).reply(200, listing);
    pool.intercept({ path: messagesPath, method: 'GET', query: { after: 'm-0' } }).reply(200, listing);
    expect(await client.agent.listMessages(SESSION_ID)).toEqual(listing);
    expect(await client.agent.listMessages(SESSION_ID, { after: 'm-0' })).toEqual(listing);
    expect(calls().map((c) => c.searchParams)).toEqual([{}, { after: 'm-0' }]);
  });

  it('interrupt: POST /sessions/{id}/interrupt with no body, 202 -> session_id, status', async () => {
    const { agent, client, calls } = harness();
    agent
      .get(BASE)
      .intercept({ path: `${root}/sessions/${SESSION_ID}/interrupt`, method: 'POST', headers: { authorization: AUTHORIZATION } })
      .reply(202, { session_id: SESSION_ID, status: 'processing' });
    expect(await client.agent.interrupt(SESSION_ID)).toEqual({ session_id: SESSION_ID, status: 'processing' });
    expect(calls()[0]?.body ?? null).toBeNull();
  });

  it('a message with created_at lacking milliseconds breaks the spec (a protocol error)', async () => {
    const { agent, client } = harness();
    agent
      .get(BASE)
      .intercept({ path: messagesPath })
      .reply(200, { status: 'idle', messages: [{ ...user('m-1', 'completed'), created_at: '2025-03-01T12:00:00Z' }] });
    expect((await rejection(client.agent.listMessages(SESSION_ID))).code).toBe('protocol');
  });
});

describe('§4.6 rule 6: poll with backoff starting at 2 seconds, increasing gradually to 10 seconds', () => {
  const intervals = Array.from({ length: 12 }, (_, n) => agentPollInterval(n));

  it('starts at 2 s', () => {
    expect(intervals[0]).toBe(2_000);
    expect(AGENT_POLL.initialMs).toBe(2_000);
  });

  it('reaches 10 s and never exceeds it', () => {
    expect(Math.max(...intervals)).toBe(10_000);
    expect(intervals.at(-1)).toBe(10_000);
    expect(agentPollInterval(1_000)).toBe(10_000);
  });

  it('rises gradually: never decreasing, no step more than doubling, with intermediate values between 2 s and 10 s', () => {
    for (let n = 1; n < intervals.length; n++) {
      const previous = intervals[n - 1] ?? 0;
      const current = intervals[n] ?? 0;
      expect(current).toBeGreaterThanOrEqual(previous);
      expect(current).toBeLessThanOrEqual(previous * 2);
    }
    expect(intervals.filter((ms) => ms > 2_000 && ms < 10_000).length).toBeGreaterThanOrEqual(2);
  });
});

describe('turn waiter', () => {
  it('polls until the assistant message for the turn is terminal and returns the concatenated text parts', async () => {
    const { agent, client, calls } = harness();
    const pool = agent.get(BASE);
    const running: MessagesResponse = {
      status: 'processing',
      messages: [user('m-1', 'processing'), assistant('a-1', 'processing', [{ type: 'reasoning', text: 'thinking' }])],
    };
    const done: MessagesResponse = {
      status: 'idle',
      messages: [
        user('m-1', 'completed', { llm_cost_usd: 0.0123 }),
        assistant('a-1', 'completed', [
          { type: 'text', text: 'Here is ' },
          { type: 'tool_call' },
          { type: 'reasoning', text: 'ignored' },
          { type: 'text', text: 'your poster.' },
        ]),
      ],
    };
    pool
      .intercept({ path: messagesPath, query: { after: 'm-0' } })
      .reply(200, { status: 'processing', messages: [user('m-1', 'processing')] });
    pool.intercept({ path: messagesPath, query: { after: 'm-0' } }).reply(200, running);
    pool.intercept({ path: messagesPath, query: { after: 'm-0' } }).reply(200, done);
    const outcome = await client.agent.waitForTurn(SESSION_ID, 'm-1', { after: 'm-0', poll: TINY });
    expect(outcome).toMatchObject({ kind: 'completed', answer: 'Here is your poster.', llmCostUsd: 0.0123 });
    expect(calls()).toHaveLength(3);
  });

  it('without after, polls with after=<user message id>, then reads llm_cost_usd from the user message once', async () => {
    const { agent, client, calls } = harness();
    const answer = assistant('a-1', 'completed', [{ type: 'text', text: 'ok' }]);
    agent
      .get(BASE)
      .intercept({ path: messagesPath, query: { after: 'm-1' } })
      .reply(200, { status: 'idle', messages: [answer] });
    agent
      .get(BASE)
      .intercept({ path: messagesPath, method: 'GET' })
      .reply(200, { status: 'idle', messages: [{ ...user('m-1', 'completed'), llm_cost_usd: 0.0123 }, answer] });
    expect(await client.agent.waitForTurn(SESSION_ID, 'm-1', { poll: TINY })).toMatchObject({
      kind: 'completed',
      answer: 'ok',
      llmCostUsd: 0.0123,
    });
    expect(calls().map((c) => c.searchParams)).toEqual([{ after: 'm-1' }, {}]);
  });

  it('surfaces awaiting_input with the question text', async () => {
    const { agent, client } = harness();
    agent
      .get(BASE)
      .intercept({ path: messagesPath, query: { after: 'm-1' } })
      .reply(200, {
        status: 'awaiting_input',
        messages: [assistant('a-1', 'processing', [{ type: 'text', text: 'Which colour should the logo be?' }])],
      });
    const outcome = await client.agent.waitForTurn(SESSION_ID, 'm-1', { poll: TINY });
    expect(outcome.kind).toBe('awaiting_input');
    expect(outcome.kind === 'awaiting_input' ? outcome.question : undefined).toBe('Which colour should the logo be?');
  });

  it('a failed assistant message ends the turn as failed', async () => {
    const { agent, client } = harness();
    agent
      .get(BASE)
      .intercept({ path: messagesPath, query: { after: 'm-1' } })
      .reply(200, { status: 'idle', messages: [assistant('a-1', 'failed', [])] });
    agent
      .get(BASE)
      .intercept({ path: messagesPath, method: 'GET' })
      .reply(200, { status: 'idle', messages: [user('m-1', 'failed'), assistant('a-1', 'failed', [])] });
    expect((await client.agent.waitForTurn(SESSION_ID, 'm-1', { poll: TINY })).kind).toBe('failed');
  });

  it('gives up after maxPolls with code timeout', async () => {
    const { agent, client, calls } = harness();
    agent
      .get(BASE)
      .intercept({ path: messagesPath, query: { after: 'm-1' } })
      .reply(200, { status: 'processing', messages: [] })
      .persist();
    expect((await rejection(client.agent.waitForTurn(SESSION_ID, 'm-1', { poll: TINY, maxPolls: 3 }))).code).toBe('timeout');
    expect(calls()).toHaveLength(3);
  });

  it('an abort during the poll sleep rejects with code aborted', async () => {
    const { client, calls } = harness();
    const controller = new AbortController();
    const waiting = client.agent.waitForTurn(SESSION_ID, 'm-1', { signal: controller.signal }); // first sleep is 2 s
    controller.abort();
    expect((await rejection(waiting)).code).toBe('aborted');
    expect(calls()).toHaveLength(0);
  });
});

describe('turnOutcome and answerText (pure)', () => {
  it('a terminal assistant message in a session still processing is not the end yet', () => {
    expect(
      turnOutcome({ status: 'processing', messages: [assistant('a-1', 'completed', [{ type: 'text', text: 'x' }])] }, 'm-1'),
    ).toBeUndefined();
  });

  it('an idle session whose assistant message still processes is not the end yet', () => {
    expect(turnOutcome({ status: 'idle', messages: [assistant('a-1', 'processing', [])] }, 'm-1')).toBeUndefined();
  });

  it('an assistant message before the user message belongs to an earlier turn', () => {
    const listing: MessagesResponse = {
      status: 'idle',
      messages: [assistant('a-0', 'completed', [{ type: 'text', text: 'old' }]), user('m-1', 'processing')],
    };
    expect(turnOutcome(listing, 'm-1')).toBeUndefined();
  });

  it('answerText reads a user message text too', () => {
    expect(answerText(user('m-1', 'completed'))).toBe('Make a poster');
  });
});
