// Helpers for the runner acceptance tests: a real emulator on 127.0.0.1, the built CLI as a child
// process (bin/genpipe.js -> dist/, built by `npm test`), and checks of a run directory against the
// journal, outputs.csv and the emulator's own records.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { parse as parseCsv } from 'csv-parse/sync';
import { expect } from 'vitest';
import { startEmulator, type Emulator } from '../../src/emulator/index.js';
import { parseJournal } from '../../src/run/journal/journal.js';
import type { JournalRecord } from '../../src/run/journal/journal-records.js';

export const BIN = new URL('../../bin/genpipe.js', import.meta.url).pathname;
export const KEY_ID = '00000000-0000-4000-8000-000000000000';
export const SECRET = 'emulator-secret';
export const HF_KEY = `${KEY_ID}:${SECRET}`;

/** A small seeded PRNG (mulberry32): the crash tests pick their kill moments with it. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const temps: string[] = [];
export function tempDir(prefix = 'genpipe-runner-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  temps.push(dir);
  return dir;
}
export function cleanTemps(): void {
  for (const dir of temps.splice(0)) rmSync(dir, { recursive: true, force: true });
}

/** A manifest of `count` character sheets (tier cats, seeds 1..count), written into `dir`. */
export function sheetsManifest(dir: string, count: number, options: { name?: string; brief?: string; extra?: string } = {}): string {
  const name = options.name ?? 'sheets';
  const path = join(dir, `${name}.yaml`);
  writeFileSync(
    path,
    `version: 1
name: ${name}
${options.extra ?? ''}
steps:
  sheets:
    model: character-sheet
    matrix:
      seed: { range: { from: 1, to: ${count} } }
    input:
      tier: cats
      seed: "{{ seed }}"
      brief: ${JSON.stringify(options.brief ?? 'A mascot')}
`,
  );
  return path;
}

/** A manifest of `count` direct marketing images (no Idempotency-Key: keyless). */
export function marketingManifest(dir: string, count: number, name = 'ads'): string {
  const path = join(dir, `${name}.yaml`);
  writeFileSync(
    path,
    `version: 1
name: ${name}
steps:
  ads:
    model: marketing-image
    matrix:
      n: { range: { from: 1, to: ${count} } }
    input:
      prompt: "Banner number {{ n }} for a pet food brand"
      resolution: 1k
      quality: low
`,
  );
  return path;
}

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** Milliseconds from the signal the test sent (kill, killWhen, onSpawn) to the child's end; undefined when none was sent. */
  msAfterSignal?: number;
}

export interface CliOptions {
  env?: Record<string, string>;
  cwd?: string;
  /** Send this signal after `afterMs` (SIGKILL for a power cut, SIGINT for Ctrl-C). */
  kill?: { signal: NodeJS.Signals; afterMs: number };
  /** Send the signal once stderr matches (e.g. the first submit), then after `afterMs`. */
  killWhen?: { signal: NodeJS.Signals; pattern: RegExp };
  /** Called once the child runs, with a function that signals it (at most once). */
  onSpawn?: (send: (signal: NodeJS.Signals) => void) => void;
  /** Called with all of stderr so far, each time more arrives (to wait for a line while it runs). */
  onStderr?: (stderr: string) => void;
  /** Hard limit; the child is SIGKILLed after it and the test fails on the result. */
  timeoutMs?: number;
}

/** Runs the built CLI as a child process. */
export function runCli(args: readonly string[], options: CliOptions = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd: options.cwd,
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', HF_KEY, ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let signalled = false;
    let signalledAt: number | undefined;
    const send = (signal: NodeJS.Signals): void => {
      if (signalled || child.exitCode !== null || child.signalCode !== null) return;
      signalled = true;
      signalledAt = performance.now();
      child.kill(signal);
    };
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      if (options.killWhen && options.killWhen.pattern.test(stderr)) send(options.killWhen.signal);
      options.onStderr?.(stderr);
    });
    const timers: NodeJS.Timeout[] = [];
    if (options.kill) timers.push(setTimeout(() => send(options.kill?.signal ?? 'SIGKILL'), options.kill.afterMs));
    timers.push(setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 60_000));
    options.onSpawn?.(send);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      for (const t of timers) clearTimeout(t);
      resolve({ code, signal, stdout, stderr, ...(signalledAt === undefined ? {} : { msAfterSignal: performance.now() - signalledAt }) });
    });
  });
}

/** The run directory under `--out DIR`: DIR/<pipeline>/<run-id>/ (exactly one). */
export function findRunDir(out: string, pipeline: string): string {
  // `.lock` sits beside the runs (and outlives a killed run, until the next one takes it over).
  const runs = readdirSync(join(out, pipeline)).filter((name) => !name.startsWith('.'));
  expect(runs).toHaveLength(1);
  return join(out, pipeline, runs[0] as string);
}

export function journalOf(runDir: string): { records: JournalRecord[]; tornTail: boolean; corrupt: unknown[] } {
  return parseJournal(readFileSync(join(runDir, 'journal.jsonl')));
}

/** Every file below `dir`, relative, with `/` separators. */
export function filesUnder(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const name of readdirSync(d)) {
      const full = join(d, name);
      if (statSync(full).isDirectory()) walk(full);
      else out.push(relative(dir, full).split('\\').join('/'));
    }
  };
  walk(dir);
  return out.sort();
}

export function sha256File(path: string): string {
  return createHash('sha256').update(readFileSync(path)).digest('hex');
}

interface EmuRow {
  request_id: string;
  idempotency_key: string | null;
  model: string;
  status: string;
  charged_usd: number;
  body_hash: string;
}

