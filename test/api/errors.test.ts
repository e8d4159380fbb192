import { describe, expect, it } from 'vitest';
import { errorFromStatus, GenpipeError, IndeterminateSubmissionError, InvalidInputError, isGenpipeError } from '../../src/api/errors.js';
import { BASE, harness, JSON_HEADERS, REQUEST_ID, rejection, SESSION_ID } from './helpers.js';

const statusPath = `/requests/${REQUEST_ID}/status`;
const messagesPath = `/v1/agent/sessions/${SESSION_ID}/messages`;

describe('errorFromStatus (§7), pure', () => {
  it.each([
    [400, 'bad_request'],
    [401, 'unauthorized'],
    [402, 'insufficient_credits'],
    [403, 'forbidden'],
    [404, 'not_found'],
    [408, 'request_timeout'],
    [409, 'conflict'],
    [422, 'unprocessable'],
    [429, 'rate_limited'],
    [500, 'server_error'],
    [502, 'backend_unavailable'],
    [503, 'server_error'],
    [418, 'http_error'],
  ] as const)('%i maps to %s, with status and detail set', (status, code) => {
    const error = errorFromStatus(status, 'something went wrong', { endpoint: 'other' });
    expect(error.code).toBe(code);
    expect(error.status).toBe(status);
    expect(error.detail).toBe('something went wrong');
    expect(error.message).toContain('something went wrong');
  });

  it('404 on the options catalog is "model hidden or unavailable" (model_unavailable); elsewhere not_found', () => {
    expect(errorFromStatus(404, undefined, { endpoint: 'options-catalog' }).code).toBe('model_unavailable');
    expect(errorFromStatus(404, undefined, { endpoint: 'options-catalog' }).message).toMatch(/hidden or unavailable/);
    expect(errorFromStatus(404, undefined, { endpoint: 'other' }).code).toBe('not_found');
  });

  it('403 whose detail names model access is model_access, one sentence naming the model (not the agent API)', () => {
    const error = errorFromStatus(403, 'no model access: this account may not use the character-sheet model', { endpoint: 'other' });
    expect(error.code).toBe('model_access');
    expect(error.status).toBe(403);
    expect(error.message).toBe('The account has no access to the character-sheet model (the service answered 403).');
    expect(error.message).not.toMatch(/agent API/);
    // A detail that does not name the model is quoted instead.
    const vague = errorFromStatus(403, 'Model access denied', { endpoint: 'other' });
    expect(vague.code).toBe('model_access');
    expect(vague.message).toMatch(
      /^The account has no access to the model it asked for \(the service answered 403: Model access denied\)\.$/,
    );
    // Any other 403 is still the agent API's.
    expect(errorFromStatus(403, 'Agent API is not enabled', { endpoint: 'other' }).code).toBe('forbidden');
    expect(errorFromStatus(403, undefined, { endpoint: 'other' }).code).toBe('forbidden');
  });

  it('409 on agent messages is session_busy; 409 elsewhere is conflict', () => {
    expect(errorFromStatus(409, 'busy', { endpoint: 'agent-messages' }).code).toBe('session_busy');
    expect(errorFromStatus(409, 'in flight', { endpoint: 'idempotent-submit' }).code).toBe('conflict');
  });

  it('422 naming the Idempotency-Key on a keyed submit is idempotency_mismatch; another 422 is unprocessable', () => {
    expect(errorFromStatus(422, 'Idempotency-Key reused with a different body', { endpoint: 'idempotent-submit' }).code).toBe(
      'idempotency_mismatch',
    );
    expect(errorFromStatus(422, 'seed out of range', { endpoint: 'idempotent-submit' }).code).toBe('unprocessable');
  });

  it('the message is one line even when detail spans several', () => {
    const error = errorFromStatus(400, 'line one\nline two', { endpoint: 'other' });
    expect(error.message).not.toContain('\n');
    expect(error.detail).toBe('line one\nline two');
  });

  it('all typed errors share the GenpipeError root', () => {
    const invalid = new InvalidInputError('thing', [{ path: 'seed', message: 'too big' }]);
    const indeterminate = new IndeterminateSubmissionError({
      method: 'POST',
      path: '/x',
      idempotencyKey: undefined,
      bodyHash: 'h',
      cause: undefined,
    });
    for (const error of [invalid, indeterminate, errorFromStatus(500, undefined, { endpoint: 'other' })]) {
      expect(error).toBeInstanceOf(GenpipeError);
      expect(isGenpipeError(error)).toBe(true);
    }
    expect(invalid.message).toBe('Invalid thing: seed: too big.');
    expect(isGenpipeError(new Error('x'))).toBe(false);
  });
});

