import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { main, usage, VERSION } from '../../src/cli/main.js';
import type { CliIO } from '../../src/cli/io.js';

function capture(env: NodeJS.ProcessEnv = {}): CliIO & { stdout: string[]; stderr: string[] } {
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

describe('genpipe CLI shell', () => {
  it('prints usage with every command and the exit codes for --help, exit 0', async () => {
    const io = capture();
    expect(await main(['--help'], io)).toBe(0);
    expect(io.stdout.join('\n')).toBe(usage());
    expect(usage()).toMatch(/catalog[\s\S]*status[\s\S]*cancel/);
    expect(usage()).toContain('2 invalid input');
  });

  it('refuses an unknown command with one sentence and exit 2', async () => {
    const io = capture();
    expect(await main(['frobnicate'], io)).toBe(2);
    expect(io.stderr).toEqual(['genpipe: Unknown command "frobnicate"; run genpipe --help for the list.']);
  });

  it('refuses an unknown flag with exit 2 and no stack trace', async () => {
    const io = capture();
    expect(await main(['status', 'abc', '--bogus'], io)).toBe(2);
    expect(io.stderr.join('\n')).toMatch(/^genpipe: Unknown option '--bogus'/);
    expect(io.stderr.join('\n')).not.toMatch(/\bat .*\.(ts|js):\d+/);
  });

  it('refuses a missing positional argument with exit 2', async () => {
    const io = capture();
    expect(await main(['cancel'], io)).toBe(2);
    expect(io.stderr).toEqual(['genpipe: genpipe cancel needs a request id.']);
  });

  it('refuses to run without an address, naming how to set one, exit 2', async () => {
    const io = capture({ HF_KEY: 'id:secret-value' });
    expect(await main(['status', '00000000-0000-4000-8000-000000000001'], io)).toBe(2);
    expect(io.stderr[0]).toContain('--base-url');
  });

  it('refuses to call an authenticated endpoint without credentials, exit 2', async () => {
    const io = capture({ GENPIPE_BASE_URL: 'http://127.0.0.1:9' });
    expect(await main(['status', '00000000-0000-4000-8000-000000000001'], io)).toBe(2);
    expect(io.stderr[0]).toMatch(/No credentials: set HF_KEY/);
  });

  it('reports an unreachable service in one sentence with exit 5', async () => {
    const io = capture({ GENPIPE_BASE_URL: 'http://127.0.0.1:9', HF_KEY: 'id:secret-value', GENPIPE_CONFIG: '' });
    const code = await main(['catalog', 'options'], io);
    expect(code).toBe(5);
    expect(io.stderr).toHaveLength(1);
    expect(io.stderr[0]).toMatch(/^genpipe: GET \/models\/vendor\/ai-influencer\/options failed: ECONNREFUSED/);
  });

  it('names the unreachable address and where it came from: environment, flag or config file', async () => {
    const fromEnv = capture({ GENPIPE_BASE_URL: 'http://127.0.0.1:9', HF_KEY: 'id:secret-value' });
    expect(await main(['catalog', 'options'], fromEnv)).toBe(5);
    expect(fromEnv.stderr[0]).toMatch(/^genpipe: GET \/models\/vendor\/ai-influencer\/options failed: ECONNREFUSED/);
    expect(fromEnv.stderr[0]).toContain(
      '. The service at http://127.0.0.1:9 (from GENPIPE_BASE_URL) could not be reached: check that it runs there, or set the address with --base-url, GENPIPE_BASE_URL or base_url in the config file (--config or GENPIPE_CONFIG).',
    );
    const fromFlag = capture({ GENPIPE_BASE_URL: 'http://127.0.0.1:9', HF_KEY: 'id:secret-value' });
    expect(await main(['catalog', 'options', '--base-url', 'http://127.0.0.1:9/'], fromFlag)).toBe(5);
    expect(fromFlag.stderr[0]).toContain('The service at http://127.0.0.1:9/ (from --base-url) could not be reached');
    const dir = mkdtempSync(join(tmpdir(), 'genpipe-main-'));
    const config = join(dir, 'genpipe.yaml');
    writeFileSync(config, 'base_url: http://127.0.0.1:9\n');
    const fromFile = capture({ HF_KEY: 'id:secret-value', GENPIPE_CONFIG: config });
    expect(await main(['catalog', 'options'], fromFile)).toBe(5);
    expect(fromFile.stderr[0]).toContain(
      `The service at http://127.0.0.1:9 (from base_url in the config file ${config}) could not be reached`,
    );
    expect(fromFile.stderr.join('\n')).not.toContain('secret-value');
  });
});

describe('the CLI for the daily loop', () => {
  it('suggests the nearest command for a typo, exit 2', async () => {
    const io = capture();
    expect(await main(['valdiate', 'm.yaml'], io)).toBe(2);
    expect(io.stderr).toEqual(['genpipe: Unknown command "valdiate"; did you mean "validate"? (genpipe --help lists the commands).']);
  });

  it('suggests the nearest flag of the command for a typo, exit 2', async () => {
    const io = capture();
    expect(await main(['validate', 'm.yaml', '--emulater'], io)).toBe(2);
    expect(io.stderr).toEqual([
      "genpipe: Unknown option '--emulater'; did you mean --emulator? (genpipe validate --help lists the options).",
    ]);
    const far = capture();
    expect(await main(['validate', 'm.yaml', '--zzzzzzzz'], far)).toBe(2);
    expect(far.stderr).toEqual(["genpipe: Unknown option '--zzzzzzzz' (genpipe validate --help lists the options)."]);
  });

  it('suggests the nearest subcommand of catalog, queue and schedule, exit 2', async () => {
    for (const [argv, expected] of [
      [['catalog', 'optoins'], 'Unknown catalog "optoins"; did you mean "options"?'],
      [['queue', 'limts'], 'genpipe queue takes limits or status, not "limts"; did you mean "limits"?'],
      [['schedule', 'lsit'], 'genpipe schedule takes add, list or remove, not "lsit"; did you mean "list"?'],
    ] as const) {
      const io = capture();
      expect(await main([...argv], io)).toBe(2);
      expect(io.stderr).toEqual([`genpipe: ${expected}`]);
    }
  });

  it("prints a command's help for genpipe help <command>, exit 0", async () => {
    const { validateCommand } = await import('../../src/cli/commands/validate.js');
    const io = capture();
    expect(await main(['help', 'validate'], io)).toBe(0);
    expect(io.stdout).toEqual([validateCommand.help]);
    const typo = capture();
    expect(await main(['help', 'valdate'], typo)).toBe(2);
    expect(typo.stderr[0]).toContain('did you mean "validate"?');
  });

  it('prints the version for -V, --version and version', async () => {
    for (const word of ['-V', '--version', 'version']) {
      const io = capture();
      expect(await main([word], io)).toBe(0);
      expect(io.stdout).toEqual([VERSION]);
    }
  });
});
