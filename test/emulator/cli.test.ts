/** `genpipe emulator`: the first line, the credentials line, clean shutdown, and refused flags. */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { until } from './helpers.js';

function capture(): CliIO & { stdout: string[]; stderr: string[]; controller: AbortController } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  const controller = new AbortController();
  return {
    stdout,
    stderr,
    controller,
    out: (t) => stdout.push(t),
    write: async (t) => void stdout.push(t),
    err: (t) => stderr.push(t),
    env: {},
    signal: controller.signal,
  };
}

describe('genpipe emulator', () => {
  it('prints "listening on http://HOST:PORT" first, then the credentials, serves, and exits 0 on SIGINT', async () => {
    const io = capture();
    const done = main(['emulator', '--port', '0', '--time-scale', '0', '--seed', '9', '--faults', 'none'], io);
    const first = await until(() => io.stdout[0]);
    expect(first).toMatch(/^listening on http:\/\/127\.0\.0\.1:\d+$/);
    expect(first).not.toMatch(/:0$/);
    expect(io.stdout[1]).toBe('credentials: HF_KEY=00000000-0000-4000-8000-000000000000:emulator-secret');
    const url = first.slice('listening on '.length);
    const res = await request(`${url}/models/vendor/ai-influencer/options`);
    expect(res.statusCode).toBe(200);
    await res.body.dump();
    io.controller.abort();
    expect(await done).toBe(0);
    await expect(request(`${url}/models/vendor/ai-influencer/options`)).rejects.toThrow();
  });

  const refusals: [string, string[], RegExp][] = [
    ['an unknown flag', ['--bogus'], /Unknown option '--bogus'/],
    ['a bad port', ['--port', '70000'], /--port must be an integer from 0 to 65535/],
    ['a negative time scale', ['--time-scale=-1'], /--time-scale must be a number >= 0/],
    ['an unknown fault profile file', ['--faults', '/nonexistent/faults.yaml'], /Cannot read the fault file/],
    ['a malformed account', ['--account', 'nocolon'], /--account must have the form KEY_ID:SECRET/],
  ];
  for (const [name, args, message] of refusals) {
    it(`refuses ${name} with one sentence and exit 2`, async () => {
      const io = capture();
      expect(await main(['emulator', ...args], io)).toBe(2);
      expect(io.stderr).toHaveLength(1);
      expect(io.stderr[0]).toMatch(message);
      expect(io.stdout).toEqual([]);
    });
  }

  it('refuses a fault file with a bad after-processing knob with its location, exit 2, before listening', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'genpipe-cli-')), 'faults.yaml');
    writeFileSync(file, 'extends: none\nsubmit:\n  error_502_after: yes\n');
    const io = capture();
    expect(await main(['emulator', '--port', '0', '--faults', file], io)).toBe(2);
    expect(io.stderr).toHaveLength(1);
    expect(io.stderr[0]).toMatch(/faults\.yaml:3:20: submit\.error_502_after: /);
    expect(io.stdout).toEqual([]);
  });

  it('refuses a bad accounts file with its location, exit 2', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'genpipe-cli-')), 'accounts.yaml');
    writeFileSync(file, 'accounts: []\n');
    const io = capture();
    expect(await main(['emulator', '--accounts', file], io)).toBe(2);
    expect(io.stderr[0]).toMatch(/accounts\.yaml:1:11: accounts: /);
  });
});
