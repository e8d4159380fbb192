/** §6 webhooks: payloads, retry until 2xx, the 2-hour window (scaled), duplicates, late, timeout, secrets. */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { WebhookPayload } from '../../src/api/wire.js';
import { attemptOffsets, DEFAULT_WEBHOOK_TIMINGS } from '../../src/emulator/webhooks.js';
import type { Emulator } from '../../src/emulator/start-emulator.js';
import { AUTH, http, LEGACY_AUTH, start, until } from './helpers.js';

interface Received {
  headers: IncomingHttpHeaders;
  body: any;
  at: number;
}

/** A loopback receiver; `answer(n)` gives the status for the n-th delivery (from 0), or 'hang'. */
async function receiver(answer: (n: number) => number | 'hang' = () => 200): Promise<{ url: string; got: Received[]; server: Server }> {
  const got: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const n = got.length;
      got.push({ headers: req.headers, body: JSON.parse(Buffer.concat(chunks).toString('utf8')), at: Date.now() });
      const a = answer(n);
      if (a === 'hang') return;
      res.writeHead(a).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook?token=abc`, got, server };
}

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});
async function setup(options: Parameters<typeof start>[0], answer?: (n: number) => number | 'hang') {
  const emu = await start(options);
  const hook = await receiver(answer);
  cleanups.push(
    () => emu.close(),
    () => {
      hook.server.closeAllConnections();
      hook.server.close();
    },
  );
  return { emu, hook };
}
/** Waits until `n` deliveries exist (requests settle on a timer), then until none is pending. */
async function settledDeliveries(emu: Emulator, n: number): Promise<void> {
  await until(() => (emu.webhooks.deliveries.length >= n ? true : undefined));
  await emu.webhooks.whenIdle();
}
const soulStandard = (emu: Emulator, hookUrl: string, prompt = 'p') =>
  http(emu, 'POST', `/vendor-ai/soul/standard?hf_webhook=${encodeURIComponent(hookUrl)}`, {
    headers: AUTH,
    json: { prompt, aspect_ratio: '1:1', resolution: '1k' },
  });

describe('payloads (§6 table)', () => {
  it('completed (image): status, request_id, status_url, cancel_url, images', async () => {
    const { emu, hook } = await setup({});
    const r = await soulStandard(emu, hook.url);
    await settledDeliveries(emu, 1);
    expect(hook.got).toHaveLength(1);
    expect(Object.keys(hook.got[0]!.body).sort()).toEqual(['cancel_url', 'images', 'request_id', 'status', 'status_url']);
    expect(hook.got[0]!.body.request_id).toBe(r.json.request_id);
    expect(WebhookPayload.safeParse(hook.got[0]!.body).success).toBe(true);
  });

  it('completed (video): status, request_id, status_url, cancel_url, video; legacy carries X-Webhook-Secret-Key', async () => {
    const { emu, hook } = await setup({});
    const set = await http(emu, 'POST', '/v1/image2video/dop', {
      headers: LEGACY_AUTH,
      json: { webhook: { url: hook.url, secret: 'hook-secret-1' }, params: { prompt: 'x' } },
    });
    expect(set.status).toBe(200);
    await settledDeliveries(emu, 1);
    expect(Object.keys(hook.got[0]!.body).sort()).toEqual(['cancel_url', 'request_id', 'status', 'status_url', 'video']);
    expect(hook.got[0]!.body.request_id).toBe(set.json.jobs[0].id);
    expect(hook.got[0]!.headers['x-webhook-secret-key']).toBe('hook-secret-1');
  });

  it('failed: status, request_id, error; nsfw: status, request_id', async () => {
    const { emu, hook } = await setup({});
    await soulStandard(emu, hook.url, 'bad [emulator:fail]');
    await soulStandard(emu, hook.url, 'naughty [emulator:nsfw]');
    await settledDeliveries(emu, 2);
    const byStatus = Object.fromEntries(hook.got.map((g) => [g.body.status, g.body]));
    expect(Object.keys(byStatus.failed).sort()).toEqual(['error', 'request_id', 'status']);
    expect(byStatus.failed.error).toMatch(/failed/);
    expect(Object.keys(byStatus.nsfw).sort()).toEqual(['request_id', 'status']);
  });

  it('hf_webhook works on the other model paths, and --webhook-secret is sent on it', async () => {
    const { emu, hook } = await setup({ webhookSecret: 'global-hook-secret' });
    await http(emu, 'POST', `/vendor/ai-influencer?hf_webhook=${encodeURIComponent(hook.url)}`, { headers: AUTH, json: {} });
    await http(emu, 'POST', `/marketing-studio/image/sunburst?hf_webhook=${encodeURIComponent(hook.url)}`, {
      headers: AUTH,
      json: { prompt: 'shoes' },
    });
    await settledDeliveries(emu, 2);
    expect(hook.got).toHaveLength(2);
    expect(hook.got.every((g) => g.headers['x-webhook-secret-key'] === 'global-hook-secret')).toBe(true);
  });

  it('refuses a non-loopback webhook URL, and sends nothing for a canceled request', async () => {
    const { emu, hook } = await setup({ timeScale: 1, durations: { 'soul-standard': { queuedMs: [3_600_000, 3_600_000] } } });
    const res = await http(emu, 'POST', `/vendor-ai/soul/standard?hf_webhook=${encodeURIComponent('https://example.com/hook')}`, {
      headers: AUTH,
      json: { prompt: 'p', aspect_ratio: '1:1', resolution: '1k' },
    });
    expect(res.status).toBe(422);
    expect(res.json.detail).toMatch(/^hf_webhook: .*loopback/);
    const r = await soulStandard(emu, hook.url);
    expect((await http(emu, 'POST', `/requests/${r.json.request_id}/cancel`, { headers: AUTH })).status).toBe(202);
    expect(emu.webhooks.deliveries).toHaveLength(0);
  });
});

describe('delivery rules', () => {
  it('retries with backoff until a 2xx, then stops', async () => {
    const { emu, hook } = await setup({ timeScale: 0.001 }, (n) => (n < 3 ? 500 : 204));
    await soulStandard(emu, hook.url);
    await until(() => (emu.webhooks.deliveries.length === 1 ? true : undefined));
    await emu.webhooks.whenIdle();
    expect(hook.got).toHaveLength(4);
    const d = emu.webhooks.deliveries[0]!;
    expect(d.state).toBe('delivered');
    expect(d.attempts.map((a) => a.status)).toEqual([500, 500, 500, 204]);
    expect(new Set(hook.got.map((g) => g.body.request_id)).size).toBe(1);
  });

  it('gives up after the 2-hour window (scaled): 32 attempts at 0 s, 1 s, 3 s, ... then every 5 min', async () => {
    // Service time: backoff 1 s doubling to a 5 min cap, window 2 h. At scale 0.00005 the 2 h take 360 ms.
    const { emu, hook } = await setup({ timeScale: 0.00005 }, () => 503);
    const r = await soulStandard(emu, hook.url);
    await until(() => (emu.webhooks.deliveries.length === 1 ? true : undefined));
    await emu.webhooks.whenIdle();
    const d = emu.webhooks.deliveries[0]!;
    expect(d.state).toBe('gave_up');
    const expected = attemptOffsets(DEFAULT_WEBHOOK_TIMINGS);
    expect(expected).toHaveLength(32);
    expect(expected.slice(0, 4)).toEqual([0, 1_000, 3_000, 7_000]);
    expect(expected.at(-1)).toBeLessThanOrEqual(2 * 60 * 60 * 1000);
    expect(d.attempts.map((a) => a.offset_ms)).toEqual(expected);
    expect(hook.got).toHaveLength(32);
    expect((await http(emu, 'GET', `/requests/${r.json.request_id}/status`, { headers: AUTH })).json.status).toBe('completed');
  });

  it('the window is configurable', async () => {
    const { emu, hook } = await setup({ timeScale: 0, webhookTimings: { windowMs: 10_000 } }, () => 500);
    await soulStandard(emu, hook.url);
    await until(() => (emu.webhooks.deliveries.length === 1 ? true : undefined));
    await emu.webhooks.whenIdle();
    expect(emu.webhooks.deliveries[0]!.attempts.map((a) => a.offset_ms)).toEqual([0, 1_000, 3_000, 7_000]);
    expect(hook.got).toHaveLength(4);
  });

  it('delivers duplicates when the fault profile says so (receivers dedupe by request_id)', async () => {
    const { emu, hook } = await setup({
      timeScale: 0.001,
      faults: {
        name: 'dups',
        routes: (await import('../../src/emulator/faults.js')).FAULT_PROFILES.none.routes,
        webhooks: { duplicate_rate: 1, late_rate: 0, late_ms: 0 },
      },
    });
    const r = await soulStandard(emu, hook.url);
    await until(() => (emu.webhooks.deliveries.length >= 1 ? true : undefined));
    await until(() => (emu.webhooks.deliveries.length === 2 && emu.webhooks.pending === 0 ? true : undefined));
    expect(hook.got).toHaveLength(2);
    expect(hook.got.map((g) => g.body.request_id)).toEqual([r.json.request_id, r.json.request_id]);
    expect(hook.got[1]!.body).toEqual(hook.got[0]!.body);
    expect(emu.webhooks.deliveries.map((d) => d.duplicate)).toEqual([false, true]);
  });

  it('delivers late when the fault profile says so', async () => {
    const { FAULT_PROFILES } = await import('../../src/emulator/faults.js');
    const { emu, hook } = await setup({
      timeScale: 0.001,
      faults: { name: 'late', routes: FAULT_PROFILES.none.routes, webhooks: { duplicate_rate: 0, late_rate: 1, late_ms: 20_000 } },
    });
    await soulStandard(emu, hook.url);
    await until(() => (emu.webhooks.deliveries.length === 1 ? true : undefined));
    expect(emu.webhooks.deliveries[0]!.late_ms).toBe(20);
    await emu.webhooks.whenIdle();
    expect(hook.got).toHaveLength(1);
  });

  it('an attempt that gets no answer times out and is retried', async () => {
    const { emu, hook } = await setup({ timeScale: 0.001, webhookTimings: { timeoutMs: 50 } }, (n) => (n === 0 ? 'hang' : 200));
    await soulStandard(emu, hook.url);
    await until(() => (emu.webhooks.deliveries.length === 1 ? true : undefined));
    await emu.webhooks.whenIdle();
    const d = emu.webhooks.deliveries[0]!;
    expect(d.attempts[0]!.error).toMatch(/timeout after 50 ms/);
    expect(d.attempts[1]!.status).toBe(200);
    expect(d.state).toBe('delivered');
  });
});
