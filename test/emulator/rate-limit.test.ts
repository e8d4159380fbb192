/** The true rate limit fault: 429 with Retry-After above N requests per second per account. */
import { describe, expect, it } from 'vitest';
import { FaultEngine, profileFromSpec } from '../../src/emulator/faults.js';
import { Rng } from '../../src/emulator/prng.js';
import { AUTH, http, start } from './helpers.js';

describe('rate_limit_per_s', () => {
  it('lets N requests of an account through per sliding second, then answers with the seconds until one leaves', () => {
    let now = 10_000;
    const engine = new FaultEngine(profileFromSpec({ submit: { rate_limit_per_s: 3 } }), new Rng(1), () => now);
    expect([0, 1, 2].map(() => engine.rateLimit('submit', 'a'))).toEqual([undefined, undefined, undefined]);
    expect(engine.rateLimit('submit', 'a')).toBe(1);
    // Per account, and per class: another account, or a status poll, is not limited.
    expect(engine.rateLimit('submit', 'b')).toBeUndefined();
    expect(engine.rateLimit('status', 'a')).toBeUndefined();
    now += 999;
    expect(engine.rateLimit('submit', 'a')).toBe(1);
    now += 1;
    expect(engine.rateLimit('submit', 'a')).toBeUndefined();
    expect(engine.injected['submit.rate_limit']).toBe(2);
  });

  it('is off at 0, the default of every built-in profile', () => {
    const engine = new FaultEngine(profileFromSpec({ extends: 'hostile' }), new Rng(1), () => 0);
    for (let i = 0; i < 100; i++) expect(engine.rateLimit('submit', 'a')).toBeUndefined();
  });

  it('over HTTP: the request past the limit is 429 with Retry-After, creates nothing; another account goes on', async () => {
    const emu = await start({
      faults: profileFromSpec({ submit: { rate_limit_per_s: 2 } }),
      accounts: [
        { keyId: '00000000-0000-4000-8000-000000000000', secret: 'emulator-secret', credits: 1_000, agentEnabled: true },
        { keyId: 'other', secret: 'other-secret', credits: 1_000, agentEnabled: true },
      ],
    });
    try {
      const sheet = (headers: Record<string, string>) => http(emu, 'POST', '/vendor/ai-influencer', { headers, json: { tier: 'cats' } });
      const answers = [await sheet(AUTH), await sheet(AUTH), await sheet(AUTH)];
      expect(answers.map((a) => a.status)).toEqual([200, 200, 429]);
      expect(answers[2]?.headers['retry-after']).toBe('1');
      expect(answers[2]?.json.detail).toMatch(/rate limited/);
      expect(emu.requests.byId.size).toBe(2);
      expect((await sheet({ authorization: 'Key other:other-secret' })).status).toBe(200);
    } finally {
      await emu.close();
    }
  });
});
