import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findConfigFile, SYSTEM_CONFIG_FILE } from '../../src/api/config.js';
import { main } from '../../src/cli/main.js';
import type { CliIO } from '../../src/cli/io.js';
import { cleanTemps, HF_KEY, sheetsManifest, tempDir } from '../run/runner-helpers.js';

const BIN = join(import.meta.dirname, '..', '..', 'bin', 'genpipe.js');

function capture(env: NodeJS.ProcessEnv): CliIO & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  return {
    stdout,
    stderr,
    out: (t) => stdout.push(t),
    write: async (t) => void stdout.push(t),
    err: (t) => stderr.push(t),
    env,
    signal: new AbortController().signal,
  };
}

describe('where the config file is found', () => {
  const all = (): boolean => true;
  const env = { HOME: '/home/u', XDG_CONFIG_HOME: '/xdg', GENPIPE_CONFIG: '/env.yaml' };

  it('takes --config, then GENPIPE_CONFIG, then the XDG config home, then ~/.config, then /etc', () => {
    expect(findConfigFile({ config: '/flag.yaml' }, env, all)).toEqual({ path: '/flag.yaml', from: '--config' });
    expect(findConfigFile({}, env, all)).toEqual({ path: '/env.yaml', from: 'GENPIPE_CONFIG' });
    expect(findConfigFile({}, { ...env, GENPIPE_CONFIG: '' }, all)).toEqual({ path: '/xdg/genpipe/config.yaml', from: 'user' });
    expect(findConfigFile({}, { HOME: '/home/u' }, all)).toEqual({ path: '/home/u/.config/genpipe/config.yaml', from: 'user' });
    expect(findConfigFile({}, { HOME: '/home/u' }, (p) => p === SYSTEM_CONFIG_FILE)).toEqual({
      path: '/etc/genpipe/config.yaml',
      from: 'system',
    });
    expect(SYSTEM_CONFIG_FILE).toBe('/etc/genpipe/config.yaml');
  });

  it('finds nothing when no candidate exists, and never looks past an XDG config home that is set', () => {
    expect(findConfigFile({}, { HOME: '/home/u' }, () => false)).toBeUndefined();
    const looked: string[] = [];
    findConfigFile({}, { HOME: '/home/u', XDG_CONFIG_HOME: '/xdg' }, (p) => (looked.push(p), false));
    expect(looked).toEqual(['/xdg/genpipe/config.yaml', '/etc/genpipe/config.yaml']);
  });
});

afterAll(cleanTemps);

