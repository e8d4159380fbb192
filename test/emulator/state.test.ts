/**
 * `--state DIR` keeps the emulator's requests, job sets, ledger and Idempotency-Key
 * records across restarts, as a service keeps them across a deploy. Refused: a path that is not a
 * directory, a damaged line that is not the torn tail, a directory another emulator holds.
 */
import { appendFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { GenpipeError } from '../../src/api/errors.js';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { STATE_FILE } from '../../src/emulator/state-journal.js';
import { AUTH, http, LEGACY_AUTH, netCents, start, until } from './helpers.js';

const stateDir = (): string => join(mkdtempSync(join(tmpdir(), 'genpipe-emu-state-')), 'state');

const sheet = (seed: number) => ({ tier: 'cats', seed });

describe('--state: the emulator remembers across restarts', () => {
  it('requests, job sets, the ledger and Idempotency-Keys survive a restart; requests in flight settle after it', async () => {
    const dir = stateDir();
    // Character sheets run 400 ms: the second one is still running when the first emulator stops.
    const options = {
      stateDir: dir,
      timeScale: 1,
      seed: 3,
      durations: { 'character-sheet': { queuedMs: [0, 0] as const, runMs: [400, 400] as const } },
    };
    const first = await start(options);
    const keyed = await http(first, 'POST', '/vendor/ai-influencer', { headers: { ...AUTH, 'idempotency-key': 'inst-1' }, json: sheet(1) });
    expect(keyed.status).toBe(200);
    await until(async () =>
      (await http(first, 'GET', `/requests/${keyed.json.request_id}/status`, { headers: AUTH })).json.status === 'completed'
        ? true
        : undefined,
    );
    const running = await http(first, 'POST', '/vendor/ai-influencer', {
      headers: { ...AUTH, 'idempotency-key': 'inst-2' },
      json: sheet(2),
    });
    const jobSet = await http(first, 'POST', '/v1/text2image/soul', {
      headers: LEGACY_AUTH,
      json: { params: { prompt: 'p', batch_size: 2 } },
    });
    expect(jobSet.status).toBe(200);
    const session = (await http(first, 'POST', '/v1/agent/sessions', { headers: AUTH, json: {} })).json.session_id;
    const held = await http(first, 'POST', `/v1/agent/sessions/${session}/messages`, { headers: AUTH, json: { content: 'wait #hold' } });
    expect(held.status).toBe(202);
    const entriesBefore = first.ledger.entries.map((e) => ({ ...e }));
    const balanceBefore = first.ledger.balanceMicros('00000000-0000-4000-8000-000000000000');
    await first.close();

    const second = await start({ ...options, seed: 4 });
    try {
      expect(second.state).toMatchObject({ dir, requests: 4 });
      // The ledger as it was, then the refund of the agent turn the restart cut.
      expect(second.ledger.entries.slice(0, entriesBefore.length).map(({ at, ...e }) => e)).toEqual(entriesBefore.map(({ at, ...e }) => e));
      const lostTurn = second.ledger.entries.slice(entriesBefore.length);
      expect(lostTurn).toMatchObject([{ kind: 'refund', message_id: held.json.message_id, credits: 50 }]);
      expect(second.ledger.balanceMicros('00000000-0000-4000-8000-000000000000')).toBe(balanceBefore + 500_000);

      // Requests: the completed one answers completed, with its image; the running one settles.
      const done = await http(second, 'GET', `/requests/${keyed.json.request_id}/status`, { headers: AUTH });
      expect(done.json.status).toBe('completed');
      expect(done.json.images[0].url.startsWith(second.url)).toBe(true);
      expect((await http(second, 'GET', new URL(done.json.images[0].url).pathname)).status).toBe(200);
      await until(async () =>
        (await http(second, 'GET', `/requests/${running.json.request_id}/status`, { headers: AUTH })).json.status === 'completed'
          ? true
          : undefined,
      );
      expect((await http(second, 'GET', `/v1/job-sets/${jobSet.json.id}`, { headers: LEGACY_AUTH })).json.jobs).toHaveLength(2);

      // Idempotency-Keys: the same key and body replays the request, another body is refused.
      const charges = second.ledger.entries.filter((e) => e.kind === 'charge').length;
      const replay = await http(second, 'POST', '/vendor/ai-influencer', {
        headers: { ...AUTH, 'idempotency-key': 'inst-1' },
        json: sheet(1),
      });
      expect(replay.status).toBe(200);
      expect(replay.json.request_id).toBe(keyed.json.request_id);
      expect(
        (await http(second, 'POST', '/vendor/ai-influencer', { headers: { ...AUTH, 'idempotency-key': 'inst-1' }, json: sheet(9) })).status,
      ).toBe(422);
      expect(second.ledger.entries.filter((e) => e.kind === 'charge').length).toBe(charges);
      // Sessions are not kept: the one of the first emulator is gone.
      expect((await http(second, 'GET', `/v1/agent/sessions/${session}/messages`, { headers: AUTH })).status).toBe(404);
      // Money: two sheets and two Soul images, nothing for the cut agent turn.
      expect(netCents(second)).toBe(2 * 5 + 2 * 3);
    } finally {
      await second.close();
    }
    // A third start reads what the second wrote too.
    const third = await start({ ...options });
    try {
      expect(third.ledger.entries.length).toBe(entriesBefore.length + 1);
      expect(netCents(third)).toBe(16);
    } finally {
      await third.close();
    }
  });

  it('a torn last line (a kill mid-write) is dropped, and the next line starts clean', async () => {
    const dir = stateDir();
    const first = await start({ stateDir: dir });
    const a = await http(first, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: sheet(1) });
    await first.close();
    appendFileSync(join(dir, STATE_FILE), '[{"t":"request","request":{"id":"torn');
    const second = await start({ stateDir: dir });
    const b = await http(second, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: sheet(2) });
    await second.close();
    expect(readFileSync(join(dir, STATE_FILE), 'utf8')).not.toContain('torn');
    const third = await start({ stateDir: dir });
    try {
      expect(third.requests.get(a.json.request_id)).toBeDefined();
      expect(third.requests.get(b.json.request_id)).toBeDefined();
      expect(third.requests.byId.size).toBe(2);
    } finally {
      await third.close();
    }
  });

  it('refuses a damaged line that is not the last, naming file:line', async () => {
    const dir = stateDir();
    const first = await start({ stateDir: dir });
    await http(first, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: sheet(1) });
    await first.close();
    const file = join(dir, STATE_FILE);
    const lines = readFileSync(file, 'utf8').split('\n');
    lines.splice(1, 0, '{"not": "a state line"}');
    writeFileSync(file, lines.join('\n'));
    const error = await start({ stateDir: dir }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(GenpipeError);
    expect((error as GenpipeError).message).toContain(`${file}:2: not a line of the emulator's state file`);
    // The refused start released the directory: after a repair it opens.
    writeFileSync(file, lines.filter((_, i) => i !== 1).join('\n'));
    const again = await start({ stateDir: dir });
    expect(again.requests.byId.size).toBe(1);
    await again.close();
  });

  it('one emulator at a time per state directory', async () => {
    const dir = stateDir();
    const first = await start({ stateDir: dir });
    try {
      await expect(start({ stateDir: dir })).rejects.toThrow(/another emulator \(pid \d+\) is using this state directory/);
    } finally {
      await first.close();
    }
    const second = await start({ stateDir: dir });
    await second.close();
  });
});

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

