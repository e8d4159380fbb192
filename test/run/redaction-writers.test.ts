// Secrets in outputs: a service whose failed statuses echo the request headers
// (the Authorization header, with the key secret) must not put the secret in any file or stream a
// run writes: journal, reports, gallery.html, outputs.csv, outputs.jsonl, the review and diff
// pages, notify payloads, stdout and stderr. The emulator cannot echo headers: a loopback proxy
// rewrites the failed statuses. The secret holds characters that JSON and HTML escape, so each
// writer's own spelling of it is looked for too. A CSV axis pointed at a credentials file is
// refused at plan time.
import { chmodSync, readFileSync, existsSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { FAIL_MARKER } from '../../src/emulator/request-store.js';
import { startReviewServer } from '../../src/review/review-server.js';
import { RedactingText, redactEveryForm, registerSecret } from '../../src/util/redact.js';
import { cleanTemps, emuRequests, filesUnder, findRunDir, runCli, tempDir } from './runner-helpers.js';
import { startRewritingProxy, type RewritingProxy } from './rewriting-proxy.js';

const KEY_ID = '11111111-1111-4111-8111-111111111111';
/** A secret with the characters JSON and HTML escape: `&`, `<`, `>`, `"`, `'` and `\`. */
const SECRET = `s3&cr<e>t"q'z\\w-9f`;
const HF_KEY = `${KEY_ID}:${SECRET}`;
const htmlEscape = (t: string): string =>
  t.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;');
const FORMS = [
  ...new Set([
    SECRET,
    JSON.stringify(SECRET).slice(1, -1),
    htmlEscape(SECRET),
    htmlEscape(JSON.stringify(SECRET).slice(1, -1)),
    's3&amp;cr',
    's3&cr<e>t',
  ]),
];

function expectClean(text: string, where: string): void {
  for (const form of FORMS) expect(text.includes(form), `${where} holds the secret (as ${form})`).toBe(false);
  // Its start in any escaping at all (\u003c in a script, &amp; in HTML, \u0026 ...).
  expect(text, where).not.toMatch(/s3(&|&amp;|\\u0026|\\x26)cr/);
}
function expectCleanDir(dir: string): void {
  for (const file of filesUnder(dir)) expectClean(readFileSync(join(dir, file), 'utf8'), file);
}

let emu: Emulator;
let proxy: RewritingProxy;
let hook: Server;
let hookUrl: string;
const payloads: string[] = [];

beforeAll(async () => {
  emu = await startEmulator({
    port: 0,
    timeScale: 0,
    log: () => {},
    accounts: [{ keyId: KEY_ID, secret: SECRET, credits: 1_000_000, agentEnabled: true }],
  });
  // A careless service: its failure text quotes the request's headers.
  proxy = await startRewritingProxy(
    emu.url,
    (error, headers) => `${error}; request headers: authorization: ${String(headers.authorization)}; all: ${JSON.stringify(headers)}`,
  );
  hook = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      payloads.push(body);
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => hook.listen(0, '127.0.0.1', resolve));
  hookUrl = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/hook`;
});
afterAll(async () => {
  await proxy.close();
  hook.closeAllConnections();
  await new Promise<void>((resolve) => hook.close(() => resolve()));
  await emu.close();
  cleanTemps();
});

/** Three sheets (seeds 1..3) and a CSV axis of labels; every sheet fails with the echoing error. */
function manifest(name: string): string {
  const dir = tempDir();
  writeFileSync(join(dir, 'labels.csv'), 'label\nred\nblue\n');
  const path = join(dir, `${name}.yaml`);
  writeFileSync(
    path,
    `version: 1\nname: ${name}\nsteps:\n  sheets:\n    model: character-sheet\n    matrix:\n      seed: [1, 2]\n      row: { csv: labels.csv }\n    input:\n      tier: cats\n      seed: "{{ seed }}"\n      brief: "A {{ row.label }} mascot ${FAIL_MARKER}"\n`,
  );
  return path;
}

describe('a service that echoes the request headers in its failures', () => {
  it('the secret reaches no file or stream of the run, report, review or diff: every writer redacts it', { timeout: 120_000 }, async () => {
    const env = { GENPIPE_BASE_URL: proxy.url, HF_KEY };
    const out = tempDir();
    const first = await runCli(['run', manifest('echoed'), '--out', out, '--rate', '1000', '--notify', hookUrl], { env });
    expect(first.code, first.stderr).toBe(1);
    const runA = findRunDir(out, 'echoed');
    // The failure text did reach these files: redacted, not dropped.
    for (const file of ['outputs.csv', 'outputs.jsonl', 'gallery-data/sheets.0001.js', 'journal.jsonl'])
      expect(readFileSync(join(runA, file), 'utf8'), file).toContain('[REDACTED]');
    expectClean(first.stdout + first.stderr, 'the output of run');
    expectCleanDir(runA);
    expect(payloads.length).toBeGreaterThan(0);
    for (const p of payloads) expectClean(p, 'a notify payload');

    const jsonLogsOut = tempDir();
    const logged = await runCli(['run', manifest('echoed'), '--out', jsonLogsOut, '--rate', '1000', '--json-logs'], { env });
    expect(logged.code).toBe(1);
    expect(logged.stdout).toContain('[REDACTED]');
    expectClean(logged.stdout + logged.stderr, 'the JSON logs');
    const runB = findRunDir(jsonLogsOut, 'echoed');

    for (const argv of [
      ['report', runA],
      ['report', runA, '--json'],
      ['report', runA, '--csv'],
      ['report', runA, '--md'],
      ['diff', runA, runB],
      ['runs', '--out', out],
    ]) {
      const result = await runCli(argv, { env });
      expect(result.code, `${argv.join(' ')}: ${result.stderr}`).toBe(0);
      expectClean(result.stdout + result.stderr, argv.join(' '));
    }
    expectCleanDir(runA);
    expectCleanDir(runB);

    // The review page, as the server gives it (the secret is known to this process too).
    registerSecret(SECRET);
    const server = await startReviewServer(runA, { host: '127.0.0.1', port: 0 });
    try {
      for (const path of ['/', '/review.json', '/gallery-data/sheets.0001.js'])
        expectClean(await (await fetch(`${server.url}${path}`)).text(), `review ${path}`);
      // The failure text reached the served data file: redacted, not dropped.
      expect(await (await fetch(`${server.url}/gallery-data/sheets.0001.js`)).text()).toContain('[REDACTED]');
    } finally {
      await server.close();
    }
  });
});

describe('a manifest input that reads the credentials file', () => {
  it(
    'a CSV axis pointed at the credentials file is refused at plan time: exit 2 at the cell, nothing sent, no run directory',
    { timeout: 60_000 },
    async () => {
      const dir = tempDir();
      const credentials = join(dir, 'credentials.yaml');
      writeFileSync(credentials, `key_id: ${KEY_ID}\nkey_secret: ${JSON.stringify(SECRET)}\n`);
      chmodSync(credentials, 0o600);
      const path = join(dir, 'leak.yaml');
      writeFileSync(
        path,
        `version: 1\nname: leak\nsteps:\n  sheets:\n    model: character-sheet\n    matrix:\n      row: { csv: credentials.yaml }\n    input: { tier: cats, brief: "{{ row }}" }\n`,
      );
      const sent = emuRequests(emu).length;
      for (const env of [
        { GENPIPE_BASE_URL: emu.url, GENPIPE_CREDENTIALS_FILE: credentials, HF_KEY: '' },
        { GENPIPE_BASE_URL: emu.url, HF_KEY: `${KEY_ID}:another-secret-1` },
      ]) {
        const out = tempDir();
        for (const argv of [
          ['run', path, '--out', out],
          ['plan', path],
          ['validate', path],
        ]) {
          const result = await runCli(argv, { env });
          expect(result.code, `${argv[0]}: ${result.stderr}`).toBe(2);
          expect(result.stderr).toMatch(
            new RegExp(`^genpipe: ${credentials}:\\d+:\\d+: (steps\\.sheets\\.matrix\\.row: )?this file holds credentials`, 'm'),
          );
          expectClean(result.stdout + result.stderr, argv[0] as string);
        }
        expect(existsSync(join(out, 'leak'))).toBe(false);
      }
      expect(emuRequests(emu).length).toBe(sent);
    },
  );
});

describe('redactEveryForm and RedactingText', () => {
  it('hide each form of a secret, and a secret split across pieces at any point', () => {
    const secret = 'pq&r<s>"t\\u-1234';
    registerSecret(secret);
    const json = JSON.stringify(secret).slice(1, -1);
    const inScript = json.replace(/</g, '\\u003c');
    for (const form of [secret, json, htmlEscape(secret), htmlEscape(json), inScript])
      expect(redactEveryForm(`a ${form} b`)).toBe('a [REDACTED] b');
    const text = `head ${htmlEscape(json)} middle ${secret} tail 😀`;
    for (let cut = 0; cut <= text.length; cut++) {
      const r = new RedactingText();
      const written = r.push(text.slice(0, cut)) + r.push(text.slice(cut)) + r.end();
      expect(written).toBe('head [REDACTED] middle [REDACTED] tail 😀');
    }
  });
});
