import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { readConfigFile, resolveConfig } from '../../src/api/config.js';
import { thrown } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'genpipe-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let counter = 0;
function file(text: string, mode = 0o600): string {
  const path = join(dir, `f${counter++}.yaml`);
  writeFileSync(path, text);
  chmodSync(path, mode);
  return path;
}

const CREDS = { HF_KEY: 'env-id:env-secret-value' };

describe('resolveConfig: flags > env > file > defaults', () => {
  const configFile = (): string =>
    file('base_url: https://file.test\nplatform_url: https://platform.file.test\ncdn_url: https://cdn.file.test\nvendor: filevendor\n');

  it('the config file applies when neither flag nor env is set', () => {
    const config = resolveConfig({ flags: { config: configFile() }, env: CREDS });
    expect(config).toMatchObject({
      baseUrl: 'https://file.test',
      platformUrl: 'https://platform.file.test',
      cdnUrl: 'https://cdn.file.test',
      vendor: 'filevendor',
    });
  });

  it('the environment overrides the config file', () => {
    const env = {
      ...CREDS,
      GENPIPE_BASE_URL: 'https://env.test',
      GENPIPE_PLATFORM_URL: 'https://platform.env.test',
      GENPIPE_CDN_URL: 'https://cdn.env.test',
      GENPIPE_VENDOR: 'envvendor',
    };
    const config = resolveConfig({ flags: { config: configFile() }, env });
    expect(config).toMatchObject({
      baseUrl: 'https://env.test',
      platformUrl: 'https://platform.env.test',
      cdnUrl: 'https://cdn.env.test',
      vendor: 'envvendor',
    });
  });

  it('flags override the environment and the config file', () => {
    const env = { ...CREDS, GENPIPE_BASE_URL: 'https://env.test', GENPIPE_VENDOR: 'envvendor' };
    const flags = {
      config: configFile(),
      baseUrl: 'https://flag.test',
      platformUrl: 'https://platform.flag.test',
      cdnUrl: 'https://cdn.flag.test',
      vendor: 'flagvendor',
    };
    expect(resolveConfig({ flags, env })).toMatchObject({
      baseUrl: 'https://flag.test',
      platformUrl: 'https://platform.flag.test',
      cdnUrl: 'https://cdn.flag.test',
      vendor: 'flagvendor',
    });
  });

  it('GENPIPE_CONFIG names the config file when no flag does', () => {
    expect(resolveConfig({ env: { ...CREDS, GENPIPE_CONFIG: configFile() } }).vendor).toBe('filevendor');
  });

  it('defaults: platform_url and cdn_url default to base_url, vendor to "vendor", and documented timeouts and retry', () => {
    const config = resolveConfig({ flags: { baseUrl: 'https://only.test/' }, env: CREDS });
    expect(config.baseUrl).toBe('https://only.test');
    expect(config.platformUrl).toBe('https://only.test');
    expect(config.cdnUrl).toBe('https://only.test');
    expect(config.vendor).toBe('vendor');
    expect(config.timeouts).toEqual({ connectMs: 10_000, headersMs: 30_000, bodyMs: 60_000 });
    expect(config.retry).toEqual({ maxAttempts: 5, baseMs: 250, capMs: 20_000, maxRetryAfterMs: 60_000 });
  });

  it('timeouts and retry settings come from the config file', () => {
    const path = file('base_url: https://f.test\ntimeouts:\n  connect_ms: 111\nretry:\n  max_attempts: 2\n  base_ms: 5\n  cap_ms: 50\n');
    const config = resolveConfig({ flags: { config: path }, env: CREDS });
    expect(config.timeouts.connectMs).toBe(111);
    expect(config.retry).toMatchObject({ maxAttempts: 2, baseMs: 5, capMs: 50 });
  });

  it('no address at all is a config error that says how to set one', () => {
    const error = thrown(() => resolveConfig({ env: CREDS }));
    expect(error.code).toBe('config');
    expect(error.message).toMatch(/--base-url/);
    expect(resolveConfig({ env: CREDS, fallbackBaseUrl: 'http://127.0.0.1:9' }).baseUrl).toBe('http://127.0.0.1:9');
  });

  it('an address that is not http(s), or that carries user info, is refused', () => {
    expect(thrown(() => resolveConfig({ flags: { baseUrl: 'ftp://x.test' }, env: CREDS })).code).toBe('config');
    expect(thrown(() => resolveConfig({ flags: { baseUrl: 'https://u:p@x.test' }, env: CREDS })).code).toBe('config');
    expect(thrown(() => resolveConfig({ flags: { baseUrl: 'not a url' }, env: CREDS })).code).toBe('config');
  });

  it('a vendor that is not one path segment is refused', () => {
    expect(thrown(() => resolveConfig({ flags: { baseUrl: 'https://x.test', vendor: 'a/b' }, env: CREDS })).code).toBe('config');
  });

  it('missing credentials are an error unless not required', () => {
    expect(thrown(() => resolveConfig({ flags: { baseUrl: 'https://x.test' }, env: {} })).code).toBe('credentials');
    expect(resolveConfig({ flags: { baseUrl: 'https://x.test' }, env: {}, requireCredentials: false }).credentials).toBeUndefined();
  });

  it('credentials: the --credentials file wins over the environment, which wins over credentials_file', () => {
    const flagFile = file('flag-id:flag-secret-1\n');
    const cfgCreds = file('cfg-id:cfg-secret-1\n');
    const cfg = file(`base_url: https://x.test\ncredentials_file: ${cfgCreds}\n`);
    expect(resolveConfig({ flags: { config: cfg, credentialsFile: flagFile }, env: CREDS }).credentials?.keyId).toBe('flag-id');
    expect(resolveConfig({ flags: { config: cfg }, env: CREDS }).credentials?.keyId).toBe('env-id');
    expect(resolveConfig({ flags: { config: cfg }, env: {} }).credentials?.keyId).toBe('cfg-id');
  });
});

