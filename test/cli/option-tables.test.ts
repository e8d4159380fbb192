import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { COMMANDS, main } from '../../src/cli/main.js';
import type { CliIO } from '../../src/cli/io.js';
import { flagSignature, type Command } from '../../src/cli/options.js';
import { cliReference, cliReferenceOf } from '../../src/cli/reference.js';
import { CONNECTION } from '../../src/cli/shared-options.js';
import { startEmulator } from '../../src/emulator/index.js';
import { cleanTemps, HF_KEY, tempDir } from '../run/runner-helpers.js';

afterAll(cleanTemps);

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

const REFERENCE = join(import.meta.dirname, '..', '..', 'docs', 'reference', 'cli.md');
const loaded = async (): Promise<Command[]> => Promise.all(COMMANDS.map((c) => c.load()));

/** The section of the reference that documents `genpipe <name>`. */
function sectionOf(reference: string, name: string): string {
  const start = reference.indexOf(`\n## genpipe ${name}\n`);
  if (start < 0) return '';
  const next = reference.indexOf('\n## ', start + 1);
  return reference.slice(start, next < 0 ? undefined : next);
}

describe('option tables: one source for parsing, --help and the reference', () => {
  it('docs/reference/cli.md is what `npm run docs:cli` makes from the tables today', async () => {
    expect(readFileSync(REFERENCE, 'utf8'), 'docs/reference/cli.md is stale: run npm run docs:cli').toBe(await cliReference());
  });

  it('the reference has a section for every command and a row for every flag of each', async () => {
    const reference = readFileSync(REFERENCE, 'utf8');
    for (const command of await loaded()) {
      const section = sectionOf(reference, command.name);
      expect(section, `genpipe ${command.name} has no entry`).not.toBe('');
      for (const group of command.groups)
        for (const [name, spec] of Object.entries(group.options))
          expect(section, `genpipe ${command.name} ${name} has no entry`).toContain(
            `| \`${flagSignature(name, spec).replace(/\|/g, '\\|')}\``,
          );
    }
  });

  it('the check sees a command or a flag that has no entry', async () => {
    const commands = await loaded();
    const entries = commands.map((command) => ({ summary: 'x', command }));
    const full = cliReferenceOf(entries);
    const withoutFlag = cliReferenceOf(
      entries.map((e) =>
        e.command.name === 'worker'
          ? {
              ...e,
              command: {
                ...e.command,
                groups: e.command.groups.map((g) => ({ ...g, options: { ...g.options, extra: { type: 'boolean', help: 'x' } } })),
              },
            }
          : e,
      ),
    );
    expect(sectionOf(full, 'worker')).not.toContain('`--extra`');
    expect(sectionOf(withoutFlag, 'worker')).toContain('`--extra`');
    expect(sectionOf(cliReferenceOf(entries.filter((e) => e.command.name !== 'runs')), 'runs')).toBe('');
  });

  it('every flag has help text, and every string flag names its value', async () => {
    for (const command of await loaded())
      for (const group of command.groups)
        for (const [name, spec] of Object.entries(group.options)) {
          expect(spec.help.trim(), `${command.name} --${name}`).not.toBe('');
          if (spec.type === 'string') expect(spec.value, `${command.name} --${name}`).toMatch(/^\S+$/);
        }
  });

  it('--help prints every flag of the tables, and parsing takes exactly those', async () => {
    for (const command of await loaded()) {
      const io = capture();
      expect(await main([command.name, '--help'], io)).toBe(0);
      const help = io.stdout.join('\n');
      expect(help).toBe(command.help);
      for (const group of command.groups)
        for (const [name, spec] of Object.entries(group.options)) expect(help).toContain(`  ${flagSignature(name, spec)}`);
      const unknown = capture();
      expect(await main([command.name, '--not-in-any-table'], unknown)).toBe(2);
      expect(unknown.stderr.join('\n')).toContain("Unknown option '--not-in-any-table'");
    }
  });

  it('every command that talks to a service or Redis takes the one shared connection table', async () => {
    const talkers = ['run', 'resume', 'validate', 'plan', 'diff', 'worker', 'queue', 'schedule', 'catalog', 'status', 'cancel'];
    for (const command of await loaded()) {
      if (!talkers.includes(command.name)) continue;
      // The very object, not a copy that could drift.
      expect(
        command.groups.some((g) => g.options === CONNECTION.options),
        `genpipe ${command.name}`,
      ).toBe(true);
    }
  });

  it('worker, queue and schedule never take --emulator, and refuse it without suggesting it', async () => {
    for (const name of ['worker', 'queue', 'schedule']) {
      const command = (await loaded()).find((c) => c.name === name) as Command;
      expect(command.help).not.toContain('--emulator');
      const io = capture();
      expect(
        await main(
          [name, 'list', '--emulator'].filter((a) => name === 'schedule' || a !== 'list'),
          io,
        ),
      ).toBe(2);
      expect(io.stderr).toEqual([`genpipe: Unknown option '--emulator' (genpipe ${name} --help lists the options).`]);
    }
  });

  it('a worker with no service address says so without suggesting --emulator (exit 2, before Redis is reached)', async () => {
    const io = capture({ HF_KEY: 'k:s' });
    expect(await main(['worker', '--redis', 'redis://127.0.0.1:1'], io)).toBe(2);
    expect(io.stderr).toEqual(['genpipe: No service address is set: use --base-url, GENPIPE_BASE_URL or base_url in the config file.']);
    const run = capture({ HF_KEY: 'k:s' });
    const dir = tempDir();
    const manifest = join(dir, 'm.yaml');
    writeFileSync(manifest, 'version: 1\nname: m\nsteps:\n  s:\n    model: character-sheet\n    input: {tier: cats, variation_index: 0}\n');
    expect(await main(['run', manifest, '--out', dir], run)).toBe(2);
    expect(run.stderr.join('\n')).toContain('(or --emulator)');
  });

  it('schedule add takes --config and uses it for the estimate; without an address it is refused without suggesting --emulator', async () => {
    const emulator = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
    try {
      const dir = tempDir();
      const manifest = join(dir, 'm.yaml');
      // A preset axis: the estimate lists the service's presets, so it needs the address.
      writeFileSync(
        manifest,
        'version: 1\nname: m\nprices: {marketing-image: 0.04}\nsteps:\n  s:\n    model: marketing-image\n    matrix:\n      preset: { presets: { limit: 2 } }\n    input: {prompt: hi, preset_id: "{{ preset.id }}"}\n',
      );
      writeFileSync(join(dir, 'genpipe.yaml'), `base_url: ${emulator.url}\n`);
      const args = ['schedule', 'add', manifest, '--cron', '30 2 * * *', '--out', dir, '--redis', 'redis://127.0.0.1:1'];
      const withConfig = capture({ HF_KEY });
      // Estimated through the config's address, then Redis is unreachable (exit 5).
      expect(await main([...args, '--config', join(dir, 'genpipe.yaml')], withConfig)).toBe(5);
      expect(withConfig.stdout[0]).toMatch(/^each run is estimated at US\$0\.08 \(2 instances\)/);
      const without = capture({ HF_KEY });
      expect(await main(args, without)).toBe(2);
      expect(without.stderr.join('\n')).toContain('No service address is set');
      expect(without.stderr.join('\n')).not.toContain('emulator');
    } finally {
      await emulator.close();
    }
  });
});
