// Terminal injection: text from the service (a failed status's error), a
// manifest or a CSV, printed for a person, has its control characters made visible: no escape
// sequence reaches the terminal, and a CR or a newline cannot forge a line of its own. With
// --json-logs every stdout line is exact JSON and carries the error text as the service sent it.
// The emulator has no knob for a failure's text: a loopback proxy in front of it rewrites it.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { FAIL_MARKER } from '../../src/emulator/request-store.js';
import { oneLine, terminalSafe } from '../../src/util/terminal-text.js';
import { cleanTemps, runCli, sheetsManifest, tempDir } from '../run/runner-helpers.js';
import { startRewritingProxy, type RewritingProxy } from '../run/rewriting-proxy.js';

/** Clears the screen, sets the window title, forges a line after a CR and another after a newline, and opens a C1 CSI. */
const HOSTILE = '\u001b[2J\u001b]0;pwned\u0007boom\rfails[seed=9]: completed OK\nforged line\u009b31mred\u0000';
/** Anything a terminal would act on: C0 but tab and newline, DEL, C1. */
const ACTIVE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/;

let emu: Emulator;
let proxy: RewritingProxy;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
  proxy = await startRewritingProxy(emu.url, () => HOSTILE);
});
afterAll(async () => {
  await proxy.close();
  await emu.close();
  cleanTemps();
});

describe('text from the service', () => {
  it(
    'a failed status whose error carries escape sequences, a CR and a newline: stderr shows them escaped, each failure on its own one line',
    { timeout: 60_000 },
    async () => {
      const manifest = sheetsManifest(tempDir(), 2, { name: 'hostile', brief: `A mascot ${FAIL_MARKER}` });
      const result = await runCli(['run', manifest, '--out', tempDir(), '--rate', '1000'], { env: { GENPIPE_BASE_URL: proxy.url } });
      expect(result.code, result.stderr).toBe(1);
      const all = result.stdout + result.stderr;
      expect(all).not.toMatch(ACTIVE);
      const lines = result.stderr.split('\n');
      // No line starts with the forged text: it stays inside the line of the failure that quotes it.
      expect(lines.filter((l) => l.startsWith('fails[') || l.startsWith('forged line'))).toEqual([]);
      const failures = lines.filter((l) => l.startsWith('sheets[seed='));
      expect(failures).toHaveLength(2);
      for (const line of failures)
        expect(line).toContain('\\u001b[2J\\u001b]0;pwned\\u0007boom\\rfails[seed=9]: completed OK\\nforged line\\u009b31mred\\u0000');
    },
  );

  it(
    '--json-logs: every stdout line is JSON, and the failure carries the error exactly as the service sent it',
    { timeout: 60_000 },
    async () => {
      const manifest = sheetsManifest(tempDir(), 2, { name: 'hostilejson', brief: `A mascot ${FAIL_MARKER}` });
      const result = await runCli(['run', manifest, '--out', tempDir(), '--rate', '1000', '--json-logs'], {
        env: { GENPIPE_BASE_URL: proxy.url },
      });
      expect(result.code, result.stderr).toBe(1);
      expect(result.stdout + result.stderr).not.toMatch(ACTIVE);
      const events = result.stdout
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as { type: string; error?: string });
      const failed = events.filter((e) => e.type === 'instance_finished' && e.error !== undefined);
      expect(failed).toHaveLength(2);
      for (const e of failed) expect(e.error).toBe(HOSTILE);
    },
  );

  it('genpipe status of such a request prints its error on one line, escaped', { timeout: 30_000 }, async () => {
    const failed = emu.requests.inspect({}).find((r) => (r as { status: string }).status === 'failed') as
      { request_id?: string; id?: string } | undefined;
    const id = failed?.request_id ?? failed?.id;
    expect(id).toBeDefined();
    const result = await runCli(['status', String(id)], { env: { GENPIPE_BASE_URL: proxy.url } });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).not.toMatch(ACTIVE);
    expect(result.stdout.split('\n').filter((l) => l.startsWith('error: '))).toEqual([`error: ${oneLine(HOSTILE)}`]);
  });
});

describe('text from a manifest or a CSV', () => {
  it('a CSV key holding escape sequences: genpipe plan prints its instance ids escaped', { timeout: 30_000 }, async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'rows.csv'), `sku,brief\n"A\u001b[2JB",one\n"C\u009b1mD",two\n`);
    const manifest = join(dir, 'csv.yaml');
    writeFileSync(
      manifest,
      'version: 1\nname: csvhostile\nsteps:\n  sheets:\n    model: character-sheet\n    matrix:\n      row: { csv: rows.csv, key: sku }\n    input: { tier: cats, brief: "{{ row.brief }}" }\n',
    );
    const result = await runCli(['plan', manifest], { env: { GENPIPE_BASE_URL: 'http://127.0.0.1:9' } });
    expect(result.stdout + result.stderr).not.toMatch(ACTIVE);
  });

  it('a manifest error quoting a key with an escape sequence and a CR is printed escaped, on its line', { timeout: 30_000 }, async () => {
    const dir = tempDir();
    const manifest = join(dir, 'bad.yaml');
    writeFileSync(
      manifest,
      'version: 1\nname: bad\nsteps:\n  sheets:\n    model: character-sheet\n    input: { tier: cats, "x\\u001b]0;title\\u0007\\rgenpipe: all good": 1 }\n',
    );
    const result = await runCli(['validate', manifest]);
    expect(result.code).toBe(2);
    expect(result.stderr).not.toMatch(ACTIVE);
    expect(result.stderr.split('\n').filter((l) => l.startsWith('genpipe: all good'))).toEqual([]);
  });
});

describe('terminalSafe and oneLine', () => {
  it('escape every C0 (but tab; newline for terminalSafe), DEL and C1 character as JSON does, so a JSON line stays the same value', () => {
    for (let code = 0; code <= 0xa0; code++) {
      const c = String.fromCharCode(code);
      const safe = terminalSafe(`a${c}b`);
      const line = oneLine(`a${c}b`);
      expect(line).not.toMatch(ACTIVE);
      expect(line).not.toContain('\n');
      if (c === '\n') expect(safe).toBe('a\nb');
      else expect(safe).toBe(line);
      // Inside a JSON string, the escape reads back as the character itself.
      expect(JSON.parse(`"${terminalSafe(JSON.stringify(`a${c}b`).slice(1, -1))}"`)).toBe(`a${c}b`);
      if (ACTIVE.test(c)) expect(JSON.parse(`"${line}"`)).toBe(`a${c}b`);
    }
    expect(oneLine('a\tb')).toBe('a\tb');
    expect(oneLine('x\u2028y')).toBe('x\\u2028y');
  });
});