describe('config file errors name file:line:col', () => {
  it('an unknown key is located at the key', () => {
    const path = file('base_url: https://x.test\nbase_ulr: https://typo.test\n');
    const error = thrown(() => readConfigFile(path));
    expect(error.code).toBe('config');
    expect(error.message).toContain(`${path}:2:1`);
    expect(error.message).toContain('base_ulr');
    expect(error.message).toMatch(/unknown setting/);
  });

  it('an unknown nested key is located at the nested key', () => {
    const path = file('timeouts:\n  connect_ms: 5\n  conect_ms: 6\n');
    const error = thrown(() => readConfigFile(path));
    expect(error.message).toContain(`${path}:3:3`);
    expect(error.message).toContain('timeouts.conect_ms');
  });

  it('a bad value is located at the value', () => {
    const path = file('base_url: https://x.test\nvendor: a/b\n');
    const error = thrown(() => readConfigFile(path));
    expect(error.message).toContain(`${path}:2:9`);
    expect(error.message).toContain('vendor');
  });

  it('a bad nested value is located at the value', () => {
    const path = file('retry:\n  max_attempts: 0\n');
    const error = thrown(() => readConfigFile(path));
    expect(error.message).toContain(`${path}:2:17`);
    expect(error.message).toContain('retry.max_attempts');
  });

  it('a valid file is read', () => {
    expect(readConfigFile(file('base_url: https://x.test\nvendor: acme\n'))).toEqual({ base_url: 'https://x.test', vendor: 'acme' });
  });

  it('a YAML syntax error and a missing file are config errors', () => {
    expect(thrown(() => readConfigFile(file('base_url: [unclosed\n'))).code).toBe('config');
    expect(thrown(() => readConfigFile(join(dir, 'absent.yaml'))).code).toBe('config');
  });
});

