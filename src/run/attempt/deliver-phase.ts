/**
 * The deliver phase of an attempt: a completed instance's downloaded files uploaded to its step's
 * storage sink, if it has one. Each upload is journaled (`sink_uploaded`) and retried under the
 * run's retry budget; one the store refuses for good leaves the instance "completed, upload
 * pending": its files stay on disk and `genpipe resume` uploads them without asking anything of
 * the service. Another object with other bytes at a key (`on_conflict: fail`) is not overwritten:
 * the instance is "completed, upload conflict" and the run exits 1; a resume looks again (the
 * object may have been moved) and never writes over it. An upload whose bytes the store could not
 * be made to vouch for is delivered, journaled `sink_unverified`, and named by the report. It
 * returns the attempt's fate (completed, upload pending, upload conflict); settle() does the rest.
 */
import type { StepPlan } from '../../plan/plan.js';
import type { FateOf } from './fate.js';
import type { PhaseDeps } from './phase-deps.js';

/** Uploads of one instance at most this many times before they are left pending (backoff 0.2 s doubling: about 6 s in all). */
const SINK_RETRIES = 5;

export class Delivery {
  /** Sinks' stores that kept failing this run, with the first reason: not tried again until a resume. */
  readonly #storesDown = new Map<object, string>();

  constructor(private readonly d: PhaseDeps) {}

  /**
   * `checkExisting`: look for the object first (a resume, a reuse, a retry may find it there
   * already). `reusedFrom`: the instance reuses an earlier run's result (said with its fate).
   */
  async deliver(
    step: StepPlan,
    id: string,
    checkExisting: boolean,
  ): Promise<FateOf<'completed'> | FateOf<'upload_pending'> | FateOf<'upload_conflict'>> {
    const { fx } = this.d;
    const completed = { kind: 'completed' } as const;
    const sink = fx.settings.sinks?.forStep(step.id);
    const entry = fx.state.instances.get(id);
    if (!sink || !entry) return completed;
    // A store that kept failing once this run is not tried again by every later instance: their
    // files wait on disk too, and generation goes on. Only that store: another step's sink is tried.
    const down = this.#storesDown.get(sink.store);
    if (down !== undefined) return { kind: 'upload_pending', message: down };
    // A few retries per instance, each drawn from the run's budget: a store that is down fails fast.
    let retries = 0;
    const consumeRetry = (): boolean => retries++ < SINK_RETRIES && fx.consumeRetry();
    const result = await fx.op(() =>
      sink.uploadPending(
        fx.settings.runDir,
        id,
        entry,
        { consumeRetry, creditRetry: () => fx.creditRetry(), signal: fx.signal, checkExisting },
        (record) => fx.log(record, true),
      ),
    );
    // A store that kept failing is given up on for the run; a file it refused (one changed since
    // its download, say) concerns that file alone.
    if (result.failed && result.failed.transient !== false) this.#storesDown.set(sink.store, result.failed.message);
    // `on_conflict: skip` left the other object there on purpose: delivered as the user chose.
    const keys = result.conflicts.filter((c) => c.action === 'failed').map((c) => sink.uriOfKey(c.key));
    if (keys.length > 0) return { kind: 'upload_conflict', keys, pending: result.failed?.message };
    if (!result.failed) return completed;
    return { kind: 'upload_pending', message: result.failed.message };
  }
}
