/**
 * Webhook mode against a real emulator (runner issue, "Webhooks"; reliability.md #6, #9, #11): fewer
 * status requests than polling for the same results, one confirming GET per request, and duplicate
 * or late deliveries never change a final state.
 */
import { afterAll, describe, expect, it } from 'vitest';
import type { Emulator } from '../../src/emulator/index.js';
import {
  cleanTemps,
  expectCompletedRun,
  expectNoSecret,
  findRunDir,
  journalOf,
  runCli,
  sheetsManifest,
  tempDir,
  withEmulator,
  freePort,
} from './runner-helpers.js';

const STATUS_ROUTE = 'GET /requests/:id/status';

afterAll(() => cleanTemps());

async function run(
  emu: Emulator,
  name: string,
  count: number,
  webhook: boolean,
): Promise<{ runDir: string; statusGets: number; output: string; code: number | null }> {
  const dir = tempDir();
  const manifest = sheetsManifest(dir, count, { name });
  const port = await freePort();
  emu.stats.reset();
  const args = ['run', manifest, '--base-url', emu.url, '--out', `${dir}/out`, '--concurrency', String(count)];
  if (webhook) args.push('--webhook-url', `http://127.0.0.1:${port}/hooks`, '--listen', `127.0.0.1:${port}`);
  const result = await runCli(args, { timeoutMs: 90_000 });
  return {
    runDir: findRunDir(`${dir}/out`, name),
    statusGets: emu.stats.byRoute.get(STATUS_ROUTE) ?? 0,
    output: result.stdout + result.stderr,
    code: result.code,
  };
}

describe('webhook mode', () => {
  it('finishes with fewer status requests than polling, one confirming GET per request, and the same results', async () => {
    // Sheets take 8.5 s or more at time scale 1, so at least 1.275 s here: longer than the first
    // poll (at most 1 s), so polling needs two looks or more for each; a webhook needs one.
    await withEmulator({ timeScale: 0.15 }, async (emu) => {
      const polled = await run(emu, 'polled', 12, false);
      const hooked = await run(emu, 'hooked', 12, true);
      expect(polled.code).toBe(0);
      expect(hooked.code).toBe(0);
      expectCompletedRun(polled.runDir, emu, 12);
      expectCompletedRun(hooked.runDir, emu, 12);
      expect(hooked.statusGets).toBe(12);
      expect(polled.statusGets).toBeGreaterThanOrEqual(24);
      expect(hooked.statusGets).toBeLessThan(polled.statusGets);
      // Every webhook target the emulator was given carries the run's token, which no output shows.
      const targets = [...emu.requests.byId.values()].map((r) => r.webhook?.url).filter((u): u is string => u !== undefined);
      expect(targets).toHaveLength(12);
      const token = targets[0]?.split('/').pop() ?? '';
      expect(token).toMatch(/^[0-9a-f]{48}$/);
      expectNoSecret(hooked.runDir, hooked.output, token);
    });
  }, 120_000);

  it('under hostile faults with duplicate and late deliveries, every instance ends completed once, with one request per key', async () => {
    await withEmulator({ timeScale: 0.02, seed: 11, faults: 'hostile' }, async (emu) => {
      const hooked = await run(emu, 'hostile', 30, true);
      expect(hooked.code).toBe(0);
      expectCompletedRun(hooked.runDir, emu, 30);
      // Terminal states are final: one status record per instance, whatever arrived twice or late.
      const statuses = journalOf(hooked.runDir).records.filter((r) => r.type === 'status');
      expect(statuses).toHaveLength(30);
      expect(new Set(statuses.map((r) => (r as { instance: string }).instance)).size).toBe(30);
      const deliveries = emu.webhooks.deliveries as readonly unknown[];
      // The profile really delivered some twice (30% duplicates, seeded), and none of it showed.
      expect(deliveries.length).toBeGreaterThan(30);
    });
  }, 120_000);

  it('a forged early delivery costs one extra look, then polling: never a hot loop of status GETs', async () => {
    // One sheet of 2.5 s or more; a delivery claiming it completed is posted while it is still queued.
    await withEmulator({ timeScale: 0.3 }, async (emu) => {
      const dir = tempDir();
      const manifest = sheetsManifest(dir, 1, { name: 'forged' });
      const port = await freePort();
      emu.stats.reset();
      let forged = false;
      const forge = setInterval(() => {
        const request = [...emu.requests.byId.values()][0];
        if (forged || !request?.webhook?.url) return;
        forged = true;
        void fetch(request.webhook.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ status: 'completed', request_id: request.id, images: [] }),
        }).catch(() => {});
      }, 20);
      const result = await runCli(
        [
          'run',
          manifest,
          '--base-url',
          emu.url,
          '--out',
          `${dir}/out`,
          '--webhook-url',
          `http://127.0.0.1:${port}/hooks`,
          '--listen',
          `127.0.0.1:${port}`,
        ],
        { timeoutMs: 90_000 },
      );
      clearInterval(forge);
      expect(forged).toBe(true);
      expect(result.code, result.stderr).toBe(0);
      expectCompletedRun(findRunDir(`${dir}/out`, 'forged'), emu, 1);
      // Polling a job of a few seconds takes a handful of looks; a hot loop would take hundreds.
      expect(emu.stats.byRoute.get(STATUS_ROUTE) ?? 0).toBeLessThan(15);
    });
  }, 120_000);

  it('refuses --webhook-url without --listen, and a bad --listen, with exit 2 and no request', async () => {
    await withEmulator({ timeScale: 0 }, async (emu) => {
      const dir = tempDir();
      const manifest = sheetsManifest(dir, 2);
      emu.stats.reset();
      const alone = await runCli([
        'run',
        manifest,
        '--base-url',
        emu.url,
        '--out',
        `${dir}/out`,
        '--webhook-url',
        'http://127.0.0.1:9/hooks',
      ]);
      expect(alone.code).toBe(2);
      expect(alone.stderr).toMatch(/--webhook-url and --listen go together/);
      const bad = await runCli([
        'run',
        manifest,
        '--base-url',
        emu.url,
        '--out',
        `${dir}/out`,
        '--webhook-url',
        'http://127.0.0.1:9/hooks',
        '--listen',
        'nowhere',
      ]);
      expect(bad.code).toBe(2);
      expect(bad.stderr).toMatch(/--listen takes HOST:PORT/);
      expect(emu.stats.total).toBe(0);
    });
  });
});
