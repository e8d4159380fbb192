// Every example of README.md and docs/ runs as written, so a renamed flag or field fails here
// before a reader meets it. A page's tested blocks run in order in one sandbox of their own: a
// copy of pipelines/ (also as /srv/pipelines), a fake HOME, `genpipe` and `npx genpipe` the built
// CLI, and an emulator as the configured service. docs/CONTRIBUTING.md lists the kinds of block.
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { readReview } from '../../src/review/review-store.js';
import { freePort } from '../free-port.js';
import { startLoopbackS3 } from '../sink/s3-server.js';
import { start, stopAll, until } from './processes.js';
import { fencedBlocks, isShownOnly, ROOT, saidToPrint, shownBlocks, testedBlocks, type DocBlock } from './doc-blocks.js';

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
  /** What the page's services add to each block's environment. */
  env: Record<string, string>;
  /** The page's fixed addresses and placeholders, made the sandbox's own. */
  rewrite(text: string): string;
  /** Commands that serve (redis-server, `genpipe worker`), started by the page's `sh hosts` blocks and stopped at its end. */
  serving: ChildProcess[];
  close(): Promise<void>;
}

/**
 * The folders a page's examples name, made real under one temporary directory. A page with an
 * `s3` block also gets an S3-compatible store on a free loopback port (s3rver) standing in for
 * MinIO: its `127.0.0.1:9000` and its `<... access key>` placeholders become the store's, and
 * `mc mb ALIAS/BUCKET` makes a bucket in it. A page with `sh hosts` blocks gets a free loopback
 * port for its `redis.internal:6379`, which its `redis-server` line serves.
 */
async function sandbox(page: readonly DocBlock[]): Promise<Sandbox> {
  const dir = mkdtempSync(join(tmpdir(), 'genpipe-docs-'));
  const home = join(dir, 'home');
  mkdirSync(home);
  cpSync(join(ROOT, 'pipelines'), join(dir, 'pipelines'), { recursive: true });
  const srv = join(dir, 'srv', 'pipelines');
  cpSync(join(ROOT, 'pipelines'), srv, { recursive: true });
  writeFileSync(join(srv, 'credentials'), `${HF_KEY}\n`, { mode: 0o600 });
  writeFileSync(join(srv, 'genpipe.yaml'), `base_url: ${emu.url}\n`);
  mkdirSync(join(dir, 'var', 'log'), { recursive: true });
  mkdirSync(join(dir, 'var', 'lib', 'node_exporter', 'textfile'), { recursive: true });
  const bin = join(dir, 'usr', 'local', 'bin');
  mkdirSync(bin, { recursive: true });
  const shim = (name: string, script: string): void => {
    writeFileSync(join(bin, name), `#!/bin/sh\nexec "${process.execPath}" "${script}" "$@"\n`);
    chmodSync(join(bin, name), 0o755);
  };
  shim('genpipe', BIN);
  const box: Sandbox = { dir, home, env: { GENPIPE_DOC_ROOT: ROOT }, rewrite: (text) => text, serving: [], close: async () => {} };
  if (page.some((b) => b.tags[0] === 'hosts')) {
    // The hosts' Redis, `redis.internal:6379`, is a redis-server of the page's own on a free loopback port,
    // and a worker's `--metrics PORT` is a free port too.
    const port = await freePort();
    const metrics = await freePort();
    const data = join(dir, 'redis');
    mkdirSync(data);
    box.rewrite = (text) =>
      text
        .replaceAll('redis://redis.internal:6379', `redis://127.0.0.1:${port}`)
        .replace(/ --metrics \d+\b/g, ` --metrics ${metrics}`)
        .replace(/^redis-server\b(.*)$/m, `redis-server$1 --port ${port} --bind 127.0.0.1 --dir ${data} --save ''`);
    box.close = () => stopAll(box.serving);
    return box;
  }
  if (!page.some((b) => b.tags.includes('s3'))) return box;
  const store = await startLoopbackS3({ buckets: [] });
  shim('mc', join(ROOT, 'test', 'docs', 'mc-mb.mjs'));
  box.env = {
    ...box.env,
    GENPIPE_DOC_S3_ENDPOINT: store.endpoint,
    GENPIPE_DOC_S3_KEY: store.accessKeyId,
    GENPIPE_DOC_S3_SECRET: store.secretAccessKey,
  };
  box.rewrite = (text) =>
    text
      .replaceAll('http://127.0.0.1:9000', store.endpoint)
      .replace(/<[^<>\n]*secret[^<>\n]*>/gi, store.secretAccessKey)
      .replace(/<[^<>\n]*access key[^<>\n]*>/gi, store.accessKeyId);
  box.close = () => store.stop();
  return box;
}

