/**
 * The instance driver: one instance's life, from a resume decision to its final status and files,
 * talking to the run only through its effects (see run-context.ts):
 *
 *   journal intent (synced) → submit → journal submitted → poll until final → journal status
 *   → download each output (temp, fsync, rename) → journal downloaded
 *
 * A resumed instance is skipped (final), re-attached (submitted), resent with the same
 * Idempotency-Key (an intent, keyed model) or reported as unknown (an intent without a key); with
 * `--retry` it starts a new attempt with a new key, with `--reuse` it takes an earlier run's result,
 * and an nsfw result is re-rolled with a seed no other instance of the plan has.
 */
import { link, mkdir, stat, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { agentPollInterval, type TurnPollOptions } from '../../api/agent.js';
import { GenpipeError, IndeterminateSubmissionError } from '../../api/errors.js';
import { backoffDelay } from '../../api/retry.js';
import { sleep } from '../../api/sleep.js';
import { sha256Hex } from '../../api/transport.js';
import { compileTemplate } from '../../manifest/template.js';
import type { AdapterContext, InstanceScript, ModelAdapter, OutputRef, Submission } from '../../models/adapter.js';
import { SEED_MAX, seedMovedOn } from '../../models/model.js';
import { adapterFor, definitionOf, isRemoteUrl, mapImageFields } from '../../models/registry.js';
import { runIdempotencyKey } from '../../plan/instance.js';
import { InstanceError, type Plan, type PlannedInstance, type StepPlan } from '../../plan/plan.js';
import { formatUsd } from '../../util/format-usd.js';
import { crashPoint } from './crash-points.js';
import { DownloadError, downloadToFile, writeTextOutput } from '../files/download.js';
import type { TerminalStatus } from '../journal/journal-records.js';
import type { ImageSize } from '../../util/image-size.js';
import { resolveInside, safeFileName, templatedFileName } from '../files/output-names.js';
import type { OutputsCsv } from '../files/outputs-csv.js';
import { outputRows, type OutputRow } from '../files/output-rows.js';
import { localExecutor, type Attempt, type Executor } from './executor.js';
import { TRANSIENT, type FinalTrack, type Followed } from '../polling/follow.js';
import { PollScheduler } from '../polling/poll-schedule.js';
import { linkEarlierFile } from './reuse.js';
import type { RunEffects } from '../run-context.js';
import { outputsDigest, resumeAction, type InstanceState } from '../journal/run-state.js';
import type { RetryStatus, RunOptions } from '../run-options.js';
import { noteUnsent } from '../lock/unsent-notes.js';
import type { AsyncQueue } from '../limits/slots.js';
import type { Reservation } from './spend.js';

/** A completed upstream instance, as its for_each step reads it. */
export interface Upstream {
  instance: PlannedInstance;
  outputs: Record<string, unknown>;
}

const MAX_REROLLS = 3;
/** Retries of an instance's uploads to its sink (backoff 0.2 s doubling: about 6 s in all) before they are left pending. */
const SINK_RETRIES = 5;
/** How long a cancel (--cancel-on-abort) or an agent interrupt may take after Ctrl-C. */
export const CANCEL_TIMEOUT_MS = 4_000;
const BUSY_WAIT: TurnPollOptions = { initialMs: 2_000, maxMs: 10_000, factor: 1.5 };

interface InstanceRecord {
  step: StepPlan;
  values: Record<string, unknown>;
  upstreamValues?: Record<string, unknown> | undefined;
}

export class InstanceDriver {
  readonly #fx: RunEffects;
  readonly #o: RunOptions;
  readonly #plan: Plan;
  readonly #outputs: OutputsCsv;
  readonly #random: () => number;
  readonly #polls: PollScheduler;
  /** Sinks' stores that kept failing this run, with the first reason: not tried again until a resume. */
  readonly #storesDown = new Map<object, string>();
  /** Where attempts are submitted and followed: here, or a fleet's queue. */
  readonly #executor: Executor;
  readonly #conversations = new Map<string, Promise<void>>();
  readonly #records = new Map<string, InstanceRecord>();
  /** Seeds given to re-rolls (journaled ones included), so two re-rolls never send the same one. */
  readonly #rerollSeeds = new Set<number>();
  #rejectedIds: Promise<ReadonlyMap<string, string | undefined>> | undefined;
  /** Per step, which seeds its own instances send (see seedMembership). */
  readonly #stepSeeds = new Map<string, (seed: number) => boolean>();

  /** `outputs`: outputs.csv; a finished instance's rows go there at once (spilled to disk), and the run forgets it. */
  constructor(
    fx: RunEffects,
    outputs: OutputsCsv,
    private readonly hooks: {
      /** Told of each instance as it finishes, before its state is forgotten (the gallery keeps a cell of it). */
      onFinished?: (id: string, entry: InstanceState) => void;
      /** Told of each file downloaded (its path relative to the run directory), with an image's size when its first bytes told it. */
      onDownloaded?: (path: string, imageSize: ImageSize | undefined) => void;
    } = {},
  ) {
    this.#fx = fx;
    this.#o = fx.options;
    this.#plan = fx.plan;
    this.#outputs = outputs;
    this.#random = fx.options.random ?? Math.random;
    this.#executor = fx.options.executor ?? localExecutor;
    const defaults = fx.plan.loaded.manifest.defaults ?? {};
    this.#polls = new PollScheduler(
      {
        ...(defaults.polling?.initial_ms ? { baseMs: defaults.polling.initial_ms } : {}),
        ...(defaults.polling?.max_ms ? { capMs: defaults.polling.max_ms } : {}),
        ...(defaults.polling?.min_ms ? { floorMs: defaults.polling.min_ms } : {}),
        ...fx.options.poll,
      },
      this.#random,
    );
    for (const [model, durations] of fx.options.pollPrior ?? []) this.#polls.seed(model, durations);
    for (const entry of fx.state.instances.values()) if (entry.rerollSeed !== undefined) this.#rerollSeeds.add(entry.rerollSeed);
  }

  /** Runs one instance of `step` to its end; a completed one is pushed to `completions` for its for_each step. */
  async process(step: StepPlan, planned: PlannedInstance, completions: AsyncQueue<Upstream> | undefined): Promise<void> {
    const adapter = adapterFor(step.model);
    this.#records.set(planned.id, { step, values: planned.values, upstreamValues: planned.upstreamValues });
    if (!adapter) {
      this.#fx.fail(step, planned.id, 'invalid_input', `raw model path ${step.model} can be planned but not run yet`);
      return;
    }
    let entry = this.#fx.state.instances.get(planned.id);
    try {
      const retrying = this.#retryStatusOf(entry, adapter);
      // At most once per `--retry` round, however often the run is resumed (the round is recorded).
      const round = this.#fx.recorded.retryRound;
      if (
        retrying !== undefined &&
        this.#fx.retry.has(retrying) &&
        entry?.retryRound !== round &&
        // An unknown whose job an earlier coordinator left in Redis is not unknown: #drive learns it.
        !(retrying === 'unknown' && (await this.#holdsIntent(step, adapter, planned.id, entry)))
      ) {
        // `--retry`: a new attempt of the same instance, with a new key; the attempt left behind keeps its money.
        await this.#fx.log({ type: 'retry', instance: planned.id, attempt: (entry?.retries ?? 0) + 1, previous: retrying, round }, true);
        entry = this.#fx.state.instances.get(planned.id);
      } else if (
        entry?.final?.status === 'completed' &&
        entry.reusedFrom === undefined &&
        this.#fx.retry.has('rejected') &&
        (await this.#rejectsCurrent(planned.id, entry))
      ) {
        if (!(await this.#remakeRejected(step, planned, entry))) return;
        entry = this.#fx.state.instances.get(planned.id);
      }
      const instance =
        entry?.rerollSeed !== undefined
          ? withSeed(planned, entry.rerollSeed)
          : entry && entry.rerolls > 0
            ? rerolledBefore(step, planned, entry.rerolls)
            : planned;
      const final = await this.#drive(step, adapter, instance, entry);
      if (final?.status === 'completed' && completions) completions.push({ instance: planned, outputs: final.outputs });
      if (final) this.#compact(planned.id);
    } catch (error) {
      if (!(error instanceof GenpipeError) || error.code !== 'aborted') throw error;
      // Stopped on its way: final counts as its status (its files, if any are missing, a resume
      // fetches), sent and not final is in flight, nothing sent is not started. So the summary's
      // counts add up, and agree with the report's.
      const left = this.#fx.state.instances.get(planned.id);
      if (left?.final) this.#fx.tally(left.reusedFrom !== undefined ? 'reused' : left.final.status);
      else this.#fx.tally(left?.submission || left?.intent ? 'inFlight' : 'pending');
    }
  }

  /**
   * True when the review rejected the output the instance has now (review.json, read once): a
   * decision binds to the output it judged, so a remade instance is not remade again by a repeat.
   * A decision recorded without its output (older genpipe) stands for the output there when the
   * round started: it remakes the instance once per `--retry rejected` round.
   */
  async #rejectsCurrent(id: string, entry: InstanceState): Promise<boolean> {
    this.#rejectedIds ??= this.#o.review?.rejected() ?? Promise.resolve(new Map<string, string | undefined>());
    const rejected = await this.#rejectedIds;
    if (!rejected.has(id)) return false;
    const judged = rejected.get(id);
    // A decision recorded without its output (older genpipe, or written by hand) remakes once per round.
    return judged === undefined ? entry.retryRound !== this.#fx.recorded.retryRound : judged === outputsDigest(entry);
  }

  /**
   * `--retry rejected`: a completed result the reviewer rejected is made again, as an nsfw re-roll
   * is, with a seed outside the sweep (journaled as a `reroll`). Its files move first to
   * `outputs/<step>/rejected/`, kept and out of the new attempt's way. A model without a seed is
   * left as it is (false), with a line saying so.
   */
  async #remakeRejected(step: StepPlan, planned: PlannedInstance, entry: InstanceState): Promise<boolean> {
    const attempt = entry.rerolls + 1;
    const seed = this.#rerollSeed(step, planned, attempt);
    if (seed === undefined) {
      this.#fx.emit({
        type: 'instance_skipped',
        step: step.id,
        instance: planned.id,
        reason: `rejected in review, but ${step.model} takes no seed to make it differently; it is kept as it was`,
      });
      return false;
    }
    for (const download of entry.downloads?.values() ?? []) await setAside(this.#o.runDir, download.path, entry.rerolls);
    await this.#fx.log({ type: 'reroll', instance: planned.id, attempt, seed, round: this.#fx.recorded.retryRound }, true);
    this.#fx.tally('rerolled');
    return true;
  }

  /** What `--retry` calls an instance's outcome so far (failed, canceled, nsfw, unknown), if it is one of those. */
  #retryStatusOf(entry: InstanceState | undefined, adapter: ModelAdapter): Exclude<RetryStatus, 'rejected'> | undefined {
    const action = resumeAction(entry, adapter.idempotentSubmit, this.#fx.state.suspectAll);
    if (action.kind === 'failed') return 'failed';
    if (action.kind === 'unknown') return 'unknown';
    if (action.kind === 'done' && action.status !== 'completed') return action.status;
    return undefined;
  }

  /**
   * Whether the run's executor still holds the attempt behind an intent no submission answered (a
   * fleet job an earlier coordinator queued): then its submit is learnt from there (`#reclaim`),
   * never called unknown nor sent again.
   */
  async #holdsIntent(step: StepPlan, adapter: ModelAdapter, id: string, entry: InstanceState | undefined): Promise<boolean> {
    if (entry?.intent === undefined || entry.submission !== undefined || entry.final !== undefined) return false;
    return this.#fx.op(() => this.#executor.holds(this.#attempt(step, adapter, id, this.#script(step))));
  }

  /**
   * The submission of a held attempt (`#holdsIntent`), journaled as a submit's is; undefined when the
   * instance ends otherwise: unknown (nothing could be learnt), failed (its submit was refused), or
   * left for a resume (the run is stopping, or another holder took the run over).
   */
  async #reclaim(step: StepPlan, adapter: ModelAdapter, instance: PlannedInstance): Promise<Submission | undefined> {
    if (!(await this.#fx.fenced())) {
      this.#fx.tally('inFlight');
      return undefined;
    }
    try {
      const submission = await this.#fx.op(() =>
        this.#executor.reclaim(this.#attempt(step, adapter, instance.id, this.#script(step)), this.#ctx()),
      );
      await this.#fx.log({ type: 'submitted', instance: instance.id, handle: submission }, true);
      this.#fx.emit({ type: 'instance_submitted', step: step.id, instance: instance.id, model: step.model, estimatedUsd: step.priceUsd });
      return submission;
    } catch (error) {
      if (!(error instanceof GenpipeError)) throw error;
      if (error.code === 'aborted') {
        // Withdrawn from the queue before any worker began to send it: never sent, and journaled so.
        if (error.neverSent) await this.#fx.log({ type: 'refused', instance: instance.id, code: 'not_sent' }, true).catch(() => {});
        throw error;
      }
      if (error instanceof IndeterminateSubmissionError) {
        this.#fx.tally('unknown');
        this.#fx.emit({ type: 'instance_unknown', step: step.id, instance: instance.id, message: error.message });
        return undefined;
      }
      this.#fx.fail(step, instance.id, error.code, error.message);
      return undefined;
    }
  }

  /** The key this run sends for an instance: the plan's key bound to the run and the attempt (undefined for keyless models). */
  #keyOf(adapter: ModelAdapter, instance: PlannedInstance, entry: InstanceState | undefined): string | undefined {
    const planKey = adapter.idempotentSubmit ? instance.key : undefined;
    return planKey === undefined ? undefined : runIdempotencyKey(planKey, this.#o.runId, entry?.retries ?? 0);
  }

  /** Runs an instance to a final status (or gives up on it); returns the final result, if any. */
  async #drive(
    step: StepPlan,
    adapter: ModelAdapter,
    instance: PlannedInstance,
    entry: InstanceState | undefined,
  ): Promise<{ status: TerminalStatus; outputs: Record<string, unknown> } | undefined> {
    let action = resumeAction(entry, adapter.idempotentSubmit, this.#fx.state.suspectAll);
    if (action.kind === 'done' && entry?.final) {
      const final = entry.final;
      if (
        final.status === 'completed' &&
        !(await this.#downloadAll(step, instance, final.outputs as OutputRef[], entry, answerOf(step, final.result)))
      ) {
        // Counted as its status, as the report counts it; the files it lacks are said apart (filesMissing).
        this.#fx.tally(entry.reusedFrom !== undefined ? 'reused' : final.status);
        return undefined;
      }
      // Files an earlier start could not upload go now: nothing is asked of the service for them.
      if (final.status === 'completed') await this.#deliver(step, instance.id, true);
      // Its money is in what the journal committed (spend.ts): nothing to add.
      if (entry.reusedFrom !== undefined) this.#fx.tally('reused');
      else this.#fx.tally(final.status);
      return { status: final.status, outputs: final.result ?? {} };
    }
    if (action.kind === 'failed') {
      this.#fx.tally('failed');
      this.#fx.failures++;
      return undefined;
    }
    if (action.kind === 'unknown' && (await this.#holdsIntent(step, adapter, instance.id, entry))) {
      // An earlier coordinator's job is still in Redis: its submit is learnt from it, never sent again.
      const submission = await this.#reclaim(step, adapter, instance);
      if (!submission) return undefined;
      action = { kind: 'reattach', submission };
    }
    if (action.kind === 'unknown') {
      if (!this.#o.resubmitUnknown) {
        this.#fx.tally('unknown');
        this.#fx.emit({
          type: 'instance_unknown',
          step: step.id,
          instance: instance.id,
          message: 'an earlier submit may or may not have reached the service; resend it with `genpipe resume --retry unknown`',
        });
        return undefined;
      }
      // `--resubmit-unknown`: the unknown attempt is settled as unknown (up to its price) and sent
      // again with the same key and identity, so on a fleet the job Redis still holds is followed.
      await this.#fx.log(
        { type: 'retry', instance: instance.id, attempt: (entry?.retries ?? 0) + 1, previous: 'unknown', sameKey: true },
        true,
      );
      action = { kind: 'fresh' };
    }
    if (action.kind === 'fresh' && this.#fx.reuse) {
      const reused = await this.#reuse(step, instance);
      if (reused) return reused;
    }
    const script = this.#script(step);
    const conversation = adapter.conversational ? this.#conversationOf(step, instance) : undefined;
    const release = conversation === undefined ? undefined : await this.#lockConversation(conversation);
    try {
      let submission: Submission | undefined = action.kind === 'reattach' ? action.submission : undefined;
      let submittedAt = entry?.submittedAt ?? Date.now();
      // The attempt's money: an attempt an earlier process sent (followed again, or resent with its
      // own key) is already in what the journal committed; a new one reserves its price.
      let reservation: Reservation;
      // What the followed submission was sent with, so the service's answer is checked against it.
      let sentBody: unknown;
      if (submission) {
        reservation = this.#fx.spend.adopt(step.priceUsd ?? 0);
        sentBody = this.#sentBody(step, instance, entry);
      } else {
        if (conversation !== undefined) script.sessionId = this.#fx.state.sessions.get(conversation);
        const key =
          action.kind === 'resubmit_same_key' ? action.key : this.#keyOf(adapter, instance, this.#fx.state.instances.get(instance.id));
        const sent = await this.#submit(
          step,
          this.#attempt(step, adapter, instance.id, script),
          instance,
          key,
          action.kind === 'resubmit_same_key' ? this.#fx.spend.adopt(step.priceUsd ?? 0) : undefined,
        );
        if (!sent) return undefined;
        ({ submission, reservation, body: sentBody } = sent);
        submittedAt = Date.now();
        if (
          conversation !== undefined &&
          submission.kind === 'agent_turn' &&
          this.#fx.state.sessions.get(conversation) !== submission.sessionId
        ) {
          await this.#fx.log({ type: 'agent_session', conversation, sessionId: submission.sessionId }, true);
          crashPoint('after_agent_session');
        }
      }
      const result = await this.#track(
        step,
        this.#attempt(step, adapter, instance.id, script),
        instance,
        submission,
        submittedAt,
        reservation,
        sentBody,
      );
      if (!result) return undefined;
      // Failed, nsfw and canceled requests are refunded (§8): the reservation goes back.
      if (result.status !== 'completed') reservation.release();
      if (result.status === 'nsfw' && (step.step.on_nsfw ?? this.#plan.loaded.manifest.defaults?.on_nsfw) === 'reroll') {
        const attempt = (this.#fx.state.instances.get(instance.id)?.rerolls ?? 0) + 1;
        const seed = attempt <= MAX_REROLLS ? this.#rerollSeed(step, instance, attempt) : undefined;
        if (seed !== undefined) {
          // The nsfw attempt is refunded (§8); the instance goes on with a seed no other instance
          // of the plan has, so the re-roll never buys a duplicate. The seed is journaled as sent.
          await this.#fx.log({ type: 'reroll', instance: instance.id, attempt, seed }, true);
          this.#fx.tally('rerolled');
          this.#fx.emit({ type: 'instance_rerolled', step: step.id, instance: instance.id, attempt, seed, estimatedUsd: step.priceUsd });
          release?.();
          return this.#drive(step, adapter, withSeed(instance, seed), this.#fx.state.instances.get(instance.id));
        }
      }
      this.#fx.emit({
        type: 'instance_finished',
        step: step.id,
        instance: instance.id,
        status: result.status,
        estimatedUsd: step.priceUsd,
        actualCostUsd: result.actualCostUsd,
        error: result.error,
      });
      if (
        result.status === 'completed' &&
        !(await this.#downloadAll(step, instance, result.files, this.#fx.state.instances.get(instance.id), answerOf(step, result.outputs)))
      ) {
        // Completed at the service, as the report counts it; the files it lacks are said apart (filesMissing).
        this.#fx.tally(result.status);
        return undefined;
      }
      // Downloaded by this process just now: new to the sink unless a run before put them there.
      if (result.status === 'completed')
        await this.#deliver(step, instance.id, this.#fx.state.instances.get(instance.id)?.retries !== 0 || this.#fx.resumed);
      this.#fx.tally(result.status);
      if (result.status !== 'completed') this.#fx.noteFailure(step, instance.id);
      return { status: result.status, outputs: result.outputs };
    } finally {
      release?.();
    }
  }

  /**
   * `--reuse`: an earlier run completed the same model and body, so its files are linked in and the
   * instance is done at US$0, with nothing sent. Undefined when there is nothing to reuse (or an
   * earlier file is gone or changed): the instance is generated as usual.
   */
  async #reuse(
    step: StepPlan,
    instance: PlannedInstance,
  ): Promise<{ status: TerminalStatus; outputs: Record<string, unknown> } | undefined> {
    const bodyHash = sha256Hex(JSON.stringify(instance.body));
    const found = this.#fx.reuse?.find(step.model, bodyHash);
    if (!found) return undefined;
    const paths = found.outputs.map((file, index) => outputPath(step.id, instance, file, found.outputs.length, index));
    for (const [index, file] of found.files.entries()) {
      const path = paths[index] as string;
      if (!(await this.#fx.op(() => linkEarlierFile(found, file, this.#o.runDir, path)))) return undefined;
    }
    await this.#fx.log(
      {
        type: 'reused',
        instance: instance.id,
        model: step.model,
        bodyHash,
        fromRunId: found.runId,
        outputs: found.outputs,
        ...(found.result === undefined ? {} : { result: found.result }),
      },
      true,
    );
    for (const [index, file] of found.files.entries()) {
      await this.#fx.log({
        type: 'downloaded',
        instance: instance.id,
        output: index,
        path: paths[index] as string,
        sha256: file.sha256,
        size: file.size,
      });
    }
    await this.#deliver(step, instance.id, true);
    this.#fx.tally('reused');
    this.#fx.emit({ type: 'instance_reused', step: step.id, instance: instance.id, fromRunId: found.runId });
    return { status: 'completed', outputs: found.result ?? {} };
  }

  /**
   * A seed for a re-roll that no instance of the step uses and no earlier re-roll of this run took:
   * drawn from the instance id and attempt (so it is stable to read), then probed upwards. Undefined
   * when the model takes no seed.
   */
  #rerollSeed(step: StepPlan, instance: PlannedInstance, attempt: number): number | undefined {
    if (definitionOf(step.model)?.seeded !== true || instance.body === null || typeof instance.body !== 'object') return undefined;
    const used = this.#seedsOf(step);
    const start = Number.parseInt(sha256Hex(`${instance.id}\u0000${attempt}`).slice(0, 8), 16) % SEED_MAX;
    for (let probe = 0; probe < SEED_MAX; probe++) {
      const seed = ((start + probe) % SEED_MAX) + 1;
      if (!used(seed) && !this.#rerollSeeds.has(seed)) {
        this.#rerollSeeds.add(seed);
        return seed;
      }
    }
    return undefined;
  }

  /** Which seeds the step's own instances send, as a membership test (computed once per step). */
  #seedsOf(step: StepPlan): (seed: number) => boolean {
    let test = this.#stepSeeds.get(step.id);
    if (!test) {
      test = seedMembership(step, () => {
        const seeds = new Set<number>();
        for (const entry of this.#plan.entries(step.id, this.#o.catalog)) {
          if (entry instanceof InstanceError) continue;
          const seed = (entry.body as { seed?: unknown } | null)?.seed;
          if (typeof seed === 'number') seeds.add(seed);
        }
        return seeds;
      });
      this.#stepSeeds.set(step.id, test);
    }
    return test;
  }

  /**
   * Forgets a finished instance once its outputs.csv rows are set aside. Nothing reads its state
   * again in this run (the journal holds it for a resume), so memory stays flat however many
   * instances finish.
   */
  #compact(id: string): void {
    const entry = this.#fx.state.instances.get(id);
    if (!entry?.final) return;
    this.#outputs.add(id, this.#csvRows(id, entry));
    this.hooks.onFinished?.(id, entry);
    this.#fx.state.instances.delete(id);
    this.#records.delete(id);
  }

  #script(step: StepPlan): InstanceScript {
    return { replies: step.step.replies };
  }

  #conversationOf(step: StepPlan, instance: PlannedInstance): string {
    if (!step.step.conversation) return `${step.id}:${instance.id}`;
    const rendered = compileTemplate(step.step.conversation).render({ vars: this.#plan.loaded.manifest.vars ?? {}, ...instance.values });
    return `${step.id}:${String(rendered)}`;
  }

  /** One turn per session at a time (§4.6 rule 3): instances of one conversation take turns. */
  async #lockConversation(conversation: string): Promise<() => void> {
    const previous = this.#conversations.get(conversation) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    this.#conversations.set(
      conversation,
      previous.then(() => mine),
    );
    await this.#fx.wait('an agent conversation', () => previous);
    let released = false;
    return () => {
      if (!released) {
        released = true;
        release();
      }
    };
  }

  // -------------------------------------------------------------------------------------------
  // Submitting.

  /**
   * Sends an instance's submit; `adopted`: the reservation of an attempt an earlier process sent with
   * the same key (resent here), else the price is reserved from the budget first.
   */
  async #submit(
    step: StepPlan,
    attempt: Attempt,
    instance: PlannedInstance,
    key: string | undefined,
    adopted: Reservation | undefined,
  ): Promise<{ submission: Submission; reservation: Reservation; body: unknown } | undefined> {
    const price = step.priceUsd ?? 0;
    if (this.#fx.stopping) {
      this.#fx.tally('pending');
      return undefined;
    }
    const reservation = adopted ?? this.#fx.spend.reserve(price);
    if (!reservation) {
      const spend = this.#fx.spend;
      this.#fx.stopRun(
        'budget',
        `Stopped before going over the budget of ${formatUsd(spend.budgetUsd ?? 0)} (${formatUsd(spend.committedUsd)} committed over the run's life).`,
      );
      this.#fx.tally('pending');
      return undefined;
    }
    const body = await this.#prepareBody(step, instance.body);
    const bodyHash = sha256Hex(JSON.stringify(body));
    const ctx = this.#ctx();
    const retries = step.step.retries ?? this.#plan.loaded.manifest.defaults?.retries ?? 3;
    let busyPolls = 0;
    // Whether an earlier attempt of this submit may have reached the service (then it is never called unsent).
    let mayHaveArrived = false;
    for (let sends = 0; ; sends++) {
      await this.#fx.wait('the rate limiter', () => this.#fx.limiter.take(this.#fx.signal));
      // Fenced before the intent and again right before the POST: a holder displaced meanwhile
      // (paused, then taken over) writes and sends nothing more (issue 26, item 6).
      if (!(await this.#fx.fenced())) {
        reservation.release();
        this.#fx.tally('pending');
        return undefined;
      }
      crashPoint('before_intent_sync');
      await this.#fx.log({ type: 'intent', instance: instance.id, model: step.model, idempotencyKey: key ?? null, bodyHash }, true);
      crashPoint('after_intent_sync');
      if (!(await this.#fx.fenced())) {
        // Journaled, never sent: the note tells the new holder so (unsent-notes.ts), and it sends
        // the instance as new instead of leaving it unknown.
        const entry = this.#fx.state.instances.get(instance.id);
        await noteUnsent(this.#o.runDir, {
          instance: instance.id,
          bodyHash,
          retries: entry?.retries ?? 0,
          rerolls: entry?.rerolls ?? 0,
        }).catch(() => undefined);
        reservation.release();
        this.#fx.tally('pending');
        return undefined;
      }
      try {
        const submission = await this.#fx.op(() => this.#executor.submit(attempt, body, key, ctx));
        crashPoint('after_post');
        this.#fx.creditRetry();
        // Synced only where losing it would cost: a keyed submit lost in a crash is resent with its
        // key and the service answers with the same request; a keyless one would become unknown.
        await this.#fx.log({ type: 'submitted', instance: instance.id, handle: submission }, key === undefined);
        this.#fx.emit({ type: 'instance_submitted', step: step.id, instance: instance.id, model: step.model, estimatedUsd: step.priceUsd });
        return { submission, reservation, body };
      } catch (error) {
        if (!(error instanceof GenpipeError)) throw error;
        if (error.code === 'aborted') {
          // Stopped before it was sent (a fleet job withdrawn from the queue): nothing was created
          // or charged, and the journal says so, so a resume sends it as new, never as unknown.
          if (error.neverSent) {
            reservation.release();
            await this.#fx.log({ type: 'refused', instance: instance.id, code: 'not_sent' }, true).catch(() => {});
          }
          throw error;
        }
        if (error instanceof IndeterminateSubmissionError) {
          this.#fx.tally('unknown');
          this.#fx.emit({ type: 'instance_unknown', step: step.id, instance: instance.id, message: error.message });
          return undefined;
        }
        if (this.#fx.credentialsRefused(error)) {
          reservation.release();
          await this.#fx.log({ type: 'refused', instance: instance.id, code: error.code });
          return undefined;
        }
        if (error.code === 'insufficient_credits') {
          reservation.release();
          await this.#fx.log({ type: 'refused', instance: instance.id, code: error.code });
          this.#fx.stopRun('insufficient_credits', `${error.message} Top up the account, then resume the run.`);
          this.#fx.tally('pending');
          return undefined;
        }
        if (error.code === 'session_busy' || error.code === 'rate_limited') {
          // Both are refusals before processing, never charged (§7): a 409 waits for the running turn,
          // a 429 slows the whole run down. Either way the retry draws from the run's budget, so a
          // service that never stops refusing ends the run (exit 5) instead of looping forever.
          if (error.code === 'rate_limited') this.#fx.limiter.slowDown(error.retryAfterMs);
          if (!this.#fx.consumeRetry()) {
            reservation.release();
            await this.#fx.log({ type: 'refused', instance: instance.id, code: error.code });
            this.#fx.tally('pending');
            return undefined;
          }
          if (error.code === 'session_busy') {
            const wait = agentPollInterval(busyPolls++, BUSY_WAIT);
            await this.#fx.op(() => sleep(wait, this.#fx.signal));
          }
          sends--;
          continue;
        }
        if (error.neverSent && !mayHaveArrived) {
          // Provably never reached the service (connection refused, DNS), after the transport's own
          // retries: nothing was created or charged, and the journal says so. A service that cannot
          // be reached at all ends the run (exit 5), resumable.
          reservation.release();
          await this.#fx.log({ type: 'refused', instance: instance.id, code: 'not_sent' });
          this.#fx.tally('pending');
          this.#fx.stopRun(
            'unreachable',
            `The service could not be reached (${error.message.replace(/[.]$/, '')}); nothing was sent. Resume the run once it is reachable.`,
          );
          return undefined;
        }
        if (!error.neverSent) mayHaveArrived = true;
        // A keyed submit that kept failing in transit is safe to repeat with the same key.
        if (TRANSIENT.has(error.code) && key !== undefined && sends < retries && this.#fx.consumeRetry()) {
          const wait = backoffDelay(sends, { baseMs: 1_000, capMs: 30_000 }, this.#random);
          await this.#fx.op(() => sleep(wait, this.#fx.signal));
          continue;
        }
        if (TRANSIENT.has(error.code)) {
          // Resumable: the intent stays in the journal without an answer.
          reservation.release();
          this.#fx.tally('pending');
          this.#fx.emit({
            type: 'instance_failed',
            step: step.id,
            instance: instance.id,
            code: error.code,
            message: `${error.message} (left for a resume)`,
          });
          return undefined;
        }
        reservation.release();
        this.#fx.fail(step, instance.id, error.code, error.message);
        return undefined;
      }
    }
  }

  /**
   * The body an earlier process sent for a submission followed again: the instance's body with its
   * local image paths mapped to the URLs they were uploaded to (never uploading anything), when it
   * hashes to what the intent recorded; else undefined (the echo check is skipped).
   */
  #sentBody(step: StepPlan, instance: PlannedInstance, entry: InstanceState | undefined): unknown {
    const mapped = mapImageFields(instance.body, step.spec.imageFields, (v) => this.#fx.state.uploads.get(v) ?? v);
    return entry?.intent && sha256Hex(JSON.stringify(mapped)) === entry.intent.bodyHash ? mapped : undefined;
  }

  /** Uploads local image paths once per run (journaled, so a resume sends the same URL and body). */
  async #prepareBody(step: StepPlan, body: unknown): Promise<unknown> {
    const locals: string[] = [];
    mapImageFields(body, step.spec.imageFields, (v) => {
      if (!isRemoteUrl(v)) locals.push(v);
      return v;
    });
    for (const path of locals) {
      if (this.#fx.state.uploads.has(path)) continue;
      const url = await this.#fx.op(() => this.#o.client.media.uploadLocalImage(path, { signal: this.#fx.signal }));
      await this.#fx.log({ type: 'uploaded', path, url }, true);
    }
    return locals.length === 0 ? body : mapImageFields(body, step.spec.imageFields, (v) => this.#fx.state.uploads.get(v) ?? v);
  }

  #ctx(): AdapterContext {
    return { client: this.#o.client, signal: this.#fx.signal, webhookUrl: this.#o.webhook?.url };
  }

  /** The instance's attempt now: its retries and re-rolls name it (a fleet job id). */
  #attempt(step: StepPlan, adapter: ModelAdapter, instance: string, script: InstanceScript): Attempt {
    const entry = this.#fx.state.instances.get(instance);
    return { runId: this.#o.runId, instance, tag: `${entry?.retries ?? 0}.${entry?.rerolls ?? 0}`, model: step.model, adapter, script };
  }

  // -------------------------------------------------------------------------------------------
  // Tracking.

  /**
   * Follows a submission to its final status through the run's executor (the same follow loop here
   * and on a fleet worker) and journals the status. Undefined when the instance ends otherwise: it
   * failed, or is left for a resume.
   */
  async #track(
    step: StepPlan,
    attempt: Attempt,
    instance: PlannedInstance,
    first: Submission,
    submittedAt: number,
    reservation: Reservation,
    sentBody: unknown,
  ): Promise<FinalTrack | undefined> {
    const ctx = { ...this.#ctx(), sentBody };
    // The submission being followed now: an agent turn moves on with each reply sent.
    let current = first;
    let followed: Followed;
    try {
      // The whole follow is an operation that settles by itself for the watchdog: a fleet's executor
      // waits on a worker's answer, with nothing of this process busy meanwhile.
      followed = await this.#fx.op(() =>
        this.#executor.follow(attempt, first, ctx, {
          signal: this.#fx.signal,
          timer: this.#polls.start(step.model, submittedAt),
          webhook: this.#o.webhook,
          turnPoll: this.#o.agentPoll,
          random: this.#random,
          // A look that may pass is retried while the run's retry budget lasts.
          mayRetry: (failures) => failures < 20 && this.#fx.consumeRetry(),
          answered: () => this.#fx.creditRetry(),
          moved: async (next) => {
            current = next;
            await this.#fx.log({ type: 'submitted', instance: instance.id, handle: next }, true);
          },
          op: (work) => this.#fx.op(work),
        }),
      );
    } catch (error) {
      if (!(error instanceof GenpipeError)) throw error;
      if (error.code === 'aborted') {
        await this.#stopOnAbort(step, attempt.adapter, instance, current, reservation);
        throw error;
      }
      if (this.#fx.credentialsRefused(error)) return undefined;
      if (error.code === 'mismatch') {
        // The service answered about another request: its output is never taken for this one. The
        // attempt is unknown (its money stays counted, up to its price), journaled so a resume does
        // not follow it again and `--retry unknown` sends it anew.
        await this.#fx.log({ type: 'forgotten', instance: instance.id, why: error.message }, true);
        this.#fx.tally('unknown');
        this.#fx.emit({
          type: 'instance_unknown',
          step: step.id,
          instance: instance.id,
          message: `${error.message} The attempt is left unknown; \`genpipe resume --retry unknown\` sends it again.`,
        });
        return undefined;
      }
      if (TRANSIENT.has(error.code)) {
        this.#fx.tally('pending');
        this.#fx.emit({
          type: 'instance_failed',
          step: step.id,
          instance: instance.id,
          code: error.code,
          message: `${error.message} (left for a resume)`,
        });
        return undefined;
      }
      this.#fx.fail(step, instance.id, error.code, error.message);
      return undefined;
    }
    const { result, durationMs } = followed;
    await this.#fx.log(
      {
        type: 'status',
        instance: instance.id,
        status: result.status,
        durationMs,
        outputs: result.files.map((f) => ({ url: f.url, name: f.name, accept: [...f.accept] })),
        result: result.outputs,
        ...(result.error === undefined ? {} : { error: result.error }),
        ...(result.actualCostUsd === undefined ? {} : { actualCostUsd: result.actualCostUsd }),
      },
      // Not synced: lost in a crash, the status is read again from the service on resume.
      false,
    );
    return result;
  }

  /**
   * Ctrl-C while following: a conversation's turn is interrupted, and with --cancel-on-abort a
   * queued request is canceled; a cancel the service took ends the attempt canceled (refunded), so
   * a resume does not wait for it.
   */
  async #stopOnAbort(
    step: StepPlan,
    adapter: ModelAdapter,
    instance: PlannedInstance,
    submission: Submission,
    reservation: Reservation,
  ): Promise<void> {
    const stop = adapter.stop;
    if (!stop || !(this.#o.cancelOnAbort || adapter.conversational)) return;
    const accepted = await this.#fx.op(() =>
      stop(submission, { ...this.#ctx(), signal: AbortSignal.timeout(CANCEL_TIMEOUT_MS) }).catch(() => false),
    );
    if (!this.#o.cancelOnAbort || accepted !== true) return;
    const message = 'canceled by genpipe on abort (--cancel-on-abort)';
    await this.#fx.log({ type: 'status', instance: instance.id, status: 'canceled', outputs: [], error: message }, true);
    reservation.release();
    // Counted once, by process(): an instance interrupted after its final status counts as that status.
    this.#fx.emit({
      type: 'instance_finished',
      step: step.id,
      instance: instance.id,
      status: 'canceled',
      estimatedUsd: step.priceUsd,
      error: message,
    });
  }

  // -------------------------------------------------------------------------------------------
  // Downloads.

  /**
   * Downloads the outputs not downloaded yet. Transient failures (the CDN's 5xx, resets) are retried
   * with backoff; a download that still fails is reported and left for a resume (the status record
   * is journaled, so a resume downloads again). An agent's answer is written after them as
   * `<name>.md`, journaled as the output after the last file. Returns false when a file is missing.
   */
  async #downloadAll(
    step: StepPlan,
    instance: PlannedInstance,
    files: readonly OutputRef[] | readonly { url: string; name?: string | undefined; accept?: string[] | undefined }[],
    entry: InstanceState | undefined,
    answer?: string,
  ): Promise<boolean> {
    const list = files as readonly { url: string; name?: string | undefined; accept?: readonly string[] | undefined }[];
    const id = instance.id;
    for (const [index, file] of list.entries()) {
      if (entry?.downloads?.has(index)) continue;
      const accept = file.accept ?? [];
      const relativePath = outputPath(step.id, instance, file, list.length, index);
      let result: Awaited<ReturnType<typeof downloadToFile>>;
      for (let failures = 0; ;) {
        try {
          result = await this.#fx.op(() =>
            downloadToFile({
              url: file.url,
              runDir: this.#o.runDir,
              relativePath,
              maxBytes: this.#o.maxDownloadBytes ?? 256 * 1024 * 1024,
              allowedContentTypes: accept.length > 0 ? accept : ['*/*'],
              dispatcher: this.#o.client.transport.dispatcher,
              signal: this.#fx.signal,
            }),
          );
          this.#fx.creditRetry();
          break;
        } catch (error) {
          if (!(error instanceof GenpipeError) || error.code === 'aborted') throw error;
          // A refusal (content type, size, unsafe path, a different existing file) would only repeat.
          const transient = TRANSIENT.has(error.code) && !(error instanceof DownloadError);
          if (transient && failures < 20 && this.#fx.consumeRetry()) {
            const wait = backoffDelay(failures++, { baseMs: 200, capMs: 10_000 }, this.#random);
            await this.#fx.op(() => sleep(wait, this.#fx.signal));
            continue;
          }
          this.#fx.filesMissing(
            step,
            id,
            error.code,
            transient ? `${error.message} (the download is left for a resume)` : error.message,
            !transient,
          );
          return false;
        }
      }
      crashPoint('mid_rename');
      this.hooks.onDownloaded?.(result.relativePath, result.imageSize);
      await this.#fx.log({
        type: 'downloaded',
        instance: id,
        output: index,
        path: result.relativePath,
        sha256: result.sha256,
        size: result.size,
      });
    }
    if (answer !== undefined && !entry?.downloads?.has(list.length)) {
      const relativePath = `${stepFolder(step.id)}/${instance.fileStem === undefined ? safeFileName(id, 'md') : templatedFileName(instance.fileStem, 'md')}`;
      try {
        const written = await this.#fx.op(() =>
          writeTextOutput({ runDir: this.#o.runDir, relativePath, text: answer.endsWith('\n') ? answer : `${answer}\n` }),
        );
        await this.#fx.log({
          type: 'downloaded',
          instance: id,
          output: list.length,
          path: written.relativePath,
          sha256: written.sha256,
          size: written.size,
        });
      } catch (error) {
        if (!(error instanceof DownloadError)) throw error;
        this.#fx.filesMissing(step, id, error.code, error.message, true);
        return false;
      }
    }
    return true;
  }

  /**
   * Uploads an instance's downloaded files to its step's storage sink, if it has one (issue 29):
   * each upload is journaled (`sink_uploaded`), retried under the run's retry budget, and one the
   * store refuses for good leaves the instance "completed, upload pending": its files stay on disk
   * and `genpipe resume` uploads them without asking anything of the service. `checkExisting`:
   * look for the object first (a resume, a reuse, a retry may find it there already).
   */
  async #deliver(step: StepPlan, id: string, checkExisting: boolean): Promise<void> {
    const sink = this.#o.sinks?.forStep(step.id);
    const entry = this.#fx.state.instances.get(id);
    if (!sink || !entry) return;
    // A store that kept failing once this run is not tried again by every later instance: their
    // files wait on disk too, and generation goes on. Only that store: another step's sink is tried.
    const down = this.#storesDown.get(sink.store);
    if (down !== undefined) {
      this.#fx.uploadPending(step, id, down);
      return;
    }
    // A few retries per instance, each drawn from the run's budget: a store that is down fails fast.
    let retries = 0;
    const consumeRetry = (): boolean => retries++ < SINK_RETRIES && this.#fx.consumeRetry();
    const result = await this.#fx.op(() =>
      sink.uploadPending(
        this.#o.runDir,
        id,
        entry,
        { consumeRetry, creditRetry: () => this.#fx.creditRetry(), signal: this.#fx.signal, checkExisting },
        (record) => this.#fx.log(record, true),
      ),
    );
    if (result.failed) {
      this.#fx.uploadPending(step, id, result.failed.message);
      // A store that kept failing is given up on for the run; a file it refused (one changed since
      // its download, say) concerns that file alone.
      if (result.failed.transient !== false) this.#storesDown.set(sink.store, result.failed.message);
    }
  }

  /** outputs.csv, with the rows of the instances that did not finish (they are still in the state). */
  async writeOutputsCsv(): Promise<void> {
    await this.#outputs.write([...this.#fx.state.instances].map(([id, entry]): [string, OutputRow[]] => [id, this.#csvRows(id, entry)]));
  }

  /** An instance's outputs.csv rows: one per downloaded file, or one without a file. */
  #csvRows(id: string, entry: InstanceState): OutputRow[] {
    const record = this.#records.get(id);
    return outputRows(
      id,
      entry,
      record && {
        step: record.step,
        values: record.values,
        upstreamValues: record.upstreamValues,
        sink: this.#o.sinks?.forStep(record.step.id),
      },
    );
  }
}

