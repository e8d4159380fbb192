/** Fault injection: profiles, seeding, the fault file, and each fault's effect on the service. */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { GenpipeError, IndeterminateSubmissionError } from '../../src/api/errors.js';
import { FAULT_PROFILES, FaultEngine, loadFaultProfile } from '../../src/emulator/faults.js';
import { Rng } from '../../src/emulator/prng.js';
import { AUTH, clientFor, http, start } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'genpipe-faults-'));

describe('fault profiles', () => {
  it('hostile has the rates of reliability.md §9', () => {
    const r = FAULT_PROFILES.hostile.routes.submit;
    expect(r.error_500 + r.error_502 + r.error_503).toBeCloseTo(0.1, 10);
    expect(r.reset_after).toBe(0.05);
    expect(r.rate_429).toBe(0.03);
    expect(FAULT_PROFILES.hostile.webhooks.duplicate_rate).toBeGreaterThan(0);
    expect(FAULT_PROFILES.none.routes.status.error_500).toBe(0);
  });

  it('decisions are reproducible for a seed and follow the rates', () => {
    const draw = (seed: number) => {
      const e = new FaultEngine(FAULT_PROFILES.hostile, new Rng(seed));
      return Array.from({ length: 20_000 }, () => e.decide('submit'));
    };
    const a = draw(7);
    expect(draw(7)).toEqual(a);
    expect(draw(8)).not.toEqual(a);
    const share = (p: (d: (typeof a)[number]) => boolean) => a.filter(p).length / a.length;
    expect(share((d) => d.resetBefore)).toBeGreaterThan(0.01);
    expect(share((d) => d.resetBefore)).toBeLessThan(0.03);
    expect(share((d) => d.status === 429)).toBeGreaterThan(0.02);
    expect(share((d) => d.status === 429)).toBeLessThan(0.04);
    expect(share((d) => d.resetAfter)).toBeGreaterThan(0.035);
    expect(share((d) => d.resetAfter)).toBeLessThan(0.06);
  });

  it('reads a fault file (YAML): extends, all, per-class overrides', () => {
    const file = join(dir, 'faults.yaml');
    writeFileSync(
      file,
      'extends: flaky\nall:\n  error_500: 0\nstatus:\n  rate_429: 0.5\n  retry_after_s: 3\nwebhooks:\n  duplicate_rate: 1\n',
    );
    const p = loadFaultProfile(file);
    expect(p.routes.submit.error_500).toBe(0);
    expect(p.routes.submit.error_502).toBe(FAULT_PROFILES.flaky.routes.submit.error_502);
    expect(p.routes.status.rate_429).toBe(0.5);
    expect(p.routes.status.retry_after_s).toBe(3);
    expect(p.routes.agent.rate_429).toBe(FAULT_PROFILES.flaky.routes.agent.rate_429);
    expect(p.webhooks.duplicate_rate).toBe(1);
  });

  it('reads the after-processing knobs from a fault file, and draws them at their rates', () => {
    const file = join(dir, 'gateway.yaml');
    writeFileSync(file, 'submit:\n  error_502_after: 0.2\n  error_504_after: 0.1\n');
    const p = loadFaultProfile(file);
    expect(p.routes.submit.error_502_after).toBe(0.2);
    expect(p.routes.submit.error_504_after).toBe(0.1);
    expect(p.routes.status.error_502_after).toBe(0);
    const e = new FaultEngine(p, new Rng(5));
    const a = Array.from({ length: 20_000 }, () => e.decide('submit'));
    const share = (s: number) => a.filter((d) => d.statusAfter === s).length / a.length;
    expect(share(502)).toBeGreaterThan(0.17);
    expect(share(502)).toBeLessThan(0.23);
    // Drawn after error_502_after: 10% of the 80% left.
    expect(share(504)).toBeGreaterThan(0.06);
    expect(share(504)).toBeLessThan(0.1);
    expect(a.every((d) => d.status === undefined)).toBe(true);
  });

  it('a bad after-processing knob is refused naming file:line:col', () => {
    const file = join(dir, 'bad-gateway.yaml');
    writeFileSync(file, 'submit:\n  error_504_after: 1.5\n');
    expect(() => loadFaultProfile(file)).toThrow(/bad-gateway\.yaml:2:20: submit\.error_504_after: /);
  });

  it('a bad fault file is refused naming file:line:col and the field', () => {
    const file = join(dir, 'bad.yaml');
    writeFileSync(file, 'submit:\n  error_500: 2\n');
    expect(() => loadFaultProfile(file)).toThrow(/bad\.yaml:2:14: submit\.error_500: /);
    writeFileSync(file, 'sumbit:\n  error_500: 0.1\n');
    expect(() => loadFaultProfile(file)).toThrow(/bad\.yaml:1:1: sumbit: unknown field/);
    expect(() => loadFaultProfile(join(dir, 'missing.yaml'))).toThrow(GenpipeError);
  });
});