/** US$ the account spent at the emulator (reserves + charges - refunds). */
export function spentUsd(emu: Emulator): number {
  return Math.round(emu.ledger.accounts.get(KEY_ID)!.initialMicros - emu.ledger.balanceMicros(KEY_ID)) / 1e6;
}

/** Resolves once the emulator holds at least `count` requests (bounded by `timeoutMs`). */
export async function waitForRequests(emu: Emulator, count: number, timeoutMs = 20_000): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  // Bounded by the deadline.
  while (Date.now() < end) {
    if (emu.requests.byId.size >= count) return true;
    await new Promise((r) => setTimeout(r, 5));
  }
  return false;
}

export function emuRequests(emu: Emulator): EmuRow[] {
  return emu.requests.inspect({}) as EmuRow[];
}

/** At most one emulator request per Idempotency-Key, and every request carries one. */
export function expectOneRequestPerKey(emu: Emulator): Map<string, EmuRow> {
  const byKey = new Map<string, EmuRow>();
  const duplicates: string[] = [];
  for (const row of emuRequests(emu)) {
    expect(row.idempotency_key, `request ${row.request_id} has no Idempotency-Key`).not.toBeNull();
    const key = row.idempotency_key as string;
    if (byKey.has(key)) duplicates.push(key);
    byKey.set(key, row);
  }
  expect(duplicates, 'Idempotency-Keys with more than one request at the emulator').toEqual([]);
  return byKey;
}

export interface FinalCheck {
  /** instance → request id from the journal. */
  requestIds: Map<string, string>;
  /** instance → sha256 of its (single) output. */
  hashes: Map<string, string>;
}

/**
 * Checks a finished run directory: every one of `expected` instances completed, its one output is
 * on disk with the sha256 of its `downloaded` record and its outputs.csv row, the request id of the
 * journal is the emulator's (completed) request for the instance's key, and there is no other file.
 */
export function expectCompletedRun(runDir: string, emu: Emulator, expected: number, step = 'sheets'): FinalCheck {
  const journal = journalOf(runDir);
  expect(journal.corrupt).toEqual([]);
  const intents = new Map<string, string | null>();
  const requestIds = new Map<string, string>();
  const finals = new Map<string, string>();
  const downloads = new Map<string, { path: string; sha256: string }>();
  for (const r of journal.records) {
    if (r.type === 'intent') intents.set(r.instance, r.idempotencyKey);
    if (r.type === 'submitted' && r.handle.kind === 'request') requestIds.set(r.instance, r.handle.requestId);
    if (r.type === 'status') finals.set(r.instance, r.status);
    if (r.type === 'downloaded') {
      const previous = downloads.get(r.instance);
      // A second record for the same output (a crash between rename and record) must agree.
      if (previous) expect(previous).toEqual({ path: r.path, sha256: r.sha256 });
      downloads.set(r.instance, { path: r.path, sha256: r.sha256 });
    }
  }
  expect(finals.size).toBe(expected);
  expect(
    [...finals.values()].every((s) => s === 'completed'),
    JSON.stringify([...finals]),
  ).toBe(true);
  expect(downloads.size).toBe(expected);

  const rows = emuRequests(emu);
  const byId = new Map(rows.map((r) => [r.request_id, r]));
  const hashes = new Map<string, string>();
  for (const [instance, d] of downloads) {
    expect(sha256File(join(runDir, d.path)), d.path).toBe(d.sha256);
    hashes.set(instance, d.sha256);
    const requestId = requestIds.get(instance);
    expect(requestId, instance).toBeDefined();
    const row = byId.get(requestId as string);
    expect(row?.status, instance).toBe('completed');
    expect(row?.idempotency_key).toBe(intents.get(instance));
  }

  const csv = parseCsv(readFileSync(join(runDir, 'outputs.csv'), 'utf8'), { columns: true }) as Record<string, string>[];
  expect(csv).toHaveLength(expected);
  for (const row of csv) {
    const d = downloads.get(row.instance as string);
    expect(d, row.instance).toBeDefined();
    expect(row.status).toBe('completed');
    expect(row.file).toBe(d?.path);
    expect(row.sha256).toBe(d?.sha256);
    expect(row.request_id).toBe(requestIds.get(row.instance as string));
  }

  // On disk: exactly the journaled outputs, and no temp file of a download a crash cut short.
  const outputs = filesUnder(join(runDir, 'outputs', step));
  expect(outputs.map((f) => `outputs/${step}/${f}`).sort()).toEqual([...downloads.values()].map((d) => d.path).sort());
  return { requestIds, hashes };
}

/** No file of `dir`, and no text of `output`, contains `secret`. */
export function expectNoSecret(dir: string | undefined, output: string, secret = SECRET): void {
  expect(output.includes(secret), 'the secret appears in the process output').toBe(false);
  if (dir === undefined) return;
  for (const file of filesUnder(dir)) {
    expect(readFileSync(join(dir, file)).includes(secret), `the secret appears in ${file}`).toBe(false);
  }
}

/** Runs `tasks` with at most `limit` at once. */
export async function inBatches<T>(items: readonly T[], limit: number, task: (item: T, index: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    // Bounded: each turn takes one item.
    while (next < items.length) {
      const index = next++;
      await task(items[index] as T, index);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

/** Runs `body` against an emulator on a free loopback port, closing it whatever happens. */
export async function withEmulator(options: Parameters<typeof startEmulator>[0], body: (emu: Emulator) => Promise<void>): Promise<void> {
  const emu = await startEmulator({ port: 0, log: () => {}, ...options });
  try {
    await body(emu);
  } finally {
    await emu.close();
  }
}

/** A loopback port free a moment ago: for a server to listen on, or, with nothing listening, for a refused connection. */
export { freePort } from '../free-port.js';
