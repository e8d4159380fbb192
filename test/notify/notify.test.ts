// Tell the team when a run ends: a `notify:` block (and --notify URL) posts the run's
// summary on finish, failure, budget and interrupted, as JSON or in Slack's or Discord's shape;
// delivery is retried with backoff inside a bounded time, never blocks or fails the run, never
// carries a secret, and each delivery is journaled. Every test posts to a receiver on 127.0.0.1.
import { readFileSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runInProcess } from '../cli/in-process.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { deliverNotifications } from '../../src/notify/deliver.js';
import { chatText, notifyBody, notifySummary, summaryText, type RunEnd } from '../../src/notify/notify-message.js';
import { emptyGroup } from '../../src/report/cost-report.js';
import { checkNotifyUrl, type ResolvedTarget } from '../../src/notify/notify-targets.js';
import { receiver } from './receiver.js';
import { cleanTemps, emuRequests, filesUnder, findRunDir, HF_KEY, journalOf, tempDir } from '../run/runner-helpers.js';

let emu: Emulator;
const closers: (() => Promise<void>)[] = [];

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
});
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});
afterAll(async () => {
  await emu?.close();
  cleanTemps();
});

/** The path part of a webhook URL: a secret, as in Slack's /services/T…/B…/XXXX. */
const HOOK_PATH = '/services/T0001/B0002/hook-secret-token-123';

function manifest(dir: string, notify: string, options: { count?: number; model?: 'character-sheet' | 'marketing-image' } = {}): string {
  const path = join(dir, 'team.yaml');
  const step =
    options.model === 'marketing-image'
      ? `  ads:
    model: marketing-image
    matrix:
      quality: [low, high]
    input: { prompt: A poster, quality: "{{ quality }}" }`
      : `  sheets:
    model: character-sheet
    matrix:
      seed: { range: { from: 1, to: ${options.count ?? 3} } }
    input: { tier: cats, seed: "{{ seed }}" }`;
  writeFileSync(path, `version: 1\nname: team\n${notify}\nsteps:\n${step}\n`);
  return path;
}

interface CliRun {
  code: number;
  out: string;
  err: string;
}

async function run(
  args: string[],
  env: Record<string, string> = {},
  signal = new AbortController().signal,
  base = emu.url,
): Promise<CliRun> {
  return runInProcess(args, { GENPIPE_BASE_URL: base, HF_KEY, ...env }, signal);
}

const target = (url: string): ResolvedTarget => ({ url, label: `${new URL(url).origin}/…`, events: new Set(['finish']), format: 'json' });
const end: RunEnd = {
  pipeline: 'p',
  runId: 'r',
  runDir: '/runs/p/r',
  outcome: 'completed',
  exitCode: 0,
  counts: { completed: 1, failed: 0, nsfw: 0, canceled: 0, unknown: 0, pending: 0, rerolled: 0, reused: 0, inFlight: 0 },
  durationMs: 1000,
};

const notifyRecords = (runDir: string) => journalOf(runDir).records.filter((r) => r.type === 'notify');

