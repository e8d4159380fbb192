import { describe, expect, it } from 'vitest';
import { FINAL_REQUEST_STATUSES, isFinalStatus, REQUEST_STATUSES, type RequestStatus } from '../../src/api/wire.js';
import { AUTHORIZATION, BASE, harness, PLATFORM, rejection, REQUEST_ID } from './helpers.js';

const status = (extra: Partial<RequestStatus> = {}): RequestStatus => ({
  status: 'completed',
  request_id: REQUEST_ID,
  status_url: `${PLATFORM}/requests/${REQUEST_ID}/status`,
  cancel_url: `${PLATFORM}/requests/${REQUEST_ID}/cancel`,
  images: [{ url: 'https://cdn.test/sheet.png' }],
  ...extra,
});

describe('§4.1 request status: GET {base_url}/requests/{request_id}/status', () => {
  it('sends GET with Authorization and parses RequestStatus', async () => {
    const { agent, client, calls } = harness();
    agent
      .get(BASE)
      .intercept({ path: `/requests/${REQUEST_ID}/status`, method: 'GET', headers: { authorization: AUTHORIZATION } })
      .reply(200, status());
    expect(await client.requests.status(REQUEST_ID)).toEqual(status());
    expect(calls()).toHaveLength(1);
    expect(calls()[0]?.body ?? null).toBeNull();
  });

  it('a failed request carries its error message', async () => {
    const { agent, client } = harness();
    agent
      .get(BASE)
      .intercept({ path: `/requests/${REQUEST_ID}/status` })
      .reply(200, { status: 'failed', request_id: REQUEST_ID, error: 'content policy' });
    expect(await client.requests.status(REQUEST_ID)).toMatchObject({ status: 'failed', error: 'content policy' });
  });

  it('MediaOutput has no additional properties: an extra member breaks the spec (a protocol error)', async () => {
    const { agent, client } = harness();
    agent
      .get(BASE)
      .intercept({ path: `/requests/${REQUEST_ID}/status` })
      .reply(200, status({ images: [{ url: 'https://cdn.test/a.png', width: 10 } as never] }));
    expect((await rejection(client.requests.status(REQUEST_ID))).code).toBe('protocol');
  });

  it('an unknown status value breaks the spec (a protocol error)', async () => {
    const { agent, client } = harness();
    agent
      .get(BASE)
      .intercept({ path: `/requests/${REQUEST_ID}/status` })
      .reply(200, { status: 'done', request_id: REQUEST_ID });
    expect((await rejection(client.requests.status(REQUEST_ID))).code).toBe('protocol');
  });

  it('the request id is a path segment: it is encoded', async () => {
    const { agent, client, calls } = harness();
    agent.get(BASE).intercept({ path: '/requests/a%2Fb/status' }).reply(404, { detail: 'nope' });
    expect((await rejection(client.requests.status('a/b'))).code).toBe('not_found');
    expect(calls()[0]?.path).toBe('/requests/a%2Fb/status');
  });
});

describe('§4.1 final statuses', () => {
  it('canceled, completed, failed and nsfw are final; queued and in_progress are not', () => {
    expect([...REQUEST_STATUSES].sort()).toEqual(['canceled', 'completed', 'failed', 'in_progress', 'nsfw', 'queued']);
    for (const s of ['canceled', 'completed', 'failed', 'nsfw'] as const) expect(isFinalStatus(s)).toBe(true);
    for (const s of ['queued', 'in_progress'] as const) expect(isFinalStatus(s)).toBe(false);
    expect(FINAL_REQUEST_STATUSES.size).toBe(4);
  });
});

describe('§4.1 cancel through cancel_url (POST; 202 while queued, 400 otherwise)', () => {
  it('POSTs to the cancel_url with Authorization; 202 -> true', async () => {
    const { agent, client, calls } = harness();
    agent
      .get(PLATFORM)
      .intercept({ path: `/requests/${REQUEST_ID}/cancel`, method: 'POST', headers: { authorization: AUTHORIZATION } })
      .reply(202, '');
    expect(await client.requests.cancel(`${PLATFORM}/requests/${REQUEST_ID}/cancel`)).toBe(true);
    expect(calls()).toHaveLength(1);
    expect(calls()[0]?.method).toBe('POST');
  });

  it('given a request id, POSTs to {platform_url}/requests/{id}/cancel', async () => {
    const { agent, client, calls } = harness();
    agent
      .get(PLATFORM)
      .intercept({ path: `/requests/${REQUEST_ID}/cancel`, method: 'POST' })
      .reply(202, { status: 'canceled' });
    expect(await client.requests.cancel(REQUEST_ID)).toBe(true);
    expect(calls()[0]?.origin).toBe(PLATFORM);
  });

  it('400 (past cancelling) -> false, not retried', async () => {
    const { agent, client, calls } = harness();
    agent
      .get(PLATFORM)
      .intercept({ path: `/requests/${REQUEST_ID}/cancel`, method: 'POST' })
      .reply(400, { detail: 'Request is already in progress' })
      .persist();
    expect(await client.requests.cancel(REQUEST_ID)).toBe(false);
    expect(calls()).toHaveLength(1);
  });

  it('other errors are raised (404 not_found)', async () => {
    const { agent, client } = harness();
    agent
      .get(PLATFORM)
      .intercept({ path: `/requests/${REQUEST_ID}/cancel`, method: 'POST' })
      .reply(404, { detail: 'Not found' });
    expect((await rejection(client.requests.cancel(REQUEST_ID))).code).toBe('not_found');
  });

  it('a cancel_url on another host is refused: credentials are not sent there (zero requests)', async () => {
    const { client, calls } = harness();
    const error = await rejection(client.requests.cancel(`https://evil.test/requests/${REQUEST_ID}/cancel`));
    expect(error.code).toBe('invalid_input');
    expect(calls()).toHaveLength(0);
  });
});
