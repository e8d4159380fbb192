// Every example of README.md and docs/ runs as written, so a renamed flag or field fails here
// before a reader meets it. A page's tested blocks run in order in one sandbox of their own: a
// copy of pipelines/ (also as /srv/pipelines), a fake HOME, `genpipe` and `npx genpipe` the built
// CLI, and an emulator as the configured service. docs/CONTRIBUTING.md lists the kinds of block.
import { spawn } from 'node:child_process';
import { chmodSync, cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { ROOT, testedBlocks, type DocBlock } from './doc-blocks.js';

const BIN = join(ROOT, 'bin', 'genpipe.js');
const HF_KEY = '00000000-0000-4000-8000-000000000000:emulator-secret';
// What a command may take at most: a bound, not a pace (the slowest, a nightly run, takes seconds).
const COMMAND_MS = 45_000;

let emu: Emulator;
beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0.001, log: () => {} });
});
afterAll(async () => {
  await emu.close();
});

interface Sandbox {
  dir: string;
  home: string;
}

/** The folders a page's examples name, made real under one temporary directory. */
function sandbox(): Sandbox {
  const dir = mkdtempSync(join(tmpdir(), 'genpipe-docs-'));
  const home = join(dir, 'home');
  mkdirSync(home);
  cpSync(join(ROOT, 'pipelines'), join(dir, 'pipelines'), { recursive: true });
  const srv = join(dir, 'srv', 'pipelines');
  cpSync(join(ROOT, 'pipelines'), srv, { recursive: true });
  writeFileSync(join(srv, 'credentials'), `${HF_KEY}\n`, { mode: 0o600 });
  writeFileSync(join(srv, 'genpipe.yaml'), `base_url: ${emu.url}\n`);
  mkdirSync(join(dir, 'var', 'log'), { recursive: true });
  const bin = join(dir, 'usr', 'local', 'bin');
  mkdirSync(bin, { recursive: true });
  writeFileSync(join(bin, 'genpipe'), `#!/bin/sh\nexec "${process.execPath}" "${BIN}" "$@"\n`);
  chmodSync(join(bin, 'genpipe'), 0o755);
  return { dir, home };
}

/** The host paths of the nightly examples, inside the sandbox. */
function hostPaths(text: string, box: Sandbox): string {
  return text.replace(/(^|[\s="'])\/(srv|usr\/local\/bin|var\/log)\//g, (_m, before: string, top: string) => `${before}${box.dir}/${top}/`);
}

/**
 * `<run-id>` in an example, as in `runs/quickstart/<run-id>`: the newest run in that folder when
 * the line runs (run ids sort by time), so one block may make a run and then resume it.
 */
function runIds(text: string): string {
  return text.replace(/(\S*\/)<run-id>/g, (_m, folder: string) => `${folder}"$(ls -1 ${folder} | tail -n 1)"`);
}

/** `NAME=value` words of an info string: the environment a block needs, which its text says. */
function blockEnv(block: DocBlock): Record<string, string> {
  return Object.fromEntries(
    block.tags.filter((t) => /^[A-Z_]+=/.test(t)).map((t) => [t.slice(0, t.indexOf('=')), t.slice(t.indexOf('=') + 1)]),
  );
}

// `npx genpipe` inside the clone runs the package's own CLI: the shim on PATH, without npm's start-up.
const PRELUDE = 'set -eo pipefail\nnpx() { if [ "$1" = genpipe ]; then shift; genpipe "$@"; else command npx "$@"; fi; }\n';

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

function bash(script: string, cwd: string, env: NodeJS.ProcessEnv): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', script], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'], timeout: COMMAND_MS });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** A command that serves: its first line names a loopback address that answers; Ctrl-C ends it. */
function serve(command: string, cwd: string, env: NodeJS.ProcessEnv): Promise<{ first: string; status: number; code: number | null }> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', `exec ${command.trim().replace(/^npx genpipe /, 'genpipe ')}`], {
      cwd,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), COMMAND_MS);
    let stdout = '';
    let stderr = '';
    let first: string | undefined;
    let status = 0;
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
      if (first !== undefined || !stdout.includes('\n')) return;
      first = stdout.split('\n')[0] as string;
      const url = /^listening on (http:\/\/127\.0\.0\.1:\d+)$/.exec(first)?.[1];
      if (url === undefined) return void child.kill('SIGINT');
      fetch(url).then(
        (res) => ((status = res.status), child.kill('SIGINT')),
        () => child.kill('SIGINT'),
      );
    });
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ first: first ?? `(no line; stderr: ${stderr})`, status, code });
    });
  });
}

const where = (b: DocBlock): string => `${b.file}:${b.line}`;

