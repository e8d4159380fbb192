/**
 * Ids never repeat across emulator processes. Two emulators started with the same
 * seed behave alike (durations, outcomes) but hand out different request, job-set, session, message
 * and media ids, so a client holding an id from one can never read another job's result as its own.
 */
import { describe, expect, it } from 'vitest';
import type { Emulator } from '../../src/emulator/start-emulator.js';
import { AUTH, http, LEGACY_AUTH, start } from './helpers.js';

/** The same scripted traffic against one emulator; returns every id it was given, and the behaviour. */
async function workload(emu: Emulator): Promise<{ ids: string[]; behaviour: unknown[] }> {
  const ids: string[] = [];
  for (let i = 0; i < 5; i++) {
    const sheet = await http(emu, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: { tier: 'cats', seed: i + 1 } });
    expect(sheet.status).toBe(200);
    ids.push(sheet.json.request_id);
  }
  const jobSet = await http(emu, 'POST', '/v1/text2image/soul', { headers: LEGACY_AUTH, json: { params: { prompt: 'p', batch_size: 2 } } });
  expect(jobSet.status).toBe(200);
  ids.push(jobSet.json.id, ...jobSet.json.jobs.map((j: { id: string }) => j.id));
  const session = await http(emu, 'POST', '/v1/agent/sessions', { headers: AUTH, json: {} });
  ids.push(session.json.session_id);
  const message = await http(emu, 'POST', `/v1/agent/sessions/${session.json.session_id}/messages`, {
    headers: AUTH,
    json: { content: 'hello' },
  });
  ids.push(message.json.message_id);
  const media = await http(emu, 'POST', '/v1/agent/media', { headers: AUTH, json: { extension: 'png', type: 'image' } });
  ids.push(media.json.id);
  expect(ids.every((id) => typeof id === 'string' && id.length > 0)).toBe(true);
  const behaviour = [...emu.requests.byId.values()].map((r) => ({
    queued: r.startAt - r.createdAt,
    run: r.endAt - r.startAt,
    outcome: r.outcome,
  }));
  return { ids, behaviour };
}

describe('ids across emulator processes', () => {
  it('two emulators with the same seed give the same behaviour and no common id', async () => {
    const options = { seed: 7, timeScale: 1, failureRate: 0.4 };
    const a = await start(options);
    const b = await start(options);
    try {
      const first = await workload(a);
      const second = await workload(b);
      expect(second.behaviour).toEqual(first.behaviour);
      expect(new Set(first.ids).size).toBe(first.ids.length);
      const common = second.ids.filter((id) => first.ids.includes(id));
      expect(common).toEqual([]);
    } finally {
      await a.close();
      await b.close();
    }
  });

  it("an emulator restarted with the same seed does not answer for the first one's request ids", async () => {
    const first = await start({ seed: 11 });
    const id = (await http(first, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: { tier: 'cats', seed: 1 } })).json.request_id;
    await first.close();
    const again = await start({ seed: 11 });
    try {
      const other = (await http(again, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: { tier: 'cats', seed: 2 } })).json
        .request_id;
      expect(other).not.toBe(id);
      expect((await http(again, 'GET', `/requests/${id}/status`, { headers: AUTH })).status).toBe(404);
    } finally {
      await again.close();
    }
  });
});