describe('every status of §7 through the client', () => {
  it('401 (all authenticated endpoints): unauthorized, detail from ErrorResponse, status 401, not retried', async () => {
    const { agent, client, calls } = harness();
    agent.get(BASE).intercept({ path: statusPath }).reply(401, { detail: 'Invalid API key' }, { headers: JSON_HEADERS }).persist();
    const error = await rejection(client.requests.status(REQUEST_ID));
    expect(error).toMatchObject({ code: 'unauthorized', status: 401, detail: 'Invalid API key', requestId: REQUEST_ID });
    expect(calls()).toHaveLength(1);
  });

  it('402 (agent messages): insufficient_credits, not retried', async () => {
    const { agent, client, calls } = harness();
    agent
      .get(BASE)
      .intercept({ path: messagesPath, method: 'POST' })
      .reply(402, { detail: 'Insufficient credits for the reserve' })
      .persist();
    const error = await rejection(client.agent.sendMessage(SESSION_ID, 'hello'));
    expect(error).toMatchObject({ code: 'insufficient_credits', status: 402, detail: 'Insufficient credits for the reserve' });
    expect(calls()).toHaveLength(1);
  });

  it('403 (agent API not enabled): forbidden, not retried', async () => {
    const { agent, client, calls } = harness();
    agent.get(BASE).intercept({ path: '/v1/agent/sessions', method: 'POST' }).reply(403, { detail: 'Agent API is not enabled' }).persist();
    const error = await rejection(client.agent.createSession());
    expect(error).toMatchObject({ code: 'forbidden', status: 403, detail: 'Agent API is not enabled' });
    expect(calls()).toHaveLength(1);
  });

  it('404 (status): not_found, not retried', async () => {
    const { agent, client, calls } = harness();
    agent.get(BASE).intercept({ path: statusPath }).reply(404, { detail: 'Request not found' }).persist();
    const error = await rejection(client.requests.status(REQUEST_ID));
    expect(error).toMatchObject({ code: 'not_found', status: 404, detail: 'Request not found' });
    expect(calls()).toHaveLength(1);
  });

  it('404 (agent sessions): not_found', async () => {
    const { agent, client } = harness();
    agent.get(BASE).intercept({ path: messagesPath }).reply(404, { detail: 'Session not found' });
    expect(await rejection(client.agent.listMessages(SESSION_ID))).toMatchObject({
      code: 'not_found',
      status: 404,
      detail: 'Session not found',
    });
  });

  it('404 (character-sheet options): model_unavailable', async () => {
    const { agent, client, calls } = harness();
    agent.get(BASE).intercept({ path: '/models/vendor/ai-influencer/options' }).reply(404, { detail: 'Not Found' }).persist();
    const error = await rejection(client.options.fetch());
    expect(error).toMatchObject({ code: 'model_unavailable', status: 404, detail: 'Not Found' });
    expect(calls()).toHaveLength(1);
  });

  it('409 (agent messages): session_busy, not retried (the losing request is not charged)', async () => {
    const { agent, client, calls } = harness();
    agent.get(BASE).intercept({ path: messagesPath, method: 'POST' }).reply(409, { detail: 'session_busy' }).persist();
    const error = await rejection(client.agent.sendMessage(SESSION_ID, 'hello'));
    expect(error).toMatchObject({ code: 'session_busy', status: 409, detail: 'session_busy' });
    expect(calls()).toHaveLength(1);
  });

  it('502 (agent): refunded, so retried with backoff; then backend_unavailable when retries run out', async () => {
    const { agent, client, calls, config } = harness();
    agent.get(BASE).intercept({ path: messagesPath, method: 'POST' }).reply(502, { detail: 'Backend temporarily unavailable' }).persist();
    const error = await rejection(client.agent.sendMessage(SESSION_ID, 'hello'));
    expect(error).toMatchObject({ code: 'backend_unavailable', status: 502, detail: 'Backend temporarily unavailable' });
    expect(error).not.toBeInstanceOf(IndeterminateSubmissionError);
    expect(calls()).toHaveLength(config.retry.maxAttempts);
  });

  it('502 (agent) then 202: the retried message succeeds', async () => {
    const { agent, client, calls } = harness();
    const pool = agent.get(BASE);
    pool.intercept({ path: messagesPath, method: 'POST' }).reply(502, { detail: 'Backend temporarily unavailable' });
    pool.intercept({ path: messagesPath, method: 'POST' }).reply(202, { message_id: 'm-1', status: 'processing' });
    expect(await client.agent.sendMessage(SESSION_ID, 'hello')).toEqual({ message_id: 'm-1', status: 'processing' });
    expect(calls()).toHaveLength(2);
  });

  it.each([
    [400, 'bad_request'],
    [422, 'unprocessable'],
  ] as const)('%i on a GET: %s, never retried', async (status, code) => {
    const { agent, client, calls } = harness();
    agent.get(BASE).intercept({ path: statusPath }).reply(status, { detail: 'nope' }).persist();
    expect(await rejection(client.requests.status(REQUEST_ID))).toMatchObject({ code, status, detail: 'nope' });
    expect(calls()).toHaveLength(1);
  });

  it.each([
    [429, 'rate_limited'],
    [500, 'server_error'],
    [503, 'server_error'],
  ] as const)('%i on a GET: retried, then %s when retries run out', async (status, code) => {
    const { agent, client, calls, config } = harness();
    agent.get(BASE).intercept({ path: statusPath }).reply(status, { detail: 'try later' }).persist();
    expect(await rejection(client.requests.status(REQUEST_ID))).toMatchObject({ code, status, detail: 'try later' });
    expect(calls()).toHaveLength(config.retry.maxAttempts);
  });

  it('an error body that is not an ErrorResponse leaves detail undefined but still maps the status', async () => {
    const { agent, client } = harness();
    agent.get(BASE).intercept({ path: statusPath }).reply(404, '<html>gone</html>');
    const error = await rejection(client.requests.status(REQUEST_ID));
    expect(error.code).toBe('not_found');
    expect(error.detail).toBeUndefined();
  });
});
