/**
 * Runs one random history (history-model.ts) against a real emulator on 127.0.0.1, with the built
 * CLI as child processes, on the local executor or on a fleet (a redis-server and a `genpipe
 * worker` of the history's own), then settles it (a plain resume of each run, `genpipe report
 * --json`) and checks the invariants (history-invariants.ts). Used by the CI test and the soak.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { profileFromSpec } from '../../src/emulator/faults.js';
import { ReviewStore } from '../../src/review/review-store.js';
import { parseJournal } from '../../src/run/journal/journal.js';
import type { JournalRecord } from '../../src/run/journal/journal-records.js';
import { checkInvariants, type CommandLog, type RunTotals } from './history-invariants.js';
import { checkSinkInvariants } from './sink-invariants.js';
import { startLoopbackS3, type LoopbackS3 } from '../sink/s3-server.js';
import { POSTER_PRICE, type FleetEvent, type History } from './history-model.js';
import { runCli, startRedis, startWorker, stopWorker, type CliResult, type RedisHandle, type WorkerHandle } from './processes.js';
import { startTcpProxy, type TcpProxy } from './tcp-proxy.js';

export interface HistoryOutcome {
  history: History;
  violations: string[];
  /** What was seen but is no violation (a decision on nothing, a worker that died with Redis). */
  notes: string[];
  commands: CommandLog[];
  ledgerUsd: number;
  netUsd: number;
  unknownUsd: number;
  requests: number;
  /** Objects in the history's storage sink at its end (undefined: the world has none). */
  sinkObjects?: number | undefined;
  ms: number;
}

export interface RunHistoryOptions {
  /** bin/genpipe.js of the build under test. */
  bin: string;
  /** Hard bound on one command (default 90 s). */
  boundMs?: number;
}

const PIPELINE = 'history';
const SINK_BUCKET = 'history';

/**
 * With a sink, each new run of the history has a manifest of its own (its run directory records
 * which), the same but for the sheets' body colour: so a later run's sheets have other bytes at
 * the keys an earlier run's took, and meet them as conflicts.
 */
const COLOURS = ['#cc2200', '#0022cc', '#22aa00', '#aa00aa', '#00aaaa', '#aaaa00', '#555555'];

function manifestText(h: History, sinkEndpoint: string | undefined, run = 0): string {
  const w = h.world;
  const lines = [
    'version: 1',
    `name: ${PIPELINE}`,
    `prices: { soul-standard: ${POSTER_PRICE} }`,
    'defaults:',
    `  concurrency: ${w.concurrency}`,
    `  on_nsfw: ${w.onNsfw}`,
    '  polling: { initial_ms: 100, min_ms: 20, max_ms: 400 }',
    ...(w.manifestBudget === null ? [] : [`  budget_usd: ${w.manifestBudget}`]),
    // One prefix for every run, on purpose: no `{{ run.id }}`.
    ...(sinkEndpoint === undefined ? [] : ['  output:', `    sink: { url: "s3://${SINK_BUCKET}/shared", endpoint: "${sinkEndpoint}" }`]),
    'steps:',
    '  sheets:',
    '    model: character-sheet',
    `    matrix: { seed: { range: { from: 1, to: ${w.sheets} } } }`,
    sinkEndpoint === undefined
      ? '    input: { tier: cats, seed: "{{ seed }}", brief: "A mascot" }'
      : `    input: { tier: cats, seed: "{{ seed }}", brief: "A mascot", body_color: "${COLOURS[run % COLOURS.length] as string}" }`,
  ];
  if (w.posters > 0) {
    lines.push(
      '  posters:',
      '    model: soul-standard',
      `    matrix: { n: { range: { from: 1, to: ${w.posters} } } }`,
      '    input: { prompt: "Poster {{ n }}", aspect_ratio: "1:1", resolution: 1080p }',
    );
  }
  return `${lines.join('\n')}\n`;
}

