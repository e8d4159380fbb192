/**
 * One table of every endpoint of the client: method, address, path and which of the §5 auth
 * surfaces it uses. Per-endpoint bodies are checked in the module tests next to this file.
 */
import { describe, expect, it } from 'vitest';
import type { GenerationClient } from '../../src/api/client.js';
import {
  AUTHORIZATION,
  BASE,
  harness,
  header,
  JOB_ID,
  JOB_SET_ID,
  KEY_ID,
  KEY_SECRET,
  PLATFORM,
  REQUEST_ID,
  SESSION_ID,
  submitted,
  UPLOADS,
} from './helpers.js';

const jobSet = {
  id: JOB_SET_ID,
  type: 'image2video',
  created_at: '2025-03-01T12:00:00Z',
  jobs: [{ id: JOB_ID, job_set_type: 'image2video', status: 'queued' }],
  input_params: {},
};
const media = {
  id: 'm.png',
  type: 'image',
  content_type: 'image/png',
  upload_url: `${UPLOADS}/u/m.png`,
  url: 'https://cdn.gen.test/m.png',
};
const catalog = { config_revision: 1, categories: [] };

interface Row {
  name: string;
  method: 'GET' | 'POST' | 'PUT';
  origin: string;
  path: string;
  auth: 'key' | 'legacy' | 'none';
  status: number;
  reply: object | string;
  call: (c: GenerationClient) => Promise<unknown>;
}

const ROWS: Row[] = [
  {
    name: '§4.1 request status',
    method: 'GET',
    origin: BASE,
    path: `/requests/${REQUEST_ID}/status`,
    auth: 'key',
    status: 200,
    reply: { status: 'queued', request_id: REQUEST_ID },
    call: (c) => c.requests.status(REQUEST_ID),
  },
  {
    name: '§4.1 cancel',
    method: 'POST',
    origin: PLATFORM,
    path: `/requests/${REQUEST_ID}/cancel`,
    auth: 'key',
    status: 202,
    reply: '',
    call: (c) => c.requests.cancel(REQUEST_ID),
  },
  {
    name: '§4.2 character sheet',
    method: 'POST',
    origin: BASE,
    path: '/vendor/ai-influencer',
    auth: 'key',
    status: 200,
    reply: submitted(),
    call: (c) => c.characterSheet.submit({}),
  },
  {
    name: '§4.3 options catalog',
    method: 'GET',
    origin: BASE,
    path: '/models/vendor/ai-influencer/options',
    auth: 'none',
    status: 200,
    reply: catalog,
    call: (c) => c.options.fetch(),
  },
  {
    name: '§4.4 marketing image',
    method: 'POST',
    origin: BASE,
    path: '/marketing-studio/image/sunburst',
    auth: 'key',
    status: 200,
    reply: submitted(),
    call: (c) => c.marketingImage.submit({ prompt: 'x' }),
  },
  {
    name: '§4.5 presets',
    method: 'GET',
    origin: BASE,
    path: '/marketing-studio/image/presets',
    auth: 'key',
    status: 200,
    reply: { total: 0, cursor: null, items: [] },
    call: (c) => c.marketingImage.presetPage(),
  },
  {
    name: '§4.6 create session',
    method: 'POST',
    origin: BASE,
    path: '/v1/agent/sessions',
    auth: 'key',
    status: 201,
    reply: { session_id: SESSION_ID, status: 'idle' },
    call: (c) => c.agent.createSession(),
  },
  {
    name: '§4.6 send message',
    method: 'POST',
    origin: BASE,
    path: `/v1/agent/sessions/${SESSION_ID}/messages`,
    auth: 'key',
    status: 202,
    reply: { message_id: 'm1', status: 'processing' },
    call: (c) => c.agent.sendMessage(SESSION_ID, 'hi'),
  },
  {
    name: '§4.6 list messages',
    method: 'GET',
    origin: BASE,
    path: `/v1/agent/sessions/${SESSION_ID}/messages`,
    auth: 'key',
    status: 200,
    reply: { status: 'idle', messages: [] },
    call: (c) => c.agent.listMessages(SESSION_ID),
  },
  {
    name: '§4.6 interrupt',
    method: 'POST',
    origin: BASE,
    path: `/v1/agent/sessions/${SESSION_ID}/interrupt`,
    auth: 'key',
    status: 202,
    reply: { session_id: SESSION_ID, status: 'idle' },
    call: (c) => c.agent.interrupt(SESSION_ID),
  },
  {
    name: '§4.6 media create',
    method: 'POST',
    origin: BASE,
    path: '/v1/agent/media',
    auth: 'key',
    status: 201,
    reply: media,
    call: (c) => c.media.create('png', 'image'),
  },
  {
    name: '§4.6 media PUT',
    method: 'PUT',
    origin: UPLOADS,
    path: '/u/m.png',
    auth: 'none',
    status: 200,
    reply: '',
    call: (c) => c.media.put({ ...media, type: 'image' }, new Uint8Array([1])),
  },
  {
    name: '§4.6 media confirm',
    method: 'POST',
    origin: BASE,
    path: '/v1/agent/media/m.png/confirm',
    auth: 'key',
    status: 200,
    reply: { status: 'uploaded' },
    call: (c) => c.media.confirm({ id: 'm.png', type: 'image' }),
  },
  {
    name: '§4.7 DoP',
    method: 'POST',
    origin: PLATFORM,
    path: '/v1/image2video/dop',
    auth: 'legacy',
    status: 200,
    reply: jobSet,
    call: (c) => c.legacy.dop({}),
  },
  {
    name: '§4.7 Soul',
    method: 'POST',
    origin: PLATFORM,
    path: '/v1/text2image/soul',
    auth: 'legacy',
    status: 200,
    reply: jobSet,
    call: (c) => c.legacy.soul({}),
  },
  {
    name: '§4.7 Speak',
    method: 'POST',
    origin: PLATFORM,
    path: '/v1/speak/vendor',
    auth: 'legacy',
    status: 200,
    reply: jobSet,
    call: (c) => c.legacy.speak({}),
  },
  {
    name: 'job-set status (beyond the spec)',
    method: 'GET',
    origin: PLATFORM,
    path: `/v1/job-sets/${JOB_SET_ID}`,
    auth: 'legacy',
    status: 200,
    reply: jobSet,
    call: (c) => c.legacy.jobSet(JOB_SET_ID),
  },
  {
    name: '§4.8 Soul standard',
    method: 'POST',
    origin: PLATFORM,
    path: '/vendor-ai/soul/standard',
    auth: 'key',
    status: 200,
    reply: submitted(),
    call: (c) => c.soulStandard.submit({ prompt: 'p', aspect_ratio: '1:1', resolution: '720p' }),
  },
];

