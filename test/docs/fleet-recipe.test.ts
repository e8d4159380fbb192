// The README's local fleet (its `sh fleet` block) runs as written: each line a process of its own,
// as in its own terminal, with HF_KEY exported as the README says. Every line but the last serves
// (the emulator, redis-server, two workers) and is waited for until it answers; the last, the
// coordinator, must exit 0 with the run completed by the workers. The two ports of the block are
// swapped for free ones (other tests may hold the written ones); nothing else is changed.
import type { ChildProcess } from 'node:child_process';
import { chmodSync, cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { freePort } from '../free-port.js';
import { fencedBlocks, ROOT } from './doc-blocks.js';
import { start, stopAll, until } from './processes.js';

const BIN = join(ROOT, 'bin', 'genpipe.js');
const children: ChildProcess[] = [];
const dirs: string[] = [];

afterEach(async () => {
  await stopAll(children);
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const pings = async (port: number): Promise<boolean> => {
  const probe = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
  probe.on('error', () => {});
  try {
    await probe.connect();
    return (await probe.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    probe.disconnect();
  }
};

describe("the README's local fleet", () => {
  it('runs as written: an emulator, a Redis, two workers and a coordinator whose run the workers do', { timeout: 120_000 }, async () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const blocks = fencedBlocks('README.md', readme).filter((b) => b.lang === 'sh' && b.tags[0] === 'fleet');
    expect(blocks).toHaveLength(1);
    const lines = (blocks[0]?.text ?? '').split('\n').filter((l) => l.trim() !== '');
    expect(lines).toHaveLength(5);
    // The credentials the README has each terminal export.
    const key = /export HF_KEY=(\S+?)`/.exec(readme)?.[1];
    expect(key).toBe('00000000-0000-4000-8000-000000000000:emulator-secret');
    const [servicePort, redisPort] = [await freePort(), await freePort()];
    const commands = lines.map((l) => l.replaceAll('8470', String(servicePort)).replaceAll('6480', String(redisPort)));

    // A clone's folder: its pipelines, `npx genpipe` the built CLI, an empty HOME.
    const dir = mkdtempSync(join(tmpdir(), 'genpipe-fleet-recipe-'));
    dirs.push(dir);
    cpSync(join(ROOT, 'pipelines'), join(dir, 'pipelines'), { recursive: true });
    const bin = join(dir, 'bin');
    mkdirSync(bin);
    writeFileSync(join(bin, 'npx'), `#!/bin/sh\n[ "$1" = genpipe ] && shift\nexec "${process.execPath}" "${BIN}" "$@"\n`);
    chmodSync(join(bin, 'npx'), 0o755);
    mkdirSync(join(dir, 'home'));
    const env = { PATH: `${bin}:${process.env.PATH ?? ''}`, HOME: join(dir, 'home'), HF_KEY: key };

    const [emulatorLine, redisLine, w1Line, w2Line, runLine] = commands as [string, string, string, string, string];
    const emulator = start(emulatorLine, dir, env, children);
    await until(
      () => emulator.output().includes(`listening on http://127.0.0.1:${servicePort}`),
      15_000,
      `the emulator:\n${emulator.output()}`,
    );
    start(redisLine, dir, env, children);
    await until(() => pings(redisPort), 15_000, 'redis-server');
    const w1 = start(w1Line, dir, env, children);
    const w2 = start(w2Line, dir, env, children);
    await until(() => /^ready: worker w1/m.test(w1.output()) && /^ready: worker w2/m.test(w2.output()), 15_000, 'both workers');

    const run = start(runLine, dir, env, children);
    const bound = setTimeout(() => run.child.kill('SIGKILL'), 90_000);
    const code = await run.exited;
    clearTimeout(bound);
    expect(code, run.output()).toBe(0);
    expect(run.output()).toMatch(/quickstart \S+: completed; 6 completed, 0 failed/);
    // Done by the workers: one line per job between them, six in all.
    await until(() => (`${w1.output()}${w2.output()}`.match(/: job cats\[/g) ?? []).length >= 6, 10_000, 'six job lines');
    expect((`${w1.output()}${w2.output()}`.match(/: job cats\[[^\]]+\] of run \S+ \(character-sheet\): completed in /g) ?? []).length).toBe(
      6,
    );

    // The status line the README names, against the same Redis.
    const status = start(`npx genpipe queue status --redis redis://127.0.0.1:${redisPort}`, dir, env, children);
    expect(await status.exited, status.output()).toBe(0);
    expect(status.output()).toContain('workers: 2 live');
  });
});