/**
 * Where an instance's output goes in the run directory: `outputs/<step>/<name>[+index].<ext>`, the
 * name from the step's `output.filename` when it has one, else from the instance id.
 */
function outputPath(
  stepId: string,
  instance: Pick<PlannedInstance, 'id' | 'fileStem'>,
  file: { url: string; accept?: readonly string[] | undefined },
  count: number,
  index: number,
): string {
  const extension = extensionFor(file.url, file.accept ?? []);
  const options = count > 1 ? { index } : {};
  const name =
    instance.fileStem === undefined
      ? safeFileName(instance.id, extension, options)
      : templatedFileName(instance.fileStem, extension, options);
  return `${stepFolder(stepId)}/${name}`;
}

/** A step's folder in the run directory: `outputs/<step>`. */
const stepFolder = (stepId: string): string => `outputs/${safeFileName(stepId, 'd').replace(/\.d$/, '')}`;

/** A conversation turn's answer (its outputs' `answer`), saved as a file beside the media it made. */
function answerOf(step: StepPlan, outputs: Record<string, unknown> | undefined): string | undefined {
  const answer = outputs?.answer;
  return adapterFor(step.model)?.conversational === true && typeof answer === 'string' ? answer : undefined;
}

/** An instance re-rolled by a genpipe older than journaled seeds, as that genpipe sent it (the model's rerolledBefore). */
function rerolledBefore(step: StepPlan, instance: PlannedInstance, times: number): PlannedInstance {
  const body = instance.body as Record<string, unknown>;
  const definition = definitionOf(step.model);
  return instance.withBody(definition?.rerolledBefore ? definition.rerolledBefore(body, times) : seedMovedOn(body, times));
}