describe('every endpoint: method, address, path and auth surface (§5)', () => {
  it.each(ROWS)('$name: $method $origin$path with auth $auth', async (row) => {
    const { agent, client, calls } = harness();
    agent
      .get(row.origin)
      .intercept({ path: (p) => p.split('?')[0] === row.path, method: row.method })
      .reply(row.status, row.reply);
    await row.call(client);
    expect(calls()).toHaveLength(1);
    const call = calls()[0];
    expect(call?.method).toBe(row.method);
    expect(call?.origin).toBe(row.origin);
    expect(call?.path).toBe(row.path);
    const expected = {
      authorization: row.auth === 'key' ? AUTHORIZATION : undefined,
      'hf-api-key': row.auth === 'legacy' ? KEY_ID : undefined,
      'hf-secret': row.auth === 'legacy' ? KEY_SECRET : undefined,
    };
    expect({
      authorization: header(call, 'authorization'),
      'hf-api-key': header(call, 'hf-api-key'),
      'hf-secret': header(call, 'hf-secret'),
    }).toEqual(expected);
  });

  it('the table covers every endpoint module of the client', () => {
    const { client } = harness();
    const covered = new Set(ROWS.map((r) => r.call.toString().match(/c\.(\w+)\./)?.[1]));
    for (const api of ['requests', 'characterSheet', 'options', 'marketingImage', 'agent', 'media', 'legacy', 'soulStandard'] as const) {
      expect(client[api]).toBeDefined();
      expect(covered.has(api)).toBe(true);
    }
  });
});
