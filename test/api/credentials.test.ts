import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { Credentials, credentialsFromEnv, credentialsFromFile, parseCredentialPair } from '../../src/api/credentials.js';
import { redact, registerSecret, REDACTED } from '../../src/util/redact.js';
import { BASE, harness, KEY_ID, KEY_SECRET, networkError, PLATFORM, rejection, REQUEST_ID, thrown } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'genpipe-credentials-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function credentialsFile(name: string, text: string, mode: number): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  chmodSync(path, mode);
  return path;
}

describe('Credentials never show the secret', () => {
  const credentials = new Credentials(KEY_ID, KEY_SECRET);

  it('toString, JSON.stringify and util.inspect hide the secret but show the key id', () => {
    for (const text of [
      String(credentials),
      `${credentials}`,
      JSON.stringify(credentials),
      JSON.stringify({ nested: { credentials } }),
      inspect(credentials),
      inspect({ credentials }, { depth: 5, showHidden: true }),
    ]) {
      expect(text).not.toContain(KEY_SECRET);
    }
    expect(String(credentials)).toContain(KEY_ID);
  });

  it('builds both auth surfaces from one pair (§5)', () => {
    expect(credentials.authorization()).toBe(`Key ${KEY_ID}:${KEY_SECRET}`);
    expect(credentials.legacyHeaders()).toEqual({ 'hf-api-key': KEY_ID, 'hf-secret': KEY_SECRET });
    expect(credentials.hasSecret(KEY_SECRET)).toBe(true);
    expect(credentials.hasSecret('other')).toBe(false);
  });

  it('refuses an empty key id, a key id with a colon, and an empty or multi-line secret, without echoing the secret', () => {
    expect(thrown(() => new Credentials('', 'secret-value')).code).toBe('credentials');
    expect(thrown(() => new Credentials('a:b', 'secret-value')).code).toBe('credentials');
    expect(thrown(() => new Credentials('id', '')).code).toBe('credentials');
    const error = thrown(() => new Credentials('id', 'line-one-secret\nline-two'));
    expect(error.message).not.toContain('line-one-secret');
  });
});

describe('redact()', () => {
  it('hides every registered secret, wherever it appears', () => {
    registerSecret('webhook-secret-123456');
    expect(redact('url?token=webhook-secret-123456 and again webhook-secret-123456')).toBe(`url?token=${REDACTED} and again ${REDACTED}`);
    new Credentials('some-id', 'another-secret-abcdef');
    expect(redact('Authorization: Key some-id:another-secret-abcdef')).toBe(`Authorization: Key some-id:${REDACTED}`);
  });

  it('leaves text without secrets alone, and ignores secrets too short to be safe to mask', () => {
    registerSecret('abc');
    expect(redact('abc def')).toBe('abc def');
    expect(redact('nothing secret here')).toBe('nothing secret here');
  });
});

describe('errors never contain the secret', () => {
  const views = (error: unknown): string[] => [
    (error as Error).message,
    String(error),
    inspect(error, { depth: 10 }),
    JSON.stringify(error),
  ];

  it('a 401 whose detail echoes the Authorization header', async () => {
    const { agent, client } = harness();
    agent
      .get(BASE)
      .intercept({ path: `/requests/${REQUEST_ID}/status` })
      .reply(401, { detail: `Invalid credentials: Key ${KEY_ID}:${KEY_SECRET}` });
    const error = await rejection(client.requests.status(REQUEST_ID));
    expect(error.code).toBe('unauthorized');
    for (const text of views(error)) expect(text).not.toContain(KEY_SECRET);
  });

  it('a 401 on the legacy surface whose detail echoes hf-secret', async () => {
    const { agent, client } = harness();
    agent
      .get(PLATFORM)
      .intercept({ path: '/v1/text2image/soul', method: 'POST' })
      .reply(401, { detail: `bad hf-secret ${KEY_SECRET}` });
    const error = await rejection(client.legacy.soul({ prompt: 'x' }));
    expect(error.code).toBe('unauthorized');
    for (const text of views(error)) expect(text).not.toContain(KEY_SECRET);
  });

  it('network failures on GET and on a credit-spending POST (indeterminate)', async () => {
    const { agent, client } = harness();
    agent
      .get(BASE)
      .intercept({ path: `/requests/${REQUEST_ID}/status` })
      .replyWithError(networkError('ECONNRESET'))
      .persist();
    agent.get(BASE).intercept({ path: '/marketing-studio/image/sunburst', method: 'POST' }).replyWithError(networkError('ECONNRESET'));
    const errors = [await rejection(client.requests.status(REQUEST_ID)), await rejection(client.marketingImage.submit({ prompt: 'x' }))];
    expect(errors.map((e) => e.code)).toEqual(['network', 'indeterminate_submission']);
    for (const error of errors) for (const text of views(error)) expect(text).not.toContain(KEY_SECRET);
  });

  it('a network error whose message happens to carry the secret is redacted', async () => {
    const { agent, client } = harness();
    agent
      .get(BASE)
      .intercept({ path: `/requests/${REQUEST_ID}/status` })
      .replyWithError(networkError('ECONNRESET', `proxy said no to Key ${KEY_ID}:${KEY_SECRET}`))
      .persist();
    const error = await rejection(client.requests.status(REQUEST_ID));
    expect(error.message).not.toContain(KEY_SECRET);
    expect(String(error)).not.toContain(KEY_SECRET);
    // util.inspect shows the cause chain too, which holds the raw network error.
    expect(inspect(error, { depth: 10 })).not.toContain(KEY_SECRET);
    expect(inspect(error, { depth: 10 })).toContain('ECONNRESET');
  });
});