describe('plain http only to loopback, unless allowed (reliability rule 24)', () => {
  const SETTINGS = [
    { name: 'base_url', flag: 'baseUrl', cli: '--base-url', env: 'GENPIPE_BASE_URL' },
    { name: 'platform_url', flag: 'platformUrl', cli: '--platform-url', env: 'GENPIPE_PLATFORM_URL' },
    { name: 'cdn_url', flag: 'cdnUrl', cli: '--cdn-url', env: 'GENPIPE_CDN_URL' },
  ] as const;
  const BASE = { baseUrl: 'https://base.test' };
  const refusal = (name: string, from: string, host = 'example.test'): string =>
    `${name} (${from}) is plain http to ${host}, which would send your credentials unencrypted: use https, or pass --allow-insecure-http (GENPIPE_ALLOW_INSECURE_HTTP=1, or allow_insecure_http: true in the config file) to accept that.`;

  for (const s of SETTINGS) {
    it(`${s.name}: http://example.test is refused from the flag, the environment and the config file`, () => {
      const fromFlag = thrown(() => resolveConfig({ flags: { ...BASE, [s.flag]: 'http://example.test' }, env: CREDS }));
      expect(fromFlag.code).toBe('config');
      expect(fromFlag.message).toBe(refusal(s.name, `from ${s.cli}`));

      const fromEnv = thrown(() =>
        resolveConfig({ flags: s.name === 'base_url' ? {} : BASE, env: { ...CREDS, [s.env]: 'http://example.test/' } }),
      );
      expect(fromEnv.message).toBe(refusal(s.name, `from ${s.env}`));

      const path = file(`${s.name === 'base_url' ? '' : 'base_url: https://base.test\n'}${s.name}: http://example.test\n`);
      const fromFile = thrown(() => resolveConfig({ flags: { config: path }, env: CREDS }));
      expect(fromFile.message).toBe(refusal(s.name, `from the config file ${path}`));
    });

    it(`${s.name}: http://example.test is accepted with --allow-insecure-http, GENPIPE_ALLOW_INSECURE_HTTP=1 or allow_insecure_http: true`, () => {
      const key = s.flag;
      expect(resolveConfig({ flags: { ...BASE, [s.flag]: 'http://example.test', allowInsecureHttp: true }, env: CREDS })[key]).toBe(
        'http://example.test',
      );
      expect(
        resolveConfig({ flags: { ...BASE, [s.flag]: 'http://example.test' }, env: { ...CREDS, GENPIPE_ALLOW_INSECURE_HTTP: '1' } })[key],
      ).toBe('http://example.test');
      const path = file(
        `${s.name === 'base_url' ? '' : 'base_url: https://base.test\n'}${s.name}: http://example.test\nallow_insecure_http: true\n`,
      );
      expect(resolveConfig({ flags: { config: path }, env: CREDS })[key]).toBe('http://example.test');
    });
  }

  it('platform_url and cdn_url inherit an http base_url, and are refused with it', () => {
    expect(thrown(() => resolveConfig({ flags: { baseUrl: 'http://gen.example.test:8080' }, env: CREDS })).message).toBe(
      refusal('base_url', 'from --base-url', 'gen.example.test:8080'),
    );
    const allowed = resolveConfig({ flags: { baseUrl: 'http://gen.example.test:8080', allowInsecureHttp: true }, env: CREDS });
    expect([allowed.platformUrl, allowed.cdnUrl]).toEqual(['http://gen.example.test:8080', 'http://gen.example.test:8080']);
  });

  it('https anywhere, and http to localhost, 127.0.0.0/8 and ::1, need no permission', () => {
    for (const url of [
      'https://example.test',
      'http://localhost:8787',
      'http://LOCALHOST',
      'http://127.0.0.1:9',
      'http://127.255.0.7',
      'http://[::1]:8080',
      'http://[0:0:0:0:0:0:0:1]',
      'http://2130706433',
      'http://0x7f.1',
    ]) {
      const config = resolveConfig({ flags: { baseUrl: url, platformUrl: url, cdnUrl: url }, env: CREDS });
      expect(config.baseUrl).toBe(url);
    }
    // The embedded emulator's fallback address.
    expect(resolveConfig({ env: CREDS, fallbackBaseUrl: 'http://127.0.0.1:41234' }).baseUrl).toBe('http://127.0.0.1:41234');
  });

  it('hosts that only look like loopback are refused', () => {
    for (const url of [
      'http://localhost.example.test',
      'http://127.0.0.1.example.test',
      'http://0.0.0.0:8080',
      'http://[::ffff:127.0.0.1]',
      'http://10.0.0.1',
      'http://[::2]',
    ]) {
      expect(thrown(() => resolveConfig({ flags: { baseUrl: url }, env: CREDS })).message).toMatch(
        /^base_url \(from --base-url\) is plain http to /,
      );
    }
  });

  it('only GENPIPE_ALLOW_INSECURE_HTTP=1 allows it, and allow_insecure_http must be a boolean', () => {
    for (const value of ['0', 'true', 'yes', '']) {
      expect(
        thrown(() => resolveConfig({ flags: { baseUrl: 'http://example.test' }, env: { ...CREDS, GENPIPE_ALLOW_INSECURE_HTTP: value } }))
          .code,
      ).toBe('config');
    }
    const path = file('base_url: http://example.test\nallow_insecure_http: "yes"\n');
    expect(thrown(() => resolveConfig({ flags: { config: path }, env: CREDS })).message).toContain(`${path}:2:22`);
  });
});
