/**
 * The model of a random history: from a seed, the world a history
 * runs in (the pipeline, the emulator's failure / nsfw rates and injected faults) and the list of
 * operations it performs: runs and resumes with random flags, each maybe killed (kill -9 at a named
 * crash point or after a random delay), review decisions, and on the fleet a worker killed or Redis
 * restarted in the middle of a command. The list is drawn in full before anything runs, so a
 * failing history prints it and `GENPIPE_HISTORY_SEED=n` replays it.
 */
import { CRASH_POINTS } from '../../src/run/attempt/crash-points.js';

export type Executor = 'local' | 'fleet';

/** mulberry32: the same seed draws the same history. */
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

/**
 * How a command ends early: a crash point, a kill -9, or Ctrl-C (SIGINT; `twice`: a second one
 * 150 ms later, during the cleanup), each counted from the command's first new request.
 */
export type Kill =
  | { type: 'none' }
  | { type: 'crash'; point: string; n: number }
  | { type: 'sigkill'; afterMs: number }
  | { type: 'sigint'; afterMs: number; twice: boolean };

/** Something done to the fleet while a command runs. */
export type FleetEvent =
  | { type: 'kill-worker'; afterMs: number }
  | { type: 'restart-redis'; afterMs: number; downMs: number }
  /** The worker's link to Redis cut (a proxy between them) for `downMs`, then healed; the coordinator keeps its own link. */
  | { type: 'partition-worker'; afterMs: number; downMs: number; mode: 'drop' | 'stall' };

export type Op =
  | { kind: 'run'; flags: string[]; kill: Kill; during?: FleetEvent | undefined }
  | { kind: 'resume'; flags: string[]; kill: Kill; during?: FleetEvent | undefined }
  /** Decisions on completed instances of the latest run: `pick` indexes them (modulo their count). */
  | { kind: 'review'; decisions: { pick: number; decision: 'approved' | 'rejected' }[] }
  /** A resume runs; `afterMs` later another `resume --break-lock` (with `--force`: of a live holder on this host). */
  | { kind: 'break-lock-race'; afterMs: number; force: boolean };

export interface World {
  /** Character sheets (keyed, US$0.05 each). */
  sheets: number;
  /** Soul Standard posters (keyless, US$0.03 each); 0: no such step. */
  posters: number;
  concurrency: number;
  onNsfw: 'skip' | 'reroll';
  /** The manifest's budget_usd, if any. */
  manifestBudget: number | null;
  failureRate: number;
  nsfwRate: number;
  /** Injected faults on submits and status reads (rates), or none. */
  faults: { submit: Record<string, number>; status: Record<string, number> } | null;
  timeScale: number;
  /**
   * A storage sink (a loopback s3rver) every run of the history writes, at one prefix with no
   * `{{ run.id }}`: later runs meet earlier runs' objects, and kills land during uploads.
   */
  sink: boolean;
}

export interface History {
  seed: number;
  executor: Executor;
  /** Drawn with the break-lock race allowed (the soak's --break-lock): part of what the seed draws. */
  breakLock: boolean;
  /** Drawn with worker–Redis partitions (the soak's --partitions): part of what the seed draws. */
  partitions?: boolean | undefined;
  world: World;
  ops: Op[];
}

export const SHEET_PRICE = 0.05;
export const POSTER_PRICE = 0.03;

const pick = <T>(r: () => number, items: readonly T[]): T => items[Math.floor(r() * items.length)] as T;
const int = (r: () => number, lo: number, hi: number): number => lo + Math.floor(r() * (hi - lo + 1));
const cents = (usd: number): number => Math.round(usd * 100) / 100;

/**
 * The history a seed draws. `breakLock`: allow the slow break-lock race (it waits out a heartbeat).
 * `partitions`: on the fleet, most commands meet a cut of the worker's link to Redis instead of
 * the other fleet events (a quarter of the cuts outlast the worker's lock lease).
 */