describe('credentials from the environment (like the official clients)', () => {
  it('HF_KEY as id:secret', () => {
    const c = credentialsFromEnv({ HF_KEY: 'id-1:secret-1' });
    expect(c?.keyId).toBe('id-1');
    expect(c?.hasSecret('secret-1')).toBe(true);
  });

  it('HF_CREDENTIALS as id:secret (the secret may contain colons)', () => {
    const c = credentialsFromEnv({ HF_CREDENTIALS: 'id-2:sec:ret' });
    expect(c?.keyId).toBe('id-2');
    expect(c?.hasSecret('sec:ret')).toBe(true);
  });

  it('HF_API_KEY plus HF_API_SECRET', () => {
    const c = credentialsFromEnv({ HF_API_KEY: 'id-3', HF_API_SECRET: 'secret-3' });
    expect(c?.keyId).toBe('id-3');
    expect(c?.hasSecret('secret-3')).toBe(true);
  });

  it('only one of HF_API_KEY / HF_API_SECRET is an error naming the missing one', () => {
    expect(thrown(() => credentialsFromEnv({ HF_API_KEY: 'id-3' })).message).toMatch(/only HF_API_KEY is set/);
    const error = thrown(() => credentialsFromEnv({ HF_API_SECRET: 'secret-only-value' }));
    expect(error.code).toBe('credentials');
    expect(error.message).toMatch(/only HF_API_SECRET is set/);
    expect(error.message).not.toContain('secret-only-value');
  });

  it('HF_KEY without a colon is refused without echoing the value', () => {
    const error = thrown(() => credentialsFromEnv({ HF_KEY: 'justonelongsecretvalue' }));
    expect(error.code).toBe('credentials');
    expect(error.message).not.toContain('justonelongsecretvalue');
  });

  it('nothing set: undefined', () => {
    expect(credentialsFromEnv({})).toBeUndefined();
  });

  it('parseCredentialPair refuses an empty id or an empty secret', () => {
    expect(thrown(() => parseCredentialPair(':secret', 'X')).code).toBe('credentials');
    expect(thrown(() => parseCredentialPair('id:', 'X')).code).toBe('credentials');
  });
});

describe('credentials file', () => {
  it('a line id:secret with mode 0600 is accepted', () => {
    const c = credentialsFromFile(credentialsFile('pair', '# my key\nfile-id:file-secret-1\n', 0o600));
    expect(c.keyId).toBe('file-id');
    expect(c.hasSecret('file-secret-1')).toBe(true);
  });

  it('YAML with key_id and key_secret (mode 0600) is accepted', () => {
    const c = credentialsFromFile(credentialsFile('yaml', 'key_id: yaml-id\nkey_secret: yaml-secret-1\n', 0o600));
    expect(c.keyId).toBe('yaml-id');
    expect(c.hasSecret('yaml-secret-1')).toBe(true);
  });

  it.each([0o640, 0o604, 0o644, 0o660])('mode %o (readable by group or others) is refused', (mode) => {
    const path = credentialsFile(`open-${mode.toString(8)}`, 'file-id:file-secret-2\n', mode);
    const error = thrown(() => credentialsFromFile(path));
    expect(error.code).toBe('credentials');
    expect(error.message).toContain('chmod 600');
    expect(error.message).not.toContain('file-secret-2');
  });

  it('YAML without key_secret is refused', () => {
    const error = thrown(() => credentialsFromFile(credentialsFile('partial', 'key_id: yaml-id\n', 0o600)));
    expect(error.message).toMatch(/key_id and key_secret/);
  });

  it('a missing file is a credentials error', () => {
    expect(thrown(() => credentialsFromFile(join(dir, 'absent'))).code).toBe('credentials');
  });

  it('a directory, or a file that cannot be read, is a credentials error in one sentence, not an internal one (exit 70)', () => {
    const folder = join(dir, 'a-folder');
    mkdirSync(folder, { mode: 0o700 });
    const error = thrown(() => credentialsFromFile(folder));
    expect(error.code).toBe('credentials');
    expect(error.message).toBe(`The credentials file ${folder} is not a file (a directory or a device).`);
  });
});
