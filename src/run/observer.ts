/**
 * What a run tells an observer as it goes, for figures nobody can read from its files afterwards
 * (metrics/metrics.ts): each request's answer, each journal sync's duration, and its per-route
 * limiter (how long it waited on throttling). Every call is cheap and never throws into the run.
 */
export interface RunObserver {
  /** One exchange with the service ended: `status` is undefined when no answer came (a network error). */
  exchange?(method: string, path: string, status: number | undefined): void;
  /** One fsync of the journal took `ms`. */
  journalSync?(ms: number): void;
  /**
   * The run's per-route limiter, once the run is wired to it: `waitedMs` grows as the run waits on
   * throttling. Returns what the run calls once it ends and its limiter waits no more (an observer
   * that outlives many runs keeps their sum, not each limiter).
   */
  throttling?(limiter: { readonly waitedMs: number }): (() => void) | void;
}