describe('faults on the wire', () => {
  it('reset after processing really creates the request; the client reports it as indeterminate', async () => {
    const emu = await start();
    const client = clientFor(emu);
    emu.forceFaults('submit', 'reset_after');
    const error = await client.characterSheet.submit({ brief: 'lost answer' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IndeterminateSubmissionError);
    const rows = (await http(emu, 'GET', '/_emulator/requests')).json.requests;
    expect(rows).toHaveLength(1);
    // The runner can reconcile: the emulator's body_hash is the client's hash of the bytes it sent.
    expect(rows[0].body_hash).toBe((error as IndeterminateSubmissionError).bodyHash);
    expect(emu.ledger.entries.filter((e) => e.kind === 'charge')).toHaveLength(1);
    await client.close();
    await emu.close();
  });

  it('reset after processing, retried with the same Idempotency-Key, creates exactly one request', async () => {
    const emu = await start();
    const client = clientFor(emu);
    emu.forceFaults('submit', 'reset_after', 'reset_after');
    const r = await client.characterSheet.submit({ brief: 'k' }, { idempotencyKey: 'step-1' });
    expect(emu.requests.byId.size).toBe(1);
    expect(emu.requests.get(r.request_id)?.idempotencyKey).toBe('step-1');
    expect(emu.faults.injected['submit.reset_after']).toBe(2);
    await client.close();
    await emu.close();
  });

  it.each([502, 504] as const)(
    'error_%i_after: the submit is processed and charged, then answered with that status instead of 200',
    async (status) => {
      const emu = await start();
      emu.forceFaults('submit', `error_${status}_after`);
      const res = await http(emu, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: { tier: 'cats', seed: 3 } });
      expect(res.status).toBe(status);
      expect(typeof res.json.detail).toBe('string');
      expect(res.json.request_id).toBeUndefined();
      expect(emu.requests.byId.size).toBe(1);
      expect(emu.ledger.entries.filter((e) => e.kind === 'charge')).toHaveLength(1);
      expect(emu.faults.injected[`submit.error_${status}_after`]).toBe(1);
      // The next submit is answered as usual.
      expect((await http(emu, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: { tier: 'cats', seed: 4 } })).status).toBe(200);
      await emu.close();
    },
  );

  it('502 and 504 after processing: a keyed submit is retried under its key and charged once; a keyless one is sent once and is indeterminate', async () => {
    const emu = await start();
    const client = clientFor(emu);
    emu.forceFaults('submit', 'error_502_after', 'error_504_after');
    const r = await client.characterSheet.submit({ brief: 'gateway' }, { idempotencyKey: 'step-gw' });
    expect(emu.requests.byId.size).toBe(1);
    expect(emu.requests.get(r.request_id)?.idempotencyKey).toBe('step-gw');
    expect(emu.ledger.entries.filter((e) => e.kind === 'charge')).toHaveLength(1);
    emu.forceFaults('submit', 'error_504_after');
    const error = await client.marketingImage
      .submit({ prompt: 'a keyless banner', resolution: '1k', quality: 'low' })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IndeterminateSubmissionError);
    expect((error as IndeterminateSubmissionError).status).toBe(504);
    expect(emu.requests.byId.size).toBe(2);
    expect(emu.ledger.entries.filter((e) => e.kind === 'charge')).toHaveLength(2);
    await client.close();
    await emu.close();
  });

  it('reset before processing creates nothing', async () => {
    const emu = await start();
    emu.forceFaults('submit', 'reset_before');
    await expect(http(emu, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: {} })).rejects.toThrow();
    expect(emu.requests.byId.size).toBe(0);
    expect((await http(emu, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: {} })).status).toBe(200);
    await emu.close();
  });

  it('429 carries Retry-After; 500, 502 and 503 are answered before processing', async () => {
    const emu = await start({
      faults: {
        ...FAULT_PROFILES.none,
        name: 'limits',
        routes: { ...FAULT_PROFILES.none.routes, status: { ...FAULT_PROFILES.none.routes.status, retry_after_s: 7 } },
      },
    });
    emu.forceFaults('status', 'rate_429');
    const limited = await http(emu, 'GET', '/models/vendor/ai-influencer/options');
    expect(limited.status).toBe(429);
    expect(limited.headers['retry-after']).toBe('7');
    for (const f of ['error_500', 'error_502', 'error_503'] as const) {
      emu.forceFaults('submit', f);
      const res = await http(emu, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: {} });
      expect(res.status).toBe(Number(f.slice(6)));
      expect(typeof res.json.detail).toBe('string');
    }
    expect(emu.requests.byId.size).toBe(0);
    await emu.close();
  });

  it('a slow body still arrives whole', async () => {
    const emu = await start();
    const normal = await http(emu, 'GET', '/models/vendor/ai-influencer/options');
    emu.forceFaults('status', 'slow_body');
    const slow = await http(emu, 'GET', '/models/vendor/ai-influencer/options');
    expect(slow.bytes.equals(normal.bytes)).toBe(true);
    expect(emu.faults.injected['status.slow_body']).toBe(1);
    await emu.close();
  });

  it('foreign_status from a fault file: status and job-set GETs answer about another request, the rest of the class never', async () => {
    const file = join(dir, 'foreign.yaml');
    writeFileSync(file, 'status:\n  foreign_status: 1\n');
    const emu = await start({ faults: loadFaultProfile(file) });
    const a = (await http(emu, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: { tier: 'cats', seed: 1 } })).json
      .request_id as string;
    const b = (await http(emu, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: { tier: 'cats', seed: 2 } })).json
      .request_id as string;
    const status = await http(emu, 'GET', `/requests/${a}/status`, { headers: AUTH });
    expect(status.status).toBe(200);
    expect(status.json.request_id).toBe(b);
    expect(status.json.status_url).toContain(`/requests/${b}/status`);
    // Another account's request is still not found: the fault never reveals what the caller does not own.
    expect((await http(emu, 'GET', '/requests/00000000-0000-4000-8000-00000000abcd/status', { headers: AUTH })).status).toBe(404);
    // The options catalog is a status-class route that echoes no id: answered as ever, and not counted.
    expect((await http(emu, 'GET', '/models/vendor/ai-influencer/options')).status).toBe(200);
    expect(emu.faults.injected['status.foreign_status']).toBe(1);
    await emu.close();
  });

  it('faults apply per route class only', async () => {
    const emu = await start();
    emu.forceFaults('cdn', 'error_503');
    expect((await http(emu, 'GET', '/models/vendor/ai-influencer/options')).status).toBe(200);
    expect((await http(emu, 'GET', '/cdn/outputs/x/sheet.png')).status).toBe(503);
    await emu.close();
  });

  it('the profile can be replaced at runtime through /_emulator/faults', async () => {
    const emu = await start();
    const res = await http(emu, 'POST', '/_emulator/faults', { json: { status: { error_503: 1 } } });
    expect(res.status).toBe(200);
    expect((await http(emu, 'GET', '/models/vendor/ai-influencer/options')).status).toBe(503);
    await http(emu, 'POST', '/_emulator/faults', { json: { profile: 'none' } });
    expect((await http(emu, 'GET', '/models/vendor/ai-influencer/options')).status).toBe(200);
    await emu.close();
  });

  it('a whole client workload under the hostile profile ends with one request per key', async () => {
    const emu = await start({ faults: 'hostile', seed: 3 });
    emu.setFaults({
      ...FAULT_PROFILES.hostile,
      routes: Object.fromEntries(
        Object.entries(FAULT_PROFILES.hostile.routes).map(([k, v]) => [
          k,
          { ...v, latency_ms: 0, jitter_ms: 0, slow_body_chunk_ms: 1, retry_after_s: 0 },
        ]),
      ) as never,
    });
    const client = clientFor(emu);
    (client.config.retry as { maxAttempts: number }).maxAttempts = 20;
    const ids = await Promise.all(
      Array.from({ length: 60 }, (_, i) => client.characterSheet.submit({ brief: `n${i}` }, { idempotencyKey: `hostile-${i}` })),
    );
    expect(new Set(ids.map((r) => r.request_id)).size).toBe(60);
    expect(emu.requests.byId.size).toBe(60);
    expect(Object.values(emu.faults.injected).reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    await client.close();
    await emu.close();
  });
});