/**
 * Moves a rejected output to `outputs/<step>/rejected/<attempt>/` (linked there, then unlinked),
 * replacing nothing; a file a crash left at both places (linked, not yet unlinked) is finished, and
 * one already moved is not an error.
 */
async function setAside(runDir: string, path: string, attempt: number): Promise<void> {
  const from = resolveInside(runDir, path);
  const to = join(dirname(from), 'rejected', String(attempt), basename(from));
  await mkdir(dirname(to), { recursive: true });
  try {
    await link(from, to);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return;
    if (code !== 'EEXIST') throw error;
    const [a, b] = await Promise.all([stat(from), stat(to)]);
    if (a.ino !== b.ino || a.dev !== b.dev) throw new GenpipeError('invalid_file', `Cannot set ${path} aside: ${to} is another file.`);
  }
  await unlink(from);
}

/** The instance with another seed (a re-roll), hence another body and key. */
function withSeed(instance: PlannedInstance, seed: number): PlannedInstance {
  return instance.withBody({ ...(instance.body as Record<string, unknown>), seed });
}

/** Axes up to this many values are held as a set; longer ones must be arithmetic (ranges). */
const SEED_SET_MAX = 200_000;

/**
 * Which seeds a step's instances send. A seed written as one sweep axis (`seed: "{{ s }}"`) is
 * tested against that axis (a range without enumerating it) and the include entries; a literal is
 * itself; no seed field means no instance sends one; any other template is enumerated.
 */
