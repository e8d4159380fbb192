/** §5 "Generation always requires authentication and model access": per-account model lists. */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accountsFromFile } from '../../src/emulator/accounts.js';
import type { Emulator } from '../../src/emulator/start-emulator.js';
import { http, start, until } from './helpers.js';

const LIMITED = '55555555-5555-4555-8555-555555555555';
const AUTH_LIMITED = { authorization: `Key ${LIMITED}:limited-secret` };
const LEGACY_LIMITED = { 'hf-api-key': LIMITED, 'hf-secret': 'limited-secret' };

let emu: Emulator;
beforeAll(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'emu-models-'));
  const file = join(dir, 'accounts.yaml');
  writeFileSync(
    file,
    `accounts:
  - key_id: 00000000-0000-4000-8000-000000000000
    secret: emulator-secret
  - key_id: ${LIMITED}
    secret: limited-secret
    models: [marketing-image, soul]
`,
  );
  emu = await start({ timeScale: 0.001, accounts: accountsFromFile(file) });
});
afterAll(() => emu.close());

describe('model access per account', () => {
  it('a model outside the account list is refused 403 naming model access, with nothing created or charged', async () => {
    const entries = emu.ledger.entries.length;
    const r = await http(emu, 'POST', '/vendor/ai-influencer', { headers: AUTH_LIMITED, json: { tier: 'cats' } });
    expect(r.status).toBe(403);
    expect(r.json.detail).toMatch(/model access.*character-sheet/);
    const dop = await http(emu, 'POST', '/v1/image2video/dop', { headers: LEGACY_LIMITED, json: { params: { prompt: 'wave' } } });
    expect(dop.status).toBe(403);
    expect(dop.json.detail).toMatch(/model access.*dop/);
    expect(emu.ledger.entries.length).toBe(entries);
    expect(emu.requests.inspect({ keyId: LIMITED })).toHaveLength(0);
  });

  it('the models it lists are served; an account without a list has every model', async () => {
    const ad = await http(emu, 'POST', '/marketing-studio/image/sunburst', { headers: AUTH_LIMITED, json: { prompt: 'shoes' } });
    expect(ad.status).toBe(200);
    const soul = await http(emu, 'POST', '/v1/text2image/soul', { headers: LEGACY_LIMITED, json: { params: { prompt: 'a cat' } } });
    expect(soul.status).toBe(200);
    const sheet = await http(emu, 'POST', '/vendor/ai-influencer', {
      headers: { authorization: 'Key 00000000-0000-4000-8000-000000000000:emulator-secret' },
      json: { tier: 'cats' },
    });
    expect(sheet.status).toBe(200);
  });

  it("the agent's generation needs model access too: the turn answers why, and charges no generation", async () => {
    const s = (await http(emu, 'POST', '/v1/agent/sessions', { headers: AUTH_LIMITED, json: {} })).json.session_id;
    await http(emu, 'POST', `/v1/agent/sessions/${s}/messages`, { headers: AUTH_LIMITED, json: { content: 'draw a cats character' } });
    const done = await until(async () => {
      const l = (await http(emu, 'GET', `/v1/agent/sessions/${s}/messages`, { headers: AUTH_LIMITED })).json;
      return l.status === 'idle' ? l : undefined;
    });
    expect(done.messages.at(-1).message.parts.at(-1).text).toMatch(/no model access to character-sheet/);
    expect(emu.requests.inspect({ keyId: LIMITED }).filter((r: any) => r.model === 'character-sheet')).toHaveLength(0);
  });

  it('an accounts file naming an unknown model is refused at file:line:col', () => {
    const dir = mkdtempSync(join(tmpdir(), 'emu-models-'));
    const bad = join(dir, 'bad.yaml');
    writeFileSync(bad, 'accounts:\n  - key_id: a\n    secret: s\n    models: [character-sheet, video-magic]\n');
    expect(() => accountsFromFile(bad)).toThrow(/bad\.yaml:4:31: accounts\[0\]\.models\[1\]: /);
  });
});