export function generateHistory(seed: number, executor: Executor, options: { breakLock?: boolean; partitions?: boolean } = {}): History {
  const r = prng(seed * 7919 + (executor === 'fleet' ? 1 : 0));
  const sheets = int(r, 4, 16);
  const posters = r() < 0.5 ? int(r, 2, 6) : 0;
  const estimate = sheets * SHEET_PRICE + posters * POSTER_PRICE;
  const faults =
    r() < 0.5
      ? {
          submit: {
            reset_after: pick(r, [0, 0.05, 0.15]),
            reset_before: pick(r, [0, 0.05]),
            error_503: pick(r, [0, 0.05, 0.1]),
            rate_429: pick(r, [0, 0.05]),
            retry_after_s: 0,
            slow_body: pick(r, [0, 0.1]),
            slow_body_chunk_ms: 20,
          },
          status: { error_500: pick(r, [0, 0.05]), reset_before: pick(r, [0, 0.05]), latency_ms: pick(r, [0, 5, 30]) },
        }
      : null;
  const world: World = {
    sheets,
    posters,
    concurrency: int(r, 2, 6),
    onNsfw: r() < 0.5 ? 'skip' : 'reroll',
    manifestBudget: r() < 0.25 ? cents(estimate * (0.4 + r())) : null,
    failureRate: pick(r, [0, 0, 0.1, 0.25]),
    nsfwRate: pick(r, [0, 0, 0.1, 0.25]),
    faults,
    timeScale: pick(r, [0.002, 0.005, 0.01]),
    // Drawn apart, so that a seed draws the same history as before sinks were added, with or without one.
    sink: prng(seed * 104_729 + 17)() < 0.5,
  };
  const killOf = (): Kill => {
    const x = r();
    if (x < 0.45) return { type: 'none' };
    if (x < 0.7) return { type: 'crash', point: pick(r, CRASH_POINTS), n: int(r, 1, Math.max(1, sheets)) };
    if (x < 0.88) return { type: 'sigkill', afterMs: int(r, 0, 800) };
    return { type: 'sigint', afterMs: int(r, 0, 800), twice: r() < 0.4 };
  };
  const duringOf = (): FleetEvent | undefined => {
    if (executor === 'fleet' && options.partitions) {
      if (r() < 0.3) return undefined;
      const mode = r() < 0.5 ? 'drop' : 'stall';
      return {
        type: 'partition-worker',
        mode,
        afterMs: int(r, 100, 1_500),
        downMs: r() < 0.25 ? int(r, 11_000, 13_000) : int(r, 300, 3_000),
      };
    }
    if (executor !== 'fleet' || r() < 0.6) return undefined;
    return r() < 0.5
      ? { type: 'kill-worker', afterMs: int(r, 100, 1_200) }
      : { type: 'restart-redis', afterMs: int(r, 100, 1_200), downMs: int(r, 0, 500) };
  };
  const budgetFlag = (): string[] => (r() < 0.3 ? ['--budget', cents(estimate * (0.3 + 1.2 * r())).toFixed(2)] : []);
  const ops: Op[] = [{ kind: 'run', flags: [...budgetFlag(), ...(r() < 0.15 ? ['--reuse'] : [])], kill: killOf(), during: duringOf() }];
  const count = int(r, 2, 6);
  let reviewed = false;
  for (let i = 0; i < count; i++) {
    const x = r();
    if (x < 0.55) {
      const flags: string[] = [];
      // After review decisions, usually what a reviewer does next: remake the rejected ones.
      if (reviewed && r() < 0.6) flags.push('--retry', 'rejected');
      else if (r() < 0.5) flags.push('--retry', pick(r, ['rejected', 'failed', 'unknown', 'canceled', 'failed,nsfw', 'unknown,failed']));
      reviewed = false;
      flags.push(...budgetFlag());
      if (r() < 0.1) flags.push('--reuse');
      if (r() < 0.1) flags.push('--resubmit-unknown');
      if (options.breakLock && r() < 0.1) flags.push('--break-lock');
      ops.push({ kind: 'resume', flags, kill: killOf(), during: duringOf() });
    } else if (x < 0.85) {
      const n = int(r, 1, 3);
      reviewed = true;
      ops.push({
        kind: 'review',
        decisions: Array.from({ length: n }, () => ({
          pick: int(r, 0, 99),
          decision: r() < 0.7 ? ('rejected' as const) : ('approved' as const),
        })),
      });
    } else if (x < 0.93 || !options.breakLock) {
      // Another run of the same pipeline, maybe reusing the earlier one's results.
      ops.push({ kind: 'run', flags: [...budgetFlag(), ...(r() < 0.5 ? ['--reuse'] : [])], kill: killOf(), during: duringOf() });
    } else {
      ops.push({ kind: 'break-lock-race', afterMs: int(r, 200, 900), force: r() < 0.5 });
    }
  }
  return { seed, executor, breakLock: options.breakLock === true, ...(options.partitions ? { partitions: true } : {}), world, ops };
}

