/**
 * Named crash points, for the crash-and-resume tests (reliability.md #1): with
 * `GENPIPE_CRASH_AT=<point>[:<n>]` in the environment, the process kills itself with SIGKILL the
 * n-th time (default the first) it reaches that point, exactly as a power cut would. Unset, each
 * call is one comparison.
 */
export const CRASH_POINTS = ['before_intent_sync', 'after_intent_sync', 'after_post', 'mid_download', 'mid_rename'] as const;
/** Points only an agent conversation reaches (after its session is journaled, while its turn runs). */
export const AGENT_CRASH_POINTS = ['after_agent_session'] as const;
export type CrashPoint = (typeof CRASH_POINTS)[number] | (typeof AGENT_CRASH_POINTS)[number];

let armed: { point: string; hit: number } | null | undefined;
let hits = 0;

export function crashPoint(point: CrashPoint): void {
  if (armed === undefined) {
    const spec = process.env.GENPIPE_CRASH_AT;
    const match = spec ? /^([a-z_]+)(?::(\d+))?$/.exec(spec) : null;
    armed = match ? { point: match[1] ?? '', hit: Number(match[2] ?? '1') } : null;
  }
  if (armed === null || armed.point !== point) return;
  if (++hits >= armed.hit) process.kill(process.pid, 'SIGKILL');
}