describe('genpipe emulator --state', () => {
  it('says what it restored on its third line', async () => {
    const dir = stateDir();
    const emu = await start({ stateDir: dir });
    await http(emu, 'POST', '/vendor/ai-influencer', { headers: AUTH, json: sheet(1) });
    await emu.close();
    const io = capture();
    const done = main(['emulator', '--port', '0', '--time-scale', '0', '--state', dir], io);
    const third = await until(() => io.stdout[2]);
    expect(third).toContain(`state in ${dir} (1 request(s), 1 ledger entries restored)`);
    io.controller.abort();
    expect(await done).toBe(0);
  });

  it('refuses a --state that is not a directory: exit 2, one sentence, nothing listening', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'genpipe-emu-state-')), 'plain-file');
    writeFileSync(file, 'x');
    const io = capture();
    expect(await main(['emulator', '--port', '0', '--state', file], io)).toBe(2);
    expect(io.stderr).toHaveLength(1);
    expect(io.stderr[0]).toContain(`--state ${file}: not a directory.`);
    expect(io.stdout).toEqual([]);
  });

  it('refuses a damaged state file with its location: exit 2', async () => {
    const dir = stateDir();
    const emu = await start({ stateDir: dir });
    await emu.close();
    const file = join(dir, STATE_FILE);
    writeFileSync(file, `${readFileSync(file, 'utf8')}oops\n[]\n`);
    const io = capture();
    expect(await main(['emulator', '--port', '0', '--state', dir], io)).toBe(2);
    expect(io.stderr).toHaveLength(1);
    expect(io.stderr[0]).toContain(`${file}:2: not a line of the emulator's state file`);
  });
});