const killText = (k: Kill): string => {
  if (k.type === 'none') return '';
  if (k.type === 'crash') return ` [GENPIPE_CRASH_AT=${k.point}:${k.n}]`;
  if (k.type === 'sigkill') return ` [kill -9 ${k.afterMs} ms after its first request]`;
  return ` [Ctrl-C${k.twice ? ' twice' : ''} ${k.afterMs} ms after its first request]`;
};
const duringText = (d: FleetEvent | undefined): string =>
  d === undefined
    ? ''
    : d.type === 'kill-worker'
      ? ` [kill worker after ${d.afterMs} ms]`
      : d.type === 'partition-worker'
        ? ` [${d.mode === 'drop' ? 'drop' : 'stall'} the worker's link to Redis after ${d.afterMs} ms, for ${d.downMs} ms]`
        : ` [restart Redis after ${d.afterMs} ms, down ${d.downMs} ms]`;

/** The history as lines a person can read and replay. */
export function describeHistory(h: History): string {
  const w = h.world;
  const lines = [
    `seed ${h.seed} on the ${h.executor} executor${h.partitions ? ' with partitions' : ''} (replay: ${h.breakLock ? '' : `GENPIPE_HISTORY_SEED=${h.seed} in CI, or `}npm run soak -- --histories 1 --executor ${h.executor} --seed ${h.seed}${h.breakLock ? ' --break-lock' : ''}${h.partitions ? ' --partitions' : ''})`,
    `world: ${w.sheets} sheets${w.posters ? ` + ${w.posters} keyless posters` : ''}, concurrency ${w.concurrency}, on_nsfw ${w.onNsfw}, manifest budget ${w.manifestBudget ?? 'none'}, failure ${w.failureRate}, nsfw ${w.nsfwRate}, time scale ${w.timeScale}${w.sink ? ', a sink shared by every run' : ''}, faults ${w.faults ? JSON.stringify(w.faults) : 'none'}`,
  ];
  h.ops.forEach((op, i) => {
    const n = `${i + 1}.`;
    if (op.kind === 'run' || op.kind === 'resume')
      lines.push(`${n} ${op.kind} ${op.flags.join(' ')}${killText(op.kill)}${duringText(op.during)}`.replace(/ +/g, ' '));
    else if (op.kind === 'review') lines.push(`${n} review ${op.decisions.map((d) => `#${d.pick}=${d.decision}`).join(', ')}`);
    else lines.push(`${n} resume, and ${op.afterMs} ms later resume --break-lock${op.force ? ' --force' : ''}`);
  });
  lines.push(`${h.ops.length + 1}. settle: a plain resume of each run, then genpipe report --json of each`);
  return lines.join('\n');
}