function seedMembership(step: StepPlan, enumerate: () => Set<number>): (seed: number) => boolean {
  const written = (step.step.input as Record<string, unknown> | undefined)?.seed;
  if (written === undefined) return () => false;
  if (typeof written === 'number') return (seed) => seed === written;
  const name = typeof written === 'string' ? /^\s*\{\{\s*([A-Za-z_]\w*)\s*\}\}\s*$/.exec(written)?.[1] : undefined;
  const axis = name === undefined ? undefined : step.matrix.axes.find((a) => a.name === name);
  if (!axis || name === undefined) {
    const seeds = step.forEach === undefined ? enumerate() : new Set<number>();
    return (seed) => seeds.has(seed);
  }
  const included = new Set((step.matrix.include ?? []).map((entry) => entry[name]).filter((v): v is number => typeof v === 'number'));
  const first = axis.value(0);
  const second = axis.length > 1 ? axis.value(1) : undefined;
  if (
    axis.length > SEED_SET_MAX &&
    typeof first === 'number' &&
    typeof second === 'number' &&
    axis.value(axis.length - 1) === first + (second - first) * (axis.length - 1)
  ) {
    const stride = second - first;
    return (seed) => {
      const k = (seed - first) / stride;
      return included.has(seed) || (Number.isInteger(k) && k >= 0 && k < axis.length && axis.value(k) === seed);
    };
  }
  for (let i = 0; i < axis.length; i++) {
    const value = axis.value(i);
    if (typeof value === 'number') included.add(value);
  }
  return (seed) => included.has(seed);
}

const EXTENSIONS: Record<string, string> = {
  'image/png': 'png',
  'image/jpeg': 'jpg',
  'image/webp': 'webp',
  'video/mp4': 'mp4',
  'video/webm': 'webm',
  'video/quicktime': 'mov',
  'audio/wav': 'wav',
  'audio/x-wav': 'wav',
  'audio/wave': 'wav',
  'audio/mpeg': 'mp3',
  'audio/mp4': 'm4a',
};

/** The file's extension: the URL's when it is one the accepted types allow, else the first type's. */
function extensionFor(url: string, accept: readonly string[]): string {
  const fromUrl = /\.([a-z0-9]{2,5})$/i.exec(new URL(url).pathname)?.[1]?.toLowerCase();
  const allowed = new Set(accept.map((t) => EXTENSIONS[t]).filter((e): e is string => e !== undefined));
  if (fromUrl && (allowed.has(fromUrl) || (fromUrl === 'jpeg' && allowed.has('jpg')))) return fromUrl === 'jpeg' ? 'jpg' : fromUrl;
  return EXTENSIONS[accept[0] ?? ''] ?? 'bin';
}