describe('genpipe config', () => {
  it('prints each setting with where it came from, secrets only as set or not set', async () => {
    const home = tempDir();
    mkdirSync(join(home, '.config', 'genpipe'), { recursive: true });
    writeFileSync(
      join(home, '.config', 'genpipe', 'config.yaml'),
      'base_url: https://file.example\nvendor: acme\nredis_url: redis://user:hunter2@127.0.0.1:6379\ntimeouts: {connect_ms: 1234}\n',
    );
    const io = capture({ HOME: home, GENPIPE_VENDOR: 'fromenv', HF_KEY: 'id:topsecret' });
    expect(await main(['config', '--base-url', 'https://flag.example'], io)).toBe(0);
    const text = io.stdout.join('\n');
    const line = (name: string): string => io.stdout.find((l) => l.startsWith(`${name} `)) ?? '';
    expect(io.stdout[0]).toBe(`config file: ${join(home, '.config', 'genpipe', 'config.yaml')} (found: the user config)`);
    expect(line('base_url')).toMatch(/https:\/\/flag\.example +\(flag: --base-url\)$/);
    expect(line('platform_url')).toMatch(/https:\/\/flag\.example +\(default: as base_url\)$/);
    expect(line('vendor')).toMatch(/fromenv +\(environment: GENPIPE_VENDOR\)$/);
    expect(line('credentials')).toMatch(/ set +\(environment: HF_KEY\)$/);
    expect(line('redis_url')).toMatch(/redis:\/\/user:\*\*\*@127\.0\.0\.1:6379 +\(file: .*config\.yaml\)$/);
    expect(line('timeouts.connect_ms')).toMatch(/1234 +\(file: /);
    expect(line('credits_per_usd')).toMatch(/100 +\(default\)$/);
    expect(text).not.toContain('topsecret');
    expect(text).not.toContain('hunter2');

    const none = capture({ HOME: tempDir() });
    expect(await main(['config', '--json'], none)).toBe(0);
    const json = JSON.parse(none.stdout.join('\n')) as { file: unknown; settings: { name: string; value: string; source: string }[] };
    expect(json.file).toBeNull();
    expect(json.settings.find((s) => s.name === 'credentials')).toMatchObject({ value: 'not set', source: 'default' });
    expect(json.settings.find((s) => s.name === 'base_url')).toMatchObject({ value: 'not set', source: 'default' });
  });

  it('refuses a config file it finds that is invalid, located at file:line:col (exit 2)', async () => {
    const xdg = tempDir();
    mkdirSync(join(xdg, 'genpipe'));
    writeFileSync(join(xdg, 'genpipe', 'config.yaml'), 'base_url: https://a.example\nbase_ulr: https://b.example\n');
    const io = capture({ XDG_CONFIG_HOME: xdg });
    expect(await main(['config'], io)).toBe(2);
    expect(io.stderr.join('\n')).toMatch(/config\.yaml:2:1.*base_ulr/);
    const named = capture({ GENPIPE_CONFIG: join(xdg, 'absent.yaml') });
    expect(await main(['config'], named)).toBe(2);
    expect(named.stderr).toEqual([`genpipe: Cannot read the config file ${join(xdg, 'absent.yaml')}: ENOENT.`]);
  });
});

describe('the cron and systemd lines run as written', () => {
  let emulator: ChildProcess;
  let url = '';
  beforeAll(async () => {
    // A standalone emulator, as a host would run one: its own process.
    emulator = spawn(process.execPath, [BIN, 'emulator', '--port', '0', '--time-scale', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
    url = await new Promise<string>((resolve, reject) => {
      let out = '';
      emulator.stdout?.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        const found = /listening on (http:\/\/\S+)/.exec(out)?.[1];
        if (found) resolve(found);
      });
      emulator.on('exit', () => reject(new Error(`emulator exited: ${out}`)));
      setTimeout(() => reject(new Error('emulator did not start')), 15_000).unref();
    });
  });
  afterAll(() => void emulator.kill('SIGKILL'));

  /** /srv/pipelines with nightly.yaml and a credentials file (mode 600). */
  function pipelines(): string {
    const dir = tempDir();
    const manifest = sheetsManifest(dir, 2, { name: 'nightly' });
    spawnSync('mv', [manifest, join(dir, 'nightly.yaml')]);
    writeFileSync(join(dir, 'credentials'), `${HF_KEY}\n`);
    chmodSync(join(dir, 'credentials'), 0o600);
    return dir;
  }

  /** A job's whole environment, as cron gives one: HOME, LOGNAME, SHELL and a short PATH, nothing exported from a shell. */
  function cronEnv(home: string, extra: Record<string, string> = {}): Record<string, string> {
    return { HOME: home, LOGNAME: 'genpipe', SHELL: '/bin/sh', PATH: '/usr/bin:/bin', ...extra };
  }

  const genpipe = `${process.execPath} ${BIN}`;

  it('the cron line finds the address in ~/.config/genpipe/config.yaml, and in $XDG_CONFIG_HOME when it is set', () => {
    for (const xdg of [false, true]) {
      const srv = pipelines();
      const home = tempDir();
      const configDir = xdg ? join(home, 'xdg', 'genpipe') : join(home, '.config', 'genpipe');
      mkdirSync(configDir, { recursive: true });
      writeFileSync(join(configDir, 'config.yaml'), `base_url: ${url}\n`);
      const line = `cd ${srv} && ${genpipe} run nightly.yaml --credentials ${srv}/credentials --quiet`;
      const result = spawnSync('/bin/sh', ['-c', line], {
        env: cronEnv(home, xdg ? { XDG_CONFIG_HOME: join(home, 'xdg') } : {}),
        encoding: 'utf8',
      });
      expect(result.stderr).toBe('');
      expect(result.status, result.stdout).toBe(0);
      expect(result.stdout).toMatch(/2 completed/);
    }
  });

  it('the same line with no config anywhere exits 2 with the one sentence', () => {
    const srv = pipelines();
    const result = spawnSync('/bin/sh', ['-c', `cd ${srv} && ${genpipe} run nightly.yaml --credentials ${srv}/credentials --quiet`], {
      env: cronEnv(tempDir()),
      encoding: 'utf8',
    });
    expect(result.status).toBe(2);
    expect(result.stderr).toBe(
      'genpipe: No service address is set: use --base-url, GENPIPE_BASE_URL or base_url in the config file (or --emulator).\n',
    );
  });

  it("the systemd unit's ExecStart, from its WorkingDirectory, with the service user's HOME", () => {
    const srv = pipelines();
    const home = tempDir();
    mkdirSync(join(home, '.config', 'genpipe'), { recursive: true });
    writeFileSync(join(home, '.config', 'genpipe', 'config.yaml'), `base_url: ${url}\n`);
    const result = spawnSync(process.execPath, [BIN, 'run', 'nightly.yaml', '--credentials', `${srv}/credentials`, '--json-logs'], {
      cwd: srv,
      env: { HOME: home, PATH: '/usr/bin:/bin' },
      encoding: 'utf8',
    });
    expect(result.status, result.stderr).toBe(0);
    expect(
      result.stdout
        .split('\n')
        .filter(Boolean)
        .map((l) => (JSON.parse(l) as { type: string }).type),
    ).toContain('run_finished');
  });
});