describe('notify: a run that ends posts its summary', () => {
  it(
    'finish: one JSON POST with pipeline, run id, outcome, counts, spend and the gallery path; the delivery is journaled after run_finished',
    { timeout: 30_000 },
    async () => {
      const hook = await receiver();
      closers.push(hook.close);
      const dir = tempDir();
      const out = tempDir();
      const path = manifest(dir, `notify:\n  - url: ${hook.url}${HOOK_PATH}`);
      const result = await run(['run', path, '--out', out, '--quiet']);
      expect(result.code).toBe(0);
      expect(hook.received).toHaveLength(1);
      const [got] = hook.received;
      expect(got!.path).toBe(HOOK_PATH);
      expect(got!.contentType).toBe('application/json');
      const runDir = findRunDir(out, 'team');
      const body = got!.body as Record<string, unknown>;
      expect(body).toMatchObject({
        event: 'finish',
        pipeline: 'team',
        outcome: 'completed',
        exit_code: 0,
        message: 'All 3 instances completed.',
        counts: { completed: 3, failed: 0 },
      });
      // The gallery is a file on the runner's disk: a file:// URL, with the host it is on.
      expect(body.gallery).toBe(pathToFileURL(join(resolve(runDir), 'gallery.html')).href);
      expect(body.report).toBe(pathToFileURL(join(resolve(runDir), 'report.md')).href);
      expect(body.host).toBe(hostname());
      expect(body.run_id).toBe(runDir.split('/').pop());
      expect((body.spend_usd as { net: number }).net).toBeCloseTo(0.15, 6);
      const records = journalOf(runDir).records;
      const finished = records.findIndex((r) => r.type === 'run_finished');
      expect(records.slice(finished + 1)).toEqual([
        expect.objectContaining({
          type: 'notify',
          event: 'finish',
          delivered: true,
          attempts: 1,
          status: 200,
          format: 'json',
          target: `${hook.url}/…`,
        }),
      ]);
    },
  );

  it('never writes the webhook URL: not its path in the journal, reports, outputs, stdout or stderr', { timeout: 30_000 }, async () => {
    const hook = await receiver((n) => (n === 1 ? 503 : 200));
    closers.push(hook.close);
    const out = tempDir();
    const path = manifest(tempDir(), `notify:\n  - url_env: TEAM_HOOK\n    format: slack`);
    const result = await run(['run', path, '--out', out], { TEAM_HOOK: `${hook.url}${HOOK_PATH}` });
    expect(result.code).toBe(0);
    expect(hook.received).toHaveLength(2);
    const runDir = findRunDir(out, 'team');
    for (const text of [result.out, result.err, ...filesUnder(runDir).map((f) => readFileSync(join(runDir, f), 'utf8'))]) {
      expect(text.includes('hook-secret-token-123')).toBe(false);
    }
    expect(result.err).toContain(`notified ${hook.url}/… (finish, slack)`);
  });

  it(
    'slack and discord presets: {text} and {content} with the pipeline, outcome, counts and spend in words',
    { timeout: 30_000 },
    async () => {
      const slack = await receiver();
      const discord = await receiver();
      closers.push(slack.close, discord.close);
      const out = tempDir();
      const path = manifest(
        tempDir(),
        `notify:\n  - url: ${slack.url}/s\n    format: slack\n  - url: ${discord.url}/d\n    format: discord`,
      );
      expect((await run(['run', path, '--out', out, '--quiet'])).code).toBe(0);
      const text = (slack.received[0]!.body as { text: string }).text;
      expect(Object.keys(slack.received[0]!.body as object)).toEqual(['text', 'link_names']);
      expect(text).toMatch(/^genpipe: team run \S+ finished \(exit 0\)/);
      expect(text).toContain('Instances: 3 completed.');
      expect(text).toContain('Spend: US$0.15 net');
      expect(text).toContain('\nAll 3 instances completed.\n');
      // No path posing as a link: the run directory, its host and how to serve the gallery.
      expect(text).not.toContain('gallery.html');
      expect(text).toMatch(/\nRun directory: \/\S+ on \S+ \(genpipe review \/\S+ serves its gallery\)\.$/);
      const content = discord.received[0]!.body as { content: string; allowed_mentions: unknown };
      // The same text, its markdown characters escaped for Discord (the Slack text has no &, < or >).
      expect(content.content).toBe(chatText('discord', text));
      expect(content.allowed_mentions).toEqual({ parse: [] });
    },
  );

  it('on: [failure] is not told of a clean finish, and is told of a failed run (exit 1 kept)', { timeout: 30_000 }, async () => {
    const hook = await receiver();
    closers.push(hook.close);
    const path = manifest(tempDir(), `notify:\n  - url: ${hook.url}/f\n    on: [failure]`, { count: 2 });
    expect((await run(['run', path, '--out', tempDir(), '--quiet'])).code).toBe(0);
    expect(hook.received).toHaveLength(0);
    const failing = await startEmulator({ port: 0, timeScale: 0, log: () => {}, modelRates: { 'marketing-image': { failureRate: 1 } } });
    closers.push(() => failing.close());
    const ads = manifest(tempDir(), `notify:\n  - url: ${hook.url}/f\n    on: [failure]`, { model: 'marketing-image' });
    const result = await run(['run', ads, '--out', tempDir(), '--quiet'], {}, undefined, failing.url);
    expect(result.code).toBe(1);
    expect(hook.received).toHaveLength(1);
    expect(hook.received[0]!.body).toMatchObject({ event: 'failure', outcome: 'failed', exit_code: 1, counts: { failed: 2 } });
  });

  it('budget: a run the budget stopped posts the budget event (exit 3 kept)', { timeout: 30_000 }, async () => {
    const hook = await receiver();
    closers.push(hook.close);
    const path = manifest(tempDir(), `notify:\n  - url: ${hook.url}/b`, { count: 5 });
    const result = await run(['run', path, '--out', tempDir(), '--quiet', '--budget', '0.1', '--concurrency', '1']);
    expect(result.code).toBe(3);
    expect(hook.received.map((r) => (r.body as { event: string }).event)).toEqual(['budget']);
  });

  it(
    'interrupted: Ctrl-C during a run posts the interrupted event (exit 130 kept), and every view says interrupted',
    { timeout: 30_000 },
    async () => {
      const slow = await startEmulator({ port: 0, timeScale: 1, log: () => {} });
      closers.push(() => slow.close());
      const hook = await receiver();
      closers.push(hook.close);
      const path = manifest(tempDir(), `notify:\n  - url: ${hook.url}/i`, { count: 2 });
      const controller = new AbortController();
      const out = tempDir();
      const started = run(['run', path, '--out', out, '--quiet'], {}, controller.signal, slow.url);
      const deadline = Date.now() + 10_000;
      // Bounded: until the first request exists or 10 s.
      while (slow.requests.byId.size === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      controller.abort();
      const result = await started;
      expect(result.code).toBe(130);
      expect(hook.received.map((r) => (r.body as { event: string }).event)).toEqual(['interrupted']);
      // The same word in the notification's outcome, the summary line and `genpipe runs`.
      expect(hook.received[0]?.body).toMatchObject({ outcome: 'interrupted' });
      expect(result.out).toMatch(/: interrupted; .*; net US\$\d+\.\d\d/);
      const runs = await run(['runs', '--out', out]);
      expect(runs.out).toMatch(/ interrupted /);
      expect(runs.out).not.toContain('aborted');
      // The report the run wrote as it stopped says it too, and `genpipe report` written again later.
      const runDir = findRunDir(out, 'team');
      for (const written of ['at the stop', 'by genpipe report']) {
        if (written === 'by genpipe report') expect((await run(['report', runDir])).code).toBe(0);
        const md = readFileSync(join(runDir, 'report.md'), 'utf8');
        expect(md, written).toContain('Status: **interrupted**: stopped by a signal');
        expect(md, written).toContain('`genpipe resume` continues it');
        const json = JSON.parse(readFileSync(join(runDir, 'report.json'), 'utf8')) as { status?: string };
        expect(json.status, written).toBe('interrupted');
        for (const text of [md, JSON.stringify(json), JSON.stringify(hook.received[0]?.body), result.out, result.err])
          expect(text, written).not.toMatch(/\baborted\b/);
      }
    },
  );

  it(
    'a finished run resumed sends nothing and tells no one again; a resume that finishes the rest tells once',
    { timeout: 30_000 },
    async () => {
      const hook = await receiver();
      closers.push(hook.close);
      const out = tempDir();
      const path = manifest(tempDir(), `notify:\n  - url: ${hook.url}/r`, { count: 3 });
      const budgeted = await run(['run', path, '--out', out, '--quiet', '--budget', '0.1', '--concurrency', '1']);
      expect(budgeted.code).toBe(3);
      const runDir = findRunDir(out, 'team');
      const finished = await run(['resume', runDir, '--quiet', '--budget', '1']);
      expect(finished.code).toBe(0);
      expect(hook.received.map((r) => (r.body as { event: string }).event)).toEqual(['budget', 'finish']);
      const sent = emuRequests(emu).length;
      const again = await run(['resume', runDir, '--quiet']);
      expect(again.code).toBe(0);
      expect(emuRequests(emu).length).toBe(sent);
      expect(hook.received).toHaveLength(2);
      expect(again.err).toContain('had ended completed already and nothing changed: no one is notified again.');
    },
  );

  it("--notify URL adds a JSON target to the manifest's, for every event", { timeout: 30_000 }, async () => {
    const a = await receiver();
    const b = await receiver();
    closers.push(a.close, b.close);
    const path = manifest(tempDir(), `notify:\n  - url: ${a.url}/a\n    on: [finish]`);
    expect((await run(['run', path, '--out', tempDir(), '--quiet', '--notify', `${b.url}/b`])).code).toBe(0);
    expect(a.received).toHaveLength(1);
    expect(b.received).toHaveLength(1);
    expect(b.received[0]!.body).toMatchObject({ event: 'finish' });
  });
});

describe('notify: delivery never fails or holds the run', () => {
  it(
    'a receiver that refuses (HTTP 400) is a warning line; the run still exits 0 and the journal records the failed delivery',
    { timeout: 30_000 },
    async () => {
      const hook = await receiver(() => 400);
      closers.push(hook.close);
      const out = tempDir();
      const path = manifest(tempDir(), `notify:\n  - url: ${hook.url}/x`);
      const result = await run(['run', path, '--out', out, '--quiet']);
      expect(result.code).toBe(0);
      expect(hook.received).toHaveLength(1);
      expect(result.err).toContain(
        `warning: the finish notification to ${hook.url}/… was not delivered (1 attempt): it answered HTTP 400.`,
      );
      expect(notifyRecords(findRunDir(out, 'team'))).toEqual([expect.objectContaining({ delivered: false, attempts: 1, status: 400 })]);
    },
  );

  it('a receiver that is down: the run exits 0 after the retries, with a warning', { timeout: 40_000 }, async () => {
    // Port 9 (discard) on loopback: nothing listens there, and no test's server (port 0 picks from the
    // ephemeral range) can take it. A closed receiver's port could be handed to another test's
    // server during the retries, which then answered 404.
    const down = 'http://127.0.0.1:9';
    const out = tempDir();
    const path = manifest(tempDir(), `notify:\n  - url: ${down}/down`, { count: 1 });
    const result = await run(['run', path, '--out', out, '--quiet']);
    expect(result.code).toBe(0);
    expect(result.err).toContain('was not delivered (6 attempts): the connection was refused.');
    expect(notifyRecords(findRunDir(out, 'team'))).toEqual([expect.objectContaining({ delivered: false, attempts: 6 })]);
  });

  it('retries 5xx and 429 with backoff, then delivers; a 4xx other than 408/425/429 is not retried', async () => {
    const statuses = [503, 429, 502, 200];
    const hook = await receiver((n) => statuses[n - 1] ?? 200);
    closers.push(hook.close);
    const [result] = await deliverNotifications([target(`${hook.url}/r`)], notifySummary(end, undefined), {
      retryDelaysMs: [10, 20, 40, 80, 160],
    });
    expect(result).toMatchObject({ delivered: true, attempts: 4, status: 200 });
    const refusing = await receiver(() => 404);
    closers.push(refusing.close);
    const [refused] = await deliverNotifications([target(`${refusing.url}/r`)], notifySummary(end, undefined), { retryDelaysMs: [10, 20] });
    expect(refused).toMatchObject({ delivered: false, attempts: 1, status: 404 });
  });

  it('gives up after the last backoff: one attempt and one per delay (6 with the default 0.5, 1, 2, 4, 8 s)', async () => {
    const hook = await receiver(() => 500);
    closers.push(hook.close);
    const [result] = await deliverNotifications([target(`${hook.url}/r`)], notifySummary(end, undefined), {
      retryDelaysMs: [5, 5, 5, 5, 5],
    });
    expect(result).toMatchObject({ delivered: false, attempts: 6, status: 500, error: 'it answered HTTP 500' });
    expect(hook.received).toHaveLength(6);
  });

  it('a receiver that never answers is given up at the deadline, not later', async () => {
    const hook = await receiver(() => 'hang');
    closers.push(hook.close);
    const started = Date.now();
    const [result] = await deliverNotifications([target(`${hook.url}/r`)], notifySummary(end, undefined), { deadlineMs: 300 });
    expect(result!.delivered).toBe(false);
    expect(result!.error).toContain('no answer within 0.3 s');
    // Bounded by the deadline (300 ms), with room for a loaded machine; never the 10 s attempt timeout.
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('only the targets that asked for the event are posted to', async () => {
    const hook = await receiver();
    closers.push(hook.close);
    const results = await deliverNotifications(
      [{ ...target(`${hook.url}/r`), events: new Set(['failure']) }],
      notifySummary(end, undefined),
    );
    expect(results).toEqual([]);
    expect(hook.received).toHaveLength(0);
  });
});

describe('notify: bad targets are refused before anything is sent (exit 2)', () => {
  it('plain http to another host is refused, naming it by origin only; no request reaches the service', async () => {
    const before = emuRequests(emu).length;
    const path = manifest(tempDir(), `notify:\n  - url: http://hooks.example.com/services/secret-path`);
    const result = await run(['run', path, '--out', tempDir()]);
    expect(result.code).toBe(2);
    expect(result.err).toMatch(
      /team\.yaml:4:\d+: notify\[0\]\.url: the URL http:\/\/hooks\.example\.com\/… is refused: plain http is allowed only to 127\.0\.0\.1, ::1 or localhost; use https/,
    );
    expect(result.err).not.toContain('secret-path');
    expect(emuRequests(emu).length).toBe(before);
  });

  it('genpipe validate refuses the same URL (a url_env unset where validate runs is left to the run)', async () => {
    const bad = await run(['validate', manifest(tempDir(), `notify:\n  - url: http://hooks.example.com/x`)]);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('notify[0].url: the URL http://hooks.example.com/… is refused');
    expect((await run(['validate', manifest(tempDir(), `notify:\n  - url_env: NOT_SET_HOOK`)])).code).toBe(0);
  });

  it('a url_env whose variable is unset is refused at its line', async () => {
    const path = manifest(tempDir(), `notify:\n  - url_env: NOT_SET_HOOK`);
    const result = await run(['run', path, '--out', tempDir()]);
    expect(result.code).toBe(2);
    expect(result.err).toMatch(/team\.yaml:4:\d+: notify\[0\]\.url_env: the environment variable NOT_SET_HOOK is not set/);
  });

  it('--notify with a non-https URL, and more than 10 targets, are refused', async () => {
    const path = manifest(tempDir(), '');
    const bad = await run(['run', path, '--out', tempDir(), '--notify', 'ftp://example.com/x']);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('--notify: the URL ftp://example.com/… is refused: a notification URL starts with https://.');
    const many = Array.from({ length: 11 }, (_, i) => ['--notify', `https://example.com/${i}`]).flat();
    const tooMany = await run(['run', path, '--out', tempDir(), ...many]);
    expect(tooMany.code).toBe(2);
    expect(tooMany.err).toContain('A run notifies at most 10 places');
  });

  it('the manifest schema refuses an entry with both url and url_env, or neither, and an unknown event', async () => {
    for (const [entry, message] of [
      ['  - { url: "https://a.example/x", url_env: HOOK }', 'give exactly one of url and url_env'],
      ['  - { format: slack }', 'give exactly one of url and url_env'],
      ['  - { url: "https://a.example/x", on: [done] }', 'notify[0].on[0]: must be one of finish, failure, budget, interrupted'],
    ] as const) {
      const result = await run(['validate', manifest(tempDir(), `notify:\n${entry}`)]);
      expect(result.code, entry).toBe(2);
      expect(result.err, entry).toContain(message);
    }
  });

  it('accepts https anywhere and http to loopback names', () => {
    expect(checkNotifyUrl('https://hooks.slack.com/services/a/b/c')).toBeInstanceOf(URL);
    for (const ok of ['http://127.0.0.1:9/x', 'http://localhost:9/x', 'http://[::1]:9/x']) expect(checkNotifyUrl(ok)).toBeInstanceOf(URL);
    expect(checkNotifyUrl('http://10.0.0.1/x')).toContain('is refused');
    expect(checkNotifyUrl('https://user:pw@example.com/x')).toContain('carries a user name or password');
    expect(checkNotifyUrl('not a url')).toBe('is not a URL');
  });

  it('a run with a storage sink: the summary carries its counts and public prefix, and the chat text links it', () => {
    const total = notifySummary(end, undefined);
    expect(total.sink).toBeUndefined();
    expect(summaryText(total)).not.toContain('Outputs:');
    const summary = notifySummary(end, {
      total: emptyGroup('total'),
      sink: {
        uploadedFiles: 3,
        uploadedBytes: 1_500,
        pendingFiles: 1,
        pendingBytes: 2_000_000,
        pendingInstances: 1,
        conflictFiles: 0,
        skippedFiles: 0,
        unverifiedFiles: 0,
        conflicts: [],
        unverified: [],
        locations: [{ uri: 's3://media/drop', public_url: 'https://cdn.example.com/drop' }, { uri: 's3://raw' }],
      },
    });
    expect(summary.sink).toEqual({
      uploaded_files: 3,
      uploaded_bytes: 1_500,
      pending_files: 1,
      pending_bytes: 2_000_000,
      conflict_files: 0,
      skipped_files: 0,
      unverified_files: 0,
      conflicts: [],
      unverified: [],
      locations: [{ uri: 's3://media/drop', public_url: 'https://cdn.example.com/drop' }, { uri: 's3://raw' }],
    });
    expect(summaryText(summary)).toContain(
      'Outputs: 3 files (1.5 kB) in s3://media/drop, public at https://cdn.example.com/drop; s3://raw; 1 file (2 MB) pending upload (genpipe resume uploads them).',
    );
    expect(summaryText(summary)).not.toContain('Not uploaded');
    expect(summaryText(summary)).not.toContain('Unverified');
  });

  it('a run with upload conflicts and unverified uploads: the summary and the chat text name each object and why', () => {
    const notes = (n: number, what: string) =>
      Array.from({ length: n }, (_, i) => ({ instance: `s[seed=${i + 1}]`, uri: `s3://media/drop/s/${i + 1}.png`, reason: what }));
    const summary = notifySummary(end, {
      total: emptyGroup('total'),
      sink: {
        uploadedFiles: 1,
        uploadedBytes: 10,
        pendingFiles: 12,
        pendingBytes: 120,
        pendingInstances: 12,
        conflictFiles: 12,
        skippedFiles: 0,
        unverifiedFiles: 1,
        conflicts: notes(12, 'another object (5 B) is at the key; not overwritten'),
        unverified: [{ instance: 's[seed=13]', uri: 's3://media/drop/s/13.png', reason: 'no MD5 ETag' }],
        locations: [{ uri: 's3://media/drop' }],
      },
    });
    expect(summary.sink?.conflict_files).toBe(12);
    expect(summary.sink?.conflicts).toHaveLength(10);
    expect(summary.sink?.unverified).toEqual([{ instance: 's[seed=13]', uri: 's3://media/drop/s/13.png', reason: 'no MD5 ETag' }]);
    const text = summaryText(summary);
    expect(text).toContain(
      'Not uploaded, another object at the key (not overwritten): 12 files: s3://media/drop/s/1.png (another object (5 B) is at the key; not overwritten);',
    );
    expect(text).toContain('; report.md lists the others.');
    expect(text).toContain('Unverified uploads: 1 file: s3://media/drop/s/13.png (no MD5 ETag).');
  });

  it('Discord messages stay under its 2,000-character limit', () => {
    const long = notifyBody('discord', { ...notifySummary({ ...end, message: 'x'.repeat(5_000) }, undefined) });
    expect((JSON.parse(long) as { content: string }).content.length).toBeLessThanOrEqual(2_000);
  });
});