async function runBlock(block: DocBlock, box: Sandbox): Promise<void> {
  const env = {
    PATH: `${join(box.dir, 'usr', 'local', 'bin')}:${process.env.PATH ?? ''}`,
    HOME: box.home,
    GENPIPE_BASE_URL: emu.url,
    HF_KEY,
    ...blockEnv(block),
  };
  // cron and systemd start a command with next to no environment: what the example names is all it gets.
  const bare = { PATH: '/usr/bin:/bin', HOME: box.home };
  const text = runIds(hostPaths(block.text, box));
  if (block.tags[0] === 'manifest') {
    const file = join(box.dir, 'pipelines', `example-${block.line}.yaml`);
    writeFileSync(file, text);
    const ran = await bash(`genpipe validate ${file} --emulator`, box.dir, env);
    expect(ran.code, `${where(block)}: genpipe validate\n${ran.stdout}${ran.stderr}`).toBe(0);
    return;
  }
  if (block.lang === 'sh' && block.tags.includes('serve')) {
    const served = await serve(text, box.dir, env);
    expect(served.first, where(block)).toMatch(/^listening on http:\/\/127\.0\.0\.1:\d+$/);
    expect(served.status, `${where(block)}: the page it serves`).toBe(200);
    expect([0, 130], `${where(block)}: exit code after Ctrl-C`).toContain(served.code);
    return;
  }
  if (block.lang === 'sh') {
    const exit = Number(/^exit=(\d+)$/.exec(block.tags.find((t) => t.startsWith('exit=')) ?? '')?.[1] ?? 0);
    const ran = await bash(PRELUDE + text, box.dir, env);
    expect(ran.code, `${where(block)}\n${ran.stdout}${ran.stderr}`).toBe(exit);
    return;
  }
  if (block.lang === 'cron') {
    const entries = text.split('\n').filter((l) => l.trim() !== '' && !l.trim().startsWith('#'));
    expect(entries.length, where(block)).toBeGreaterThan(0);
    for (const entry of entries) {
      const m = /^((?:[\d*,/-]+\s+){5})(.+)$/.exec(entry);
      expect(m, `${where(block)}: five schedule fields, then the command`).not.toBeNull();
      const ran = await bash((m as RegExpExecArray)[2] as string, box.home, bare);
      expect(ran.code, `${where(block)}\n${ran.stdout}${ran.stderr}`).toBe(0);
    }
    const logs = readdirSync(join(box.dir, 'var', 'log')).map((f) => readFileSync(join(box.dir, 'var', 'log', f), 'utf8'));
    expect(logs.join(''), `${where(block)}: the log the entry appends to`).toMatch(/: completed; /);
    return;
  }
  if (block.lang === 'ini') {
    const units = unitsOf(text);
    const service = [...units.entries()].find(([name]) => name.endsWith('.service'));
    const timer = [...units.entries()].find(([name]) => name.endsWith('.timer'));
    expect(service && timer, `${where(block)}: a .service and its .timer`).toBeTruthy();
    const [serviceName, serviceUnit] = service as [string, Map<string, string>];
    const [timerName, timerUnit] = timer as [string, Map<string, string>];
    expect(timerName.replace(/\.timer$/, ''), where(block)).toBe(serviceName.replace(/\.service$/, ''));
    expect(timerUnit.get('OnCalendar'), `${where(block)}: the timer's OnCalendar`).toBeTruthy();
    expect(serviceUnit.get('Type'), where(block)).toBe('oneshot');
    const cwd = serviceUnit.get('WorkingDirectory') as string;
    const ran = await bash(serviceUnit.get('ExecStart') as string, cwd, bare);
    expect(ran.code, `${where(block)}\n${ran.stdout}${ran.stderr}`).toBe(0);
    const events = ran.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { type: string; summary?: { outcome: string } });
    expect(events.at(-1), `${where(block)}: --json-logs ends with the run's summary`).toMatchObject({
      type: 'run_finished',
      summary: { outcome: 'completed' },
    });
    return;
  }
  throw new Error(`${where(block)}: no way to test a \`${block.lang} ${block.tags.join(' ')}\` block`);
}

/** systemd units of one block, each introduced by a `# /etc/systemd/system/NAME` comment. */
function unitsOf(text: string): Map<string, Map<string, string>> {
  const units = new Map<string, Map<string, string>>();
  let current: Map<string, string> | undefined;
  for (const line of text.split('\n')) {
    const name = /^# \/etc\/systemd\/system\/(\S+)$/.exec(line)?.[1];
    if (name !== undefined) units.set(name, (current = new Map()));
    const kv = /^(\w+)=(.*)$/.exec(line);
    if (kv && current) current.set(kv[1] as string, kv[2] as string);
  }
  return units;
}

const blocks = testedBlocks();
const pages = [...new Set(blocks.map((b) => b.file))];

describe('the examples of README.md and docs/', () => {
  it('are there: the tour, the nightly jobs, manifests', () => {
    const kinds = new Set(blocks.map((b) => `${b.lang} ${b.tags[0]}`));
    expect([...kinds].sort()).toEqual(['cron test', 'ini test', 'sh test', 'yaml manifest']);
    expect(blocks.filter((b) => b.file === 'README.md').length).toBeGreaterThanOrEqual(5);
  });

  // Pages run side by side: their commands mostly wait (polls, the agent's 2 s turns), not compute.
  for (const page of pages) {
    it.concurrent(`${page} runs as written`, { timeout: 240_000 }, async () => {
      const box = sandbox();
      for (const block of blocks.filter((b) => b.file === page)) await runBlock(block, box);
    });
  }
});
