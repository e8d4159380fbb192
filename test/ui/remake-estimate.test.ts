// The estimate a run's page shows before a remake is what the remake then sends: against the real ui
// server and the in-process emulator, the estimate's instances are those the confirmed remake
// (`genpipe resume --retry ...` from bin/genpipe.js, needing `npm run build`) submits, and its US$
// is what the emulator charged for them. The run's step is priced by a prices table, a price for each
// prompt (plan.json's step price is null); one instance failed and one was flagged nsfw, and a rejected instance was
// remade already since its rejection, which a remake does not send again. A rejected agent turn is
// kept as it was by the remake, and sends nothing (a turn cannot be made again without its whole
// conversation): the estimate of a run with an agent step and an image step, both rejected, counts
// only the images, at what the remake (`genpipe resume --retry rejected`, in-process) is charged.
import { readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { ReviewStore } from '../../src/review/review-store.js';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { marketingUsage } from '../../src/emulator/token-model.js';
import { outputsDigest, replayFile, type InstanceState } from '../../src/run/journal/run-state.js';
import type { RemakeEstimate } from '../../src/ui/run-state.js';
import type { UiRun } from '../../src/ui/run-watch.js';
import { formatUsd } from '../../src/util/format-usd.js';
import { startUiServer, type UiServer } from '../../src/ui/ui-server.js';
import { cleanTemps, findRunDir, HF_KEY, journalOf, sheetsManifest, tempDir } from '../run/runner-helpers.js';

const TOKEN = 'e'.repeat(43);
let emu: Emulator;
let server: UiServer | undefined;

beforeAll(async () => {
  emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
}, 30_000);

afterAll(async () => {
  await server?.close();
  await emu?.close();
  cleanTemps();
});

function io(): CliIO {
  return {
    out: () => {},
    write: async () => {},
    err: () => {},
    env: { GENPIPE_BASE_URL: emu.url, HF_KEY },
    signal: new AbortController().signal,
  };
}

function ask(method: string, path: string, body?: string): Promise<{ status: number; body: string }> {
  const ui = server!;
  const url = new URL(path, ui.url);
  return new Promise((resolve, reject) => {
    const req = request(url, {
      method,
      headers: { origin: new URL(ui.url).origin, 'x-genpipe-token': TOKEN, 'content-type': 'application/json' },
    });
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** The run's instances, as its journal has them now. */
async function instances(runDir: string): Promise<Map<string, InstanceState>> {
  return (await replayFile(join(runDir, 'journal.jsonl'))).instances;
}

function review(runDir: string, rejected: Record<string, string | undefined>): void {
  const at = new Date().toISOString();
  const entries = Object.fromEntries(
    Object.entries(rejected).map(([id, sha256]) => [id, { decision: 'rejected', starred: false, at, ...(sha256 ? { sha256 } : {}) }]),
  );
  writeFileSync(join(runDir, 'review.json'), JSON.stringify(entries));
}

describe('the remake estimate on a run page', () => {
  it('names the instances the remake sends, at what the emulator charges, for a table-priced step', async () => {
    const dir = tempDir();
    const out = join(dir, 'out');
    const manifest = join(dir, 'estimated.yaml');
    // A prices table prices each instance from its request: plan.json has no step price. Its rows
    // say what the emulator charges at submit for each prompt (its length sets the estimate).
    const prompts = [
      'a shoe',
      'a red shoe on a rock',
      'a boot',
      '[emulator:fail] a broken shoe',
      '[emulator:nsfw] a flagged shoe on a long road',
    ];
    const rows = prompts.map((prompt) => ({ when: { prompt }, usd: marketingUsage({ prompt }, '2k', 'high', 1).estimate.micros / 1e6 }));
    expect(new Set(rows.map((r) => r.usd)).size).toBeGreaterThan(1);
    writeFileSync(
      manifest,
      `version: 1
name: estimated
prices:
  marketing-image: ${JSON.stringify(rows)}
steps:
  ads:
    model: marketing-image
    matrix:
      prompt: ${JSON.stringify(prompts)}
    input: { prompt: "{{ prompt }}" }
`,
    );
    await main(['run', manifest, '--out', out, '--quiet'], io());
    const runDir = findRunDir(out, 'estimated');
    const plan = JSON.parse(readFileSync(join(runDir, 'plan.json'), 'utf8')) as { steps: { id: string; price_usd: number | null }[] };
    expect(plan.steps.map((s) => s.price_usd)).toEqual([null]);

    const first = await instances(runDir);
    const statusOf = (id: string): string | undefined => first.get(id)?.final?.status ?? (first.get(id)?.failed ? 'failed' : undefined);
    const ids = [...first.keys()];
    const completed = ids.filter((id) => statusOf(id) === 'completed');
    const failed = ids.filter((id) => statusOf(id) === 'failed');
    const nsfw = ids.filter((id) => statusOf(id) === 'nsfw');
    expect([completed.length, failed.length, nsfw.length]).toEqual([3, 1, 1]);
    const [remadeBefore, rejectedNow] = completed as [string, string];

    // One rejected result is remade once; its decision stays, judging the output it had then.
    const judgedBefore = outputsDigest(first.get(remadeBefore)!);
    review(runDir, { [remadeBefore]: judgedBefore });
    await main(['resume', runDir, '--retry', 'rejected', '--yes', '--quiet'], io());
    expect((await instances(runDir)).get(remadeBefore)?.remadeJudged).toBe(judgedBefore);
    // Then another result is rejected.
    review(runDir, { [remadeBefore]: judgedBefore, [rejectedNow]: outputsDigest(first.get(rejectedNow)!) });

    server = await startUiServer({
      runDirs: [out],
      host: '127.0.0.1',
      port: 0,
      token: TOKEN,
      remake: { env: { GENPIPE_BASE_URL: emu.url, HF_KEY }, connectionArgs: [] },
    });
    const runs = JSON.parse((await ask('GET', '/api/runs')).body) as UiRun[];
    const run = runs.find((r) => r.dir === runDir)!;
    const estimate = JSON.parse((await ask('GET', `/run/${run.key}/api/estimate?selection=rejected,failed`)).body) as RemakeEstimate;
    expect([...estimate.instances].sort()).toEqual([rejectedNow, ...failed, ...nsfw].sort());
    expect(estimate.unpriced).toBe(0);

    // The remake the page starts, once confirmed: what it submits, and what the emulator charged.
    const ledgerBefore = emu.ledger.entries.length;
    const journalBefore = journalOf(runDir).records.length;
    const answer = await ask('POST', `/run/${run.key}/api/remake`, JSON.stringify({ selection: ['rejected', 'failed'], confirm: true }));
    expect(answer.status).toBe(202);
    const { pid } = JSON.parse(answer.body) as { pid: number };
    await expect.poll(() => alive(pid), { timeout: 60_000, interval: 100 }).toBe(false);

    const instanceOf = new Map<string, string>();
    for (const record of journalOf(runDir).records.slice(journalBefore))
      if (record.type === 'submitted' && record.handle.kind === 'request') instanceOf.set(record.handle.requestId, record.instance);
    const charges = emu.ledger.entries.slice(ledgerBefore).filter((e) => e.kind === 'charge');
    const sent = charges.map((e) => instanceOf.get(e.request_id ?? ''));
    expect(sent.sort()).toEqual([...estimate.instances].sort());
    const chargedUsd = charges.reduce((sum, e) => sum + e.usd, 0);
    expect(estimate.estimateUsd).toBeCloseTo(chargedUsd, 6);
    expect(chargedUsd).toBeGreaterThan(0);
  }, 120_000);
});

describe('the remake estimate of a run with an agent step', () => {
  it('leaves out the rejected agent turns, which the remake keeps: its US$ is what the remake is charged', async () => {
    const dir = tempDir();
    const out = join(dir, 'out');
    // Two agent turns and two character sheets, every one of them rejected in review.
    const manifest = sheetsManifest(dir, 2, { name: 'talked' });
    writeFileSync(
      manifest,
      readFileSync(manifest, 'utf8') +
        `  chat:
    model: agent
    matrix:
      topic: [frogs, toads]
    input:
      content: "Say a word about {{ topic }}"
`,
    );
    expect(await main(['run', manifest, '--out', out, '--quiet'], io())).toBe(0);
    const runDir = findRunDir(out, 'talked');
    const ids = [...(await instances(runDir)).keys()].sort();
    expect(ids).toEqual(['chat[topic=frogs]', 'chat[topic=toads]', 'sheets[seed=1]', 'sheets[seed=2]']);
    const store = new ReviewStore(runDir);
    for (const id of ids) await store.apply({ instance: id, decision: 'rejected' });

    await server?.close();
    server = await startUiServer({ runDirs: [out], host: '127.0.0.1', port: 0, token: TOKEN });
    const runs = JSON.parse((await ask('GET', '/api/runs')).body) as UiRun[];
    const run = runs.find((r) => r.dir === runDir)!;
    const estimate = JSON.parse((await ask('GET', `/run/${run.key}/api/estimate?selection=rejected`)).body) as RemakeEstimate;
    expect(estimate.instances).toEqual(['sheets[seed=1]', 'sheets[seed=2]']);
    expect(estimate.unpriced).toBe(0);
    expect(estimate.text).toBe(`2 instances: ${formatUsd(estimate.estimateUsd)}`);

    // The remake itself: the sheets are re-rolled, the turns are kept (so it ends failed), and the
    // emulator is charged for the sheets alone.
    const agentPosts = (): number =>
      [...emu.stats.byRoute].filter(([route]) => route.startsWith('POST /v1/agent')).reduce((n, [, c]) => n + c, 0);
    const postsBefore = agentPosts();
    expect(postsBefore).toBeGreaterThan(0);
    const ledgerBefore = emu.ledger.entries.length;
    const journalBefore = journalOf(runDir).records.length;
    expect(await main(['resume', runDir, '--retry', 'rejected', '--yes', '--quiet'], io())).toBe(1);
    expect(agentPosts()).toBe(postsBefore);
    const instanceOf = new Map<string, string>();
    for (const record of journalOf(runDir).records.slice(journalBefore))
      if (record.type === 'submitted' && record.handle.kind === 'request') instanceOf.set(record.handle.requestId, record.instance);
    const charges = emu.ledger.entries.slice(ledgerBefore).filter((e) => e.kind === 'charge');
    expect(charges.map((e) => instanceOf.get(e.request_id ?? '')).sort()).toEqual(estimate.instances);
    const chargedUsd = charges.reduce((sum, e) => sum + e.usd, 0);
    expect(chargedUsd).toBeGreaterThan(0);
    expect(estimate.estimateUsd).toBeCloseTo(chargedUsd, 6);
  }, 120_000);
});
