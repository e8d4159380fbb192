/** Ledger: for each scenario, reserves + charges − refunds equal what it should cost, to the cent. */
import { describe, expect, it } from 'vitest';
import { costMicros, inputTokens, nominalOutputTokens } from '../../src/emulator/token-model.js';
import type { Emulator } from '../../src/emulator/start-emulator.js';
import { AUTH, http, LEGACY_AUTH, netCents, start, until } from './helpers.js';

async function settled(emu: Emulator): Promise<void> {
  await until(() => ([...emu.requests.byId.values()].every((r) => r.settled) ? true : undefined));
}
const sheet = (emu: Emulator, body: unknown = {}) => http(emu, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: body });

describe('ledger', () => {
  it('ten character sheets, two failed and one nsfw: 7 × US$0.05 = 35 cents; balances agree', async () => {
    const emu = await start();
    for (let i = 0; i < 7; i++) await sheet(emu, { brief: `ok ${i}` });
    await sheet(emu, { brief: 'x [emulator:fail]' });
    await sheet(emu, { brief: 'y [emulator:fail]' });
    await sheet(emu, { brief: 'z [emulator:nsfw]' });
    await settled(emu);
    expect(netCents(emu)).toBe(35);
    const doc = (await http(emu, 'GET', '/_emulator/ledger')).json;
    expect(doc.credits_per_usd).toBe(100);
    expect(doc.accounts[0].initial_credits - doc.accounts[0].balance_credits).toBeCloseTo(35, 9);
    expect(doc.entries.filter((e: any) => e.kind === 'refund')).toHaveLength(3);
    expect(doc.entries.every((e: any) => typeof e.request_id === 'string')).toBe(true);
    await emu.close();
  });

  it('a canceled request costs nothing', async () => {
    const emu = await start({ timeScale: 1, durations: { 'character-sheet': { queuedMs: [3_600_000, 3_600_000] } } });
    const r = await sheet(emu);
    expect((await http(emu, 'POST', `/requests/${r.json.request_id}/cancel`, { headers: AUTH })).status).toBe(202);
    expect(netCents(emu)).toBe(0);
    await emu.close();
  });

  it('marketing image: the estimate charged at submit is reconciled down to the token model', async () => {
    const emu = await start();
    const body = { prompt: 'a red running shoe on a rock', resolution: '4k', quality: 'max', image_urls: ['https://example.com/a.png'] };
    const r = await http(emu, 'POST', '/marketing-studio/image/sunburst', { headers: AUTH, json: body });
    const estimate = costMicros(inputTokens(body as never), nominalOutputTokens('4k', 'max'));
    const charge = emu.ledger.entries.find((e) => e.request_id === r.json.request_id && e.kind === 'charge')!;
    expect(Math.round(charge.usd * 1e6)).toBe(estimate);
    await settled(emu);
    const req = emu.requests.get(r.json.request_id)!;
    const actual = costMicros(inputTokens(body as never), (req.details.actual_tokens as { output: number }).output);
    expect(emu.ledger.netMicros((e) => e.request_id === r.json.request_id)).toBe(actual);
    expect(actual).toBeLessThanOrEqual(estimate);
    await emu.close();
  });

  it('marketing cost grows with prompt length, images, resolution and quality; enhanced has no surcharge beyond its preset tokens', () => {
    const cost = (b: Record<string, unknown>, res = '2k', q = 'high') => costMicros(inputTokens(b as never), nominalOutputTokens(res, q));
    expect(cost({ prompt: 'x'.repeat(400) })).toBeGreaterThan(cost({ prompt: 'x' }));
    expect(cost({ prompt: 'x', image_urls: ['a', 'b'] })).toBeGreaterThan(cost({ prompt: 'x' }));
    expect(cost({ prompt: 'x' }, '4k')).toBeGreaterThan(cost({ prompt: 'x' }, '1k'));
    expect(cost({ prompt: 'x' }, '2k', 'max')).toBeGreaterThan(cost({ prompt: 'x' }, '2k', 'low'));
  });

  it('agent: a completed turn costs its llm_cost_usd, a failed one and a 502 cost nothing, its generation costs 5 cents', async () => {
    const emu = await start({ timeScale: 0.001 });
    const s = (await http(emu, 'POST', '/v1/agent/sessions', { headers: AUTH, json: {} })).json.session_id;
    const send = (content: string) => http(emu, 'POST', `/v1/agent/sessions/${s}/messages`, { headers: AUTH, json: { content } });
    const idle = () =>
      until(async () =>
        (await http(emu, 'GET', `/v1/agent/sessions/${s}/messages`, { headers: AUTH })).json.status === 'idle' ? true : undefined,
      );
    const a = await send('create a character sheet');
    await idle();
    const b = await send('oops #fail');
    await idle();
    emu.forceFaults('agent', 'error_502');
    expect((await send('lost')).status).toBe(502);
    await settled(emu);
    const messages = (await http(emu, 'GET', `/v1/agent/sessions/${s}/messages`, { headers: AUTH })).json.messages;
    const llm = messages.find((m: any) => m.message_id === a.json.message_id).llm_cost_usd;
    expect(netCents(emu, { messageId: a.json.message_id })).toBeCloseTo(llm * 100, 9);
    expect(netCents(emu, { messageId: b.json.message_id })).toBe(0);
    const lost = emu.ledger.entries.filter((e) => e.reason.includes('502'));
    expect(lost).toHaveLength(1);
    expect(netCents(emu, { messageId: lost[0]!.message_id! })).toBe(0);
    const generation = [...emu.requests.byId.values()][0]!;
    expect(netCents(emu, { requestId: generation.id })).toBe(5);
    expect(netCents(emu)).toBeCloseTo(5 + llm * 100, 9);
    await emu.close();
  });

  it('legacy job sets bill per job and refund failed jobs', async () => {
    const emu = await start();
    await http(emu, 'POST', '/v1/text2image/soul', { headers: LEGACY_AUTH, json: { params: { prompt: 'cat', batch_size: 3 } } });
    await http(emu, 'POST', '/v1/text2image/soul', {
      headers: LEGACY_AUTH,
      json: { params: { prompt: 'dog [emulator:fail]', batch_size: 2 } },
    });
    await settled(emu);
    expect(netCents(emu)).toBe(9);
    await emu.close();
  });

  it('a custom credit rate converts the same dollars to other credits', async () => {
    const emu = await start({ creditsPerUsd: 1000 });
    await sheet(emu);
    await settled(emu);
    expect(emu.ledger.entries[0]!.credits).toBe(50);
    await emu.close();
  });

  it('generation beyond the balance is refused with 402 and no charge', async () => {
    const emu = await start({ accounts: [{ keyId: 'k', secret: 'secret-k', credits: 4, agentEnabled: true }] });
    const res = await http(emu, 'POST', '/vendor/ai-influencer', { headers: { authorization: 'Key k:secret-k' }, json: {} });
    expect(res.status).toBe(402);
    expect(emu.ledger.entries).toHaveLength(0);
    await emu.close();
  });
});