/** The host paths of the nightly examples, inside the sandbox. */
function hostPaths(text: string, box: Sandbox): string {
  return text.replace(
    /(^|[\s="'])\/(srv|usr\/local\/bin|var\/log|var\/lib)\//g,
    (_m, before: string, top: string) => `${before}${box.dir}/${top}/`,
  );
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
// `npm install` and `npm ci` (the README's first steps) check that the clone is installed: the
// test runs in a clone that .ci/run installed with `npm ci`, and must not reinstall it under itself.
const PRELUDE = [
  'set -eo pipefail',
  'npx() { if [ "$1" = genpipe ]; then shift; genpipe "$@"; else command npx "$@"; fi; }',
  'npm() { case "$1" in install|ci) [ -d "$GENPIPE_DOC_ROOT/node_modules/yaml" ] ;; *) command npm "$@" ;; esac; }',
  '',
].join('\n');

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

/** A command that serves: its first line names a loopback address whose `path` answers; Ctrl-C ends it. */
function serve(
  command: string,
  cwd: string,
  env: NodeJS.ProcessEnv,
  path = '/',
): Promise<{ first: string; status: number; code: number | null }> {
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
      fetch(url + path).then(
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

/** The value of a `word=value` tag of a block: `exit=3`, `file=minio.yaml`, `path=/_emulator/stats`. */
function tagValue(block: DocBlock, word: string): string | undefined {
  return block.tags.find((t) => t.startsWith(`${word}=`))?.slice(word.length + 1);
}

/** Two objects merged key by key, the second's values winning: a fragment laid over a manifest. */
function overlay(base: unknown, over: unknown): unknown {
  if (typeof base !== 'object' || base === null || Array.isArray(base)) return over;
  if (typeof over !== 'object' || over === null || Array.isArray(over)) return over;
  const merged: Record<string, unknown> = { ...(base as Record<string, unknown>) };
  for (const [key, value] of Object.entries(over)) merged[key] = overlay(merged[key], value);
  return merged;
}

type Runner = (block: DocBlock, text: string, box: Sandbox, env: NodeJS.ProcessEnv) => Promise<void>;

/** `yaml manifest`: written to pipelines/ (as `file=NAME`, or laid `over=NAME` of pipelines/), then validated. */
const manifest: Runner = async (block, text, box, env) => {
  const over = tagValue(block, 'over');
  const body =
    over === undefined ? text : stringifyYaml(overlay(parseYaml(readFileSync(join(box.dir, 'pipelines', over), 'utf8')), parseYaml(text)));
  const file = join(box.dir, 'pipelines', tagValue(block, 'file') ?? `example-${block.line}.yaml`);
  writeFileSync(file, body);
  const ran = await bash(`genpipe validate ${file} --emulator`, box.dir, env);
  expect(ran.code, `${where(block)}: genpipe validate\n${ran.stdout}${ran.stderr}`).toBe(0);
};

/** `yaml config`: a config file, read by `genpipe config`, which refuses an unknown setting or a bad value. */
const config: Runner = async (block, text, box, env) => {
  const file = join(box.dir, `config-${block.line}.yaml`);
  writeFileSync(file, text);
  const ran = await bash(`genpipe config --config ${file}`, box.dir, env);
  expect(ran.code, `${where(block)}: genpipe config\n${ran.stdout}${ran.stderr}`).toBe(0);
};

/**
 * `yaml prometheus`: a Prometheus file, checked by promtool as Prometheus would load it: a rule
 * file (`groups:`) with `promtool check rules`, else a configuration with `promtool check config`.
 */
const prometheus: Runner = async (block, text, box) => {
  const file = join(box.dir, `prometheus-${block.line}.yml`);
  writeFileSync(file, text);
  const what = /^groups:/m.test(text) ? 'rules' : 'config';
  const ran = await bash(`promtool check ${what} ${file}`, box.dir, { PATH: process.env.PATH ?? '' });
  expect(ran.code, `${where(block)}: promtool check ${what}\n${ran.stdout}${ran.stderr}`).toBe(0);
};

/** `yaml faults` and `yaml accounts`: an emulator's fault or accounts file, which it must start with. */
const emulatorFile: Runner = async (block, text, box, env) => {
  const file = join(box.dir, `${block.tags[0] as string}-${block.line}.yaml`);
  writeFileSync(file, text);
  const served = await serve(`genpipe emulator --port 0 --${block.tags[0] as string} ${file}`, box.dir, env, '/_emulator/stats');
  expect(served.first, `${where(block)}: the emulator starts with it`).toMatch(/^listening on http:\/\/127\.0\.0\.1:\d+$/);
  expect(served.status, where(block)).toBe(200);
};

/** `json review`: a run's review.json, read back as genpipe reads one. */
const review: Runner = async (block, text, box) => {
  const runDir = join(box.dir, `review-${block.line}`);
  mkdirSync(runDir);
  writeFileSync(join(runDir, 'review.json'), text);
  const read = await readReview(runDir);
  expect(Object.keys(read).length, `${where(block)}: its decisions`).toBe(Object.keys(JSON.parse(text) as object).length);
};

/** `ts test`: a module importing the repository's source (`./src/...`), run in this process. */
const typescript: Runner = async (block, text, box) => {
  const file = join(box.dir, `example-${block.line}.ts`);
  writeFileSync(file, text.replace(/(['"])\.\/src\//g, `$1${ROOT}src/`));
  await expect(import(file), where(block)).resolves.toBeDefined();
};

const sh: Runner = async (block, text, box, env) => {
  if (block.tags.includes('serve')) {
    const served = await serve(text, box.dir, env, tagValue(block, 'path'));
    expect(served.first, where(block)).toMatch(/^listening on http:\/\/127\.0\.0\.1:\d+$/);
    expect(served.status, `${where(block)}: the page it serves`).toBe(200);
    expect([0, 130], `${where(block)}: exit code after Ctrl-C`).toContain(served.code);
    for (const said of saidToPrint(block)) expect(served.first, `${where(block)}: the page says it prints ${said}`).toMatch(said);
    return;
  }
  const ran = await bash(PRELUDE + text, box.dir, env);
  expect(ran.code, `${where(block)}\n${ran.stdout}${ran.stderr}`).toBe(Number(tagValue(block, 'exit') ?? 0));
  // What the page says the command prints, it prints.
  for (const said of saidToPrint(block))
    expect(`${ran.stdout}${ran.stderr}`, `${where(block)}: the page says it prints ${said}`).toMatch(said);
};

/** A command that serves, as a deployment runs it on its host: redis-server, or a `genpipe worker`. */
const SERVES = /^(redis-server|genpipe worker)\b/;

/**
 * `sh hosts`: commands that each run on a host of a deployment, in order. Those that serve are
 * started and waited for (redis-server answers PING, a worker prints `ready`), and run on until
 * the page ends; every other one must exit 0.
 */
const hosts: Runner = async (block, text, box, env) => {
  const cwd = join(box.dir, 'srv', 'pipelines');
  const lines = text
    .split('\n')
    .map((l) => l.replace(/\s+#.*$/, '').trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  for (const line of lines) {
    if (!SERVES.test(line)) {
      const ran = await bash(PRELUDE + line, cwd, env);
      expect(ran.code, `${where(block)}: ${line}\n${ran.stdout}${ran.stderr}`).toBe(0);
      continue;
    }
    const served = start(line, cwd, env, box.serving);
    const ready = line.startsWith('redis-server') ? /Ready to accept connections/ : /^ready\b/m;
    // Until it answers, or ends (then the expectation below says why).
    await until(() => ready.test(served.output()) || served.child.exitCode !== null, COMMAND_MS, `${where(block)}: ${line}`);
    expect(ready.test(served.output()), `${where(block)}: ${line} serves\n${served.output()}`).toBe(true);
  }
};

/** `sh ci`: the README's test command, which is what CI runs (.ci/run), in the same order. */
const ci: Runner = async (block, text) => {
  const commands = text.trim().split(/\s*&&\s*/);
  const script = readFileSync(join(ROOT, '.ci', 'run'), 'utf8');
  const at = commands.map((c) => script.search(new RegExp(`^\\s*(if ! )?${c.replace(/ /g, '\\s+')}\\b`, 'm')));
  expect(
    at.every((i) => i >= 0),
    `${where(block)}: .ci/run runs ${commands.join(', ')}`,
  ).toBe(true);
  expect(
    [...at].sort((x, y) => x - y),
    `${where(block)}: in the README's order`,
  ).toEqual(at);
};

const cron: Runner = async (block, text, box) => {
  const entries = text.split('\n').filter((l) => l.trim() !== '' && !l.trim().startsWith('#'));
  expect(entries.length, where(block)).toBeGreaterThan(0);
  for (const entry of entries) {
    const m = /^((?:[\d*,/-]+\s+){5})(.+)$/.exec(entry);
    expect(m, `${where(block)}: five schedule fields, then the command`).not.toBeNull();
    const ran = await bash((m as RegExpExecArray)[2] as string, box.home, bare(box));
    expect(ran.code, `${where(block)}\n${ran.stdout}${ran.stderr}`).toBe(0);
  }
  const logs = readdirSync(join(box.dir, 'var', 'log')).map((f) => readFileSync(join(box.dir, 'var', 'log', f), 'utf8'));
  expect(logs.join(''), `${where(block)}: the log the entry appends to`).toMatch(/: completed; /);
};

const systemd: Runner = async (block, text, box) => {
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
  const ran = await bash(serviceUnit.get('ExecStart') as string, cwd, bare(box));
  expect(ran.code, `${where(block)}\n${ran.stdout}${ran.stderr}`).toBe(0);
  const events = ran.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { type: string; summary?: { outcome: string } });
  expect(events.at(-1), `${where(block)}: --json-logs ends with the run's summary`).toMatchObject({
    type: 'run_finished',
    summary: { outcome: 'completed' },
  });
};

/** cron and systemd start a command with next to no environment: what the example names is all it gets. */
function bare(box: Sandbox): NodeJS.ProcessEnv {
  return { PATH: '/usr/bin:/bin', HOME: box.home };
}

/** Each kind of block (`LANG KIND` in its info string) and what runs it; docs/CONTRIBUTING.md says the same in words. */
const RUNNERS: Record<string, Runner> = {
  'yaml manifest': manifest,
  'yaml config': config,
  'yaml faults': emulatorFile,
  'yaml accounts': emulatorFile,
  'yaml prometheus': prometheus,
  'json review': review,
  'ts test': typescript,
  'sh test': sh,
  'sh ci': ci,
  'sh hosts': hosts,
  'cron test': cron,
  'ini test': systemd,
};

async function runBlock(block: DocBlock, box: Sandbox): Promise<void> {
  const env = {
    PATH: `${join(box.dir, 'usr', 'local', 'bin')}:${process.env.PATH ?? ''}`,
    HOME: box.home,
    GENPIPE_BASE_URL: emu.url,
    HF_KEY,
    ...box.env,
    ...blockEnv(block),
  };
  const runner = RUNNERS[`${block.lang} ${block.tags[0] ?? ''}`];
  if (runner === undefined) throw new Error(`${where(block)}: no way to test a \`${block.lang} ${block.tags.join(' ')}\` block`);
  await runner(block, box.rewrite(runIds(hostPaths(block.text, box))), box, env);
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
    expect([...kinds].sort()).toEqual(Object.keys(RUNNERS).sort());
    expect(blocks.filter((b) => b.file === 'README.md').length).toBeGreaterThanOrEqual(5);
  });

  it('are each run: a block in a language that runs has a kind, or is prose (`text`)', () => {
    const shown = shownBlocks().map((b) => `${where(b)} \`${b.lang}\``);
    expect(shown).toEqual([]);
  });

  it('refuse a block a test would not run', () => {
    const page = '# A page\n\n```sh\ngenpipe run x.yaml\n```\n\n```sh test\ngenpipe --help\n```\n\n```text\nsynopsis\n```\n';
    const found = fencedBlocks('docs/x.md', page);
    expect(found.filter(isShownOnly).map((b) => b.line)).toEqual([3]);
  });

  it('hold a command to what its page says it prints: each quote of several words after "It prints"', () => {
    const block = (after: string) => ({ after });
    const said = saidToPrint(
      block(
        'It prints `running quickstart: 6 instance(s) in runs/quickstart/<run-id>`, then one last line: `net US$0.30; ...`. It writes `the journal`.',
      ),
    );
    expect(said.map(String)).toHaveLength(2);
    // Accepted: the output the tour shows.
    expect('running quickstart: 6 instance(s) in runs/quickstart/20261207T000000Z-ab12\n').toMatch(said[0] as RegExp);
    expect('quickstart x: completed; net US$0.30; 0 unknown\n').toMatch(said[1] as RegExp);
    // Refused: an output in other words than the page's.
    expect('quickstart x: completed; spent US$0.30; 0 unknown\n').not.toMatch(said[1] as RegExp);
    expect(
      saidToPrint(block('It prints `PORT`, then `listening on http://127.0.0.1:PORT`.'))[0]?.test('listening on http://127.0.0.1:8471'),
    ).toBe(true);
    // One word is a name (a file, a status), not output; a sentence not about printing says nothing of it.
    expect(saidToPrint(block('It prints `ok` or `failed`. It writes `the report file`.'))).toEqual([]);
    // The tour's commands are held to it.
    expect(blocks.filter((b) => b.file === 'README.md').flatMap((b) => saidToPrint(b)).length).toBeGreaterThanOrEqual(5);
  });

  // Pages run side by side: their commands mostly wait (polls, the agent's 2 s turns), not compute.
  for (const page of pages) {
    it.concurrent(`${page} runs as written`, { timeout: 240_000 }, async () => {
      const own = blocks.filter((b) => b.file === page);
      const box = await sandbox(own);
      try {
        for (const block of own) await runBlock(block, box);
      } finally {
        await box.close();
      }
    });
  }
});