/**
 * A budget a command was given, with what was spent when it was given. A resume's `--budget` binds
 * the run only once that start journaled it (its run_started record): a command interrupted before
 * it started gave the run nothing, and later resumes rightly run without it. `startedBefore`: how
 * many run_started records the journal held before the command (the manifest's budget has none).
 */
export interface GivenBudget {
  usd: number;
  spentBefore: number;
  startedBefore?: number;
}

export function journalRecords(runDir: string): JournalRecord[] {
  try {
    return parseJournal(readFileSync(join(runDir, 'journal.jsonl'))).records;
  } catch {
    return [];
  }
}

/** Run directories under out/<pipeline>/, oldest first (not-started.jsonl, the nights that did not run, is no run). */
function runDirsOf(out: string): string[] {
  const root = join(out, PIPELINE);
  let names: string[];
  try {
    names = readdirSync(root, { withFileTypes: true })
      .filter((d) => d.isDirectory() && !d.name.startsWith('.'))
      .map((d) => d.name);
  } catch {
    return [];
  }
  return names.map((n) => join(root, n)).sort((a, b) => statSync(a).birthtimeMs - statSync(b).birthtimeMs || a.localeCompare(b));
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export async function runHistory(h: History, options: RunHistoryOptions): Promise<HistoryOutcome> {
  const started = Date.now();
  const boundMs = options.boundMs ?? 90_000;
  const dir = mkdtempSync(join(tmpdir(), `genpipe-history-${h.seed}-`));
  const out = join(dir, 'runs');
  let manifest = join(dir, `${PIPELINE}.yaml`);
  const w = h.world;
  const store = w.sink ? await startLoopbackS3({ buckets: [SINK_BUCKET] }) : undefined;
  writeFileSync(manifest, manifestText(h, store?.endpoint));
  let runs = 0;
  /** The manifest of the history's next new run: with a sink, one of its own (manifestText). */
  const nextManifest = (): string => {
    if (store && runs > 0) {
      manifest = join(dir, `${PIPELINE}-${runs}.yaml`);
      writeFileSync(manifest, manifestText(h, store.endpoint, runs));
    }
    runs++;
    return manifest;
  };
  const emu: Emulator = await startEmulator({
    port: 0,
    timeScale: w.timeScale,
    seed: h.seed,
    failureRate: w.failureRate,
    nsfwRate: w.nsfwRate,
    faults: w.faults ? profileFromSpec({ submit: w.faults.submit, status: w.faults.status }, 'history') : 'none',
    log: () => {},
  });
  const commands: CommandLog[] = [];
  const notes: string[] = [];
  const budgets = new Map<string, GivenBudget[]>();
  let redis: RedisHandle | undefined;
  // The worker reaches Redis through it, so a partition cuts the worker alone (tcp-proxy.ts).
  let proxy: TcpProxy | undefined;
  let worker: WorkerHandle | undefined;
  let workers = 0;
  const queue = `history-${h.seed}`;
  // GENPIPE_DEBUG passes through: a failing history's internal errors then carry their stacks.
  const env: Record<string, string> = {
    GENPIPE_BASE_URL: emu.url,
    ...(process.env.GENPIPE_DEBUG ? { GENPIPE_DEBUG: process.env.GENPIPE_DEBUG } : {}),
    ...(store ? { AWS_ACCESS_KEY_ID: store.accessKeyId, AWS_SECRET_ACCESS_KEY: store.secretAccessKey, AWS_REGION: 'us-east-1' } : {}),
  };
  try {
    if (h.executor === 'fleet') {
      redis = await startRedis();
      proxy = await startTcpProxy(redis.port);
    }
    const ensureWorker = async (): Promise<void> => {
      if (!redis) return;
      if (worker && worker.child.exitCode === null && worker.child.signalCode === null) return;
      if (worker) notes.push(`worker ${workers} had ended: ${worker.output().trim().split('\n').slice(-1)[0] ?? ''}`);
      worker = await startWorker(options.bin, proxy?.url ?? redis.url, queue, emu.url, `w${++workers}`);
    };
    const fleetFlags = (): string[] => (redis ? ['--redis', redis.url, '--queue', queue] : []);

    /** Something done to the fleet while a command runs; resolves once it is done. */
    const fleetEvent = async (label: string, event: FleetEvent): Promise<void> => {
      await sleep(event.afterMs);
      notes.push(`${label}: ${event.type} at ${event.afterMs} ms`);
      if (event.type === 'kill-worker') {
        await stopWorker(worker);
        await ensureWorker();
      } else if (event.type === 'partition-worker') {
        proxy?.cut(event.mode);
        await sleep(event.downMs);
        proxy?.heal();
        // A cut past the worker's Redis deadline ends it (exit 5): another is started, as a supervisor would.
        await sleep(200);
        await ensureWorker();
      } else if (redis) {
        await redis.stop();
        await sleep(event.downMs);
        await redis.start();
      }
    };

    const command = async (
      label: string,
      args: string[],
      op: { crashAt?: string; killAfterMs?: number; interruptAfterMs?: number; twice?: boolean; during?: FleetEvent | undefined },
    ): Promise<CliResult> => {
      await ensureWorker();
      let during: Promise<void> | undefined;
      let ended = false;
      const sentBefore = emu.requests.byId.size;
      const result = await runCli(args, {
        bin: options.bin,
        env: op.crashAt ? { ...env, GENPIPE_CRASH_AT: op.crashAt } : env,
        boundMs,
        onSpawn: (send) => {
          // Awaited once the command ends; marked handled now, so a failure while the command runs
          // is the history's failure (below), not an unhandled rejection that ends the soak.
          if (op.during) {
            during = fleetEvent(label, op.during);
            during.catch(() => {});
          }
          // A kill -9 or a Ctrl-C at a random moment of the spending: counted from the command's first new request.
          const afterMs = op.killAfterMs ?? op.interruptAfterMs;
          if (afterMs !== undefined) {
            void (async () => {
              // Bounded: ends with the command.
              while (!ended && emu.requests.byId.size === sentBefore) await sleep(5);
              if (ended) return;
              await sleep(afterMs);
              if (op.killAfterMs !== undefined) return send('SIGKILL');
              send('SIGINT');
              if (op.twice) {
                await sleep(150);
                if (!ended) send('SIGINT');
              }
            })();
          }
        },
      });
      ended = true;
      if (during) await during;
      commands.push({
        label,
        args,
        code: result.code,
        signal: result.signal,
        ms: result.ms,
        timedOut: result.timedOut,
        chosenKill: op.crashAt !== undefined || op.killAfterMs !== undefined,
        interrupted: op.interruptAfterMs !== undefined,
        stderr: result.stderr,
      });
      return result;
    };

    /** The budgets a run was given, each with what had been spent when it was given (before the command ran). */
    const addBudget = (runDir: string, flags: readonly string[], spentBefore: number, startedBefore = 0): void => {
      const list = budgets.get(runDir) ?? (w.manifestBudget === null ? [] : [{ usd: w.manifestBudget, spentBefore: 0 }]);
      const i = flags.indexOf('--budget');
      if (i >= 0) list.push({ usd: Number(flags[i + 1]), spentBefore, startedBefore });
      budgets.set(runDir, list);
    };
    const spentNow = (): number => {
      emu.requests.inspect({}); // settles the requests that ended (refunds are lazy)
      return emu.ledger.netMicros() / 1e6;
    };

    const latest = (): string | undefined => runDirsOf(out).at(-1);

    for (const [index, op] of h.ops.entries()) {
      const label = `${index + 1}. ${op.kind}`;
      if (op.kind === 'run' || op.kind === 'resume') {
        const kill =
          op.kill.type === 'crash'
            ? { crashAt: `${op.kill.point}:${op.kill.n}` }
            : op.kill.type === 'sigkill'
              ? { killAfterMs: op.kill.afterMs }
              : op.kill.type === 'sigint'
                ? { interruptAfterMs: op.kill.afterMs, twice: op.kill.twice }
                : {};
        if (op.kind === 'run') {
          const before = new Set(runDirsOf(out));
          const spent = spentNow();
          await command(label, ['run', nextManifest(), '--out', out, '--yes', '--quiet', '--rate', '1000', ...op.flags, ...fleetFlags()], {
            ...kill,
            during: op.during,
          });
          const created = runDirsOf(out).filter((d) => !before.has(d));
          for (const d of created) addBudget(d, op.flags, spent);
        } else {
          const runDir = latest();
          if (runDir === undefined) {
            // The first run died before its directory existed: start it again instead.
            const budget = op.flags.indexOf('--budget');
            const flags = budget >= 0 ? op.flags.slice(budget, budget + 2) : [];
            notes.push(`${label}: no run directory yet, ran it afresh`);
            const spent = spentNow();
            await command(
              `${label} (as a run)`,
              ['run', nextManifest(), '--out', out, '--yes', '--quiet', '--rate', '1000', ...flags, ...fleetFlags()],
              { ...kill, during: op.during },
            );
            for (const d of runDirsOf(out)) addBudget(d, flags, spent);
            continue;
          }
          addBudget(runDir, op.flags, spentNow(), journalRecords(runDir).filter((r) => r.type === 'run_started').length);
          await command(label, ['resume', runDir, '--quiet', '--rate', '1000', ...op.flags, ...fleetFlags()], {
            ...kill,
            during: op.during,
          });
        }
      } else if (op.kind === 'review') {
        const runDir = latest();
        if (runDir === undefined) continue;
        const completed = completedInstances(runDir);
        if (completed.length === 0) {
          notes.push(`${label}: no completed instance to judge`);
          continue;
        }
        const store = new ReviewStore(runDir);
        for (const d of op.decisions) {
          const instance = completed[d.pick % completed.length] as string;
          try {
            await store.apply({ instance, decision: d.decision });
          } catch (error) {
            notes.push(`${label}: ${instance} ${d.decision}: ${(error as Error).message}`);
          }
        }
      } else {
        const runDir = latest();
        if (runDir === undefined) continue;
        const first = command(`${label} (holder)`, ['resume', runDir, '--quiet', '--rate', '1000', ...fleetFlags()], {});
        await sleep(op.afterMs);
        const second = command(
          `${label} (--break-lock)`,
          ['resume', runDir, '--quiet', '--rate', '1000', '--break-lock', ...(op.force ? ['--force'] : []), ...fleetFlags()],
          {},
        );
        await Promise.all([first, second]);
      }
    }

    // Settle: every run followed to its end, with nothing killed, then its report from the journal.
    const totals: RunTotals[] = [];
    const runDirs = runDirsOf(out);
    for (const runDir of runDirs) {
      const settled = await command(
        `settle ${runDir.split('/').at(-1)}`,
        ['resume', runDir, '--quiet', '--rate', '1000', ...fleetFlags()],
        {},
      );
      await waitQuiet(emu);
      const report = await command(`report ${runDir.split('/').at(-1)}`, ['report', runDir, '--json'], {});
      let total: RunTotals['total'] | undefined;
      try {
        total = (JSON.parse(report.stdout) as { total: RunTotals['total'] }).total;
      } catch {
        total = undefined;
      }
      totals.push({
        runDir,
        total,
        settleCode: settled.code,
        budgets: budgets.get(runDir) ?? (w.manifestBudget === null ? [] : [{ usd: w.manifestBudget, spentBefore: 0 }]),
        records: journalRecords(runDir),
      });
    }
    const checked = checkInvariants({
      emu,
      keyId: '00000000-0000-4000-8000-000000000000',
      runs: totals,
      commands,
      concurrency: w.concurrency,
    });
    const stored = store ? await storedObjects(store) : undefined;
    const sinkViolations = stored ? checkSinkInvariants(totals, stored) : [];
    if (stored) {
      const count = (type: string): number => totals.reduce((n, t) => n + t.records.filter((r) => r.type === type).length, 0);
      notes.push(
        `sink: ${stored.size} objects; ${count('sink_uploaded')} sink_uploaded, ${count('sink_conflict')} sink_conflict, ${count('sink_overwrite')} sink_overwrite journaled`,
      );
    }
    return {
      history: h,
      violations: [...checked.violations, ...sinkViolations],
      notes,
      commands,
      ledgerUsd: checked.ledgerUsd,
      netUsd: checked.netUsd,
      unknownUsd: checked.unknownUsd,
      requests: emu.requests.byId.size,
      sinkObjects: stored?.size,
      ms: Date.now() - started,
    };
  } finally {
    await stopWorker(worker);
    await proxy?.close();
    await redis?.dispose();
    await store?.stop();
    // GENPIPE_HISTORY_KEEP=1: the run directories and the emulator's requests and ledger stay, to read a failure.
    if (process.env.GENPIPE_HISTORY_KEEP === '1') {
      writeFileSync(
        join(dir, 'emulator.json'),
        JSON.stringify({ requests: emu.requests.inspect({}), ledger: emu.ledger.entries }, null, 1),
      );
      process.stderr.write(`history ${h.seed} (${h.executor}) kept in ${dir}\n`);
    } else rmSync(dir, { recursive: true, force: true });
    await emu.close();
  }
}

/** Every object of the history's bucket: key → sha256 of its bytes (read back through the SDK, as a user would). */
async function storedObjects(store: LoopbackS3): Promise<Map<string, string>> {
  const { S3Client, ListObjectsV2Command, GetObjectCommand } = await import('@aws-sdk/client-s3');
  const client = new S3Client({
    endpoint: store.endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: store.accessKeyId, secretAccessKey: store.secretAccessKey },
  });
  try {
    const found = new Map<string, string>();
    let token: string | undefined;
    do {
      const listed = await client.send(new ListObjectsV2Command({ Bucket: SINK_BUCKET, ContinuationToken: token }));
      for (const item of listed.Contents ?? []) {
        const got = await client.send(new GetObjectCommand({ Bucket: SINK_BUCKET, Key: item.Key }));
        const bytes = await (got.Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray();
        found.set(item.Key as string, createHash('sha256').update(bytes).digest('hex'));
      }
      token = listed.NextContinuationToken;
    } while (token !== undefined);
    return found;
  } finally {
    client.destroy();
  }
}

/** Instances whose last status is completed and whose files are on disk, sorted. */
function completedInstances(runDir: string): string[] {
  const status = new Map<string, string>();
  const downloaded = new Set<string>();
  for (const r of journalRecords(runDir)) {
    if (r.type === 'status') status.set(r.instance, r.status);
    else if (r.type === 'reroll' || r.type === 'retry') {
      status.delete(r.instance);
      downloaded.delete(r.instance);
    } else if (r.type === 'downloaded') downloaded.add(r.instance);
  }
  return [...status]
    .filter(([id, s]) => s === 'completed' && downloaded.has(id))
    .map(([id]) => id)
    .sort();
}

/** Waits (bounded, 5 s) until no request at the emulator is queued or running. */
async function waitQuiet(emu: Emulator): Promise<void> {
  const end = Date.now() + 5_000;
  // Bounded by the deadline.
  while (Date.now() < end) {
    const busy = (emu.requests.inspect({}) as { status: string }[]).some((r) => r.status === 'queued' || r.status === 'in_progress');
    if (!busy) return;
    await sleep(20);
  }
}
