/**
 * The instance driver: one instance's life, from a resume decision to its final status and files.
 * It only orchestrates: it asks what to do next (next-step.ts, pure), runs the phase that does it
 * (submit, follow, download, deliver: each returns its result or an AttemptFate), and hands every
 * fate to settle() (settle.ts), the one place money, counts, records and events are settled.
 *
 *   nextStep → intent (synced) + submit → follow until final → download → deliver → settle
 *
 * An nsfw result may be re-rolled (a new attempt with a seed no other instance has), a `--retry`
 * round starts a new attempt with a new key, and `--retry rejected` remakes a rejected result.
 */
import { GenpipeError } from '../../api/errors.js';
import type { ModelAdapter, Submission } from '../../models/adapter.js';
import { adapterFor } from '../../models/registry.js';
import { sessionOf } from '../../models/submission.js';
import type { PlannedInstance, StepPlan } from '../../plan/plan.js';
import { attemptPriceUsd } from '../../plan/price.js';
import { formatUsd } from '../../util/format-usd.js';
import type { OutputsCsv } from '../files/outputs-csv.js';
import { InstanceRows } from '../files/instance-rows.js';
import type { TerminalStatus } from '../journal/journal-records.js';
import { resumeAction, type InstanceState } from '../journal/run-state.js';
import type { AsyncQueue } from '../limits/slots.js';
import type { FinalTrack } from '../polling/follow.js';
import { PollScheduler } from '../polling/poll-schedule.js';
import type { RunEffects } from '../run-context.js';
import { attemptPrice, toldPrice } from './attempt-money.js';
import { attemptKey, attemptOf, type AttemptRef } from './attempt-ref.js';
import { crashPoint } from './crash-points.js';
import { ConversationLocks } from './conversation-lock.js';
import { Delivery } from './deliver-phase.js';
import { downloadOutputs } from './download-phase.js';
import { isFate, type AttemptFate } from './fate.js';
import { FirstAnswerGate } from './first-answer-gate.js';
import { followAttempt } from './follow-phase.js';
import { nextStep, type NextStep } from './next-step.js';
import { workOf, type AttemptWork } from './executor.js';
import type { DriverHooks, PhaseDeps } from './phase-deps.js';
import { holdsIntent, reclaimAttempt } from './reclaim-phase.js';
import { RetryRounds } from './retry-round.js';
import { instanceNow, RerollSeeds, withSeed } from './reroll-seeds.js';
import { reuseEarlier } from './reuse-phase.js';
import { settle } from './settle.js';
import type { Reservation } from './spend.js';
import { sentBodyOf, submitAttempt } from './submit-phase.js';

export { CANCEL_TIMEOUT_MS } from './follow-phase.js';

/** A completed upstream instance, as its for_each step reads it. */
export interface Upstream {
  instance: PlannedInstance;
  outputs: Record<string, unknown>;
}

/** How an instance ended this start, when it reached a final status. */
type Final = { status: TerminalStatus; outputs: Record<string, unknown> };
/** What one attempt left: the instance's end, a re-roll to send next, or nothing more this start. */
type AttemptEnd = Final | { reroll: PlannedInstance } | undefined;

const MAX_REROLLS = 3;

export class InstanceDriver {
  readonly #fx: RunEffects;
  readonly #d: PhaseDeps;
  readonly #rows: InstanceRows;
  readonly #rounds: RetryRounds;
  readonly #delivery: Delivery;
  readonly #seeds: RerollSeeds;
  readonly #conversations: ConversationLocks;
  readonly #gate = new FirstAnswerGate();
  /** Steps closed this start: the account may not use their model. */
  readonly #closed = new Set<string>();

  /** `outputs`: outputs.csv; a finished instance's rows go there at once (spilled to disk), and the run forgets it. */
  constructor(fx: RunEffects, outputs: OutputsCsv, hooks: DriverHooks = {}) {
    this.#fx = fx;
    const { settings } = fx;
    this.#rows = new InstanceRows(outputs, (stepId) => settings.sinks?.forStep(stepId));
    const polls = new PollScheduler(settings.pollSchedule, settings.random);
    for (const [model, durations] of settings.pollPrior) polls.seed(model, durations);
    this.#d = { fx, executor: settings.executor, polls, random: settings.random, hooks };
    this.#delivery = new Delivery(this.#d);
    this.#seeds = new RerollSeeds(fx.plan, settings.catalog, fx.state.instances.values());
    this.#conversations = new ConversationLocks(fx.plan);
    this.#rounds = new RetryRounds(this.#d, this.#seeds);
  }

  /** The walk is over: what `--retry rejected` could not find in the plan is said. */
  readonly walked = (): Promise<void> => this.#rounds.walked();

  /** Runs one instance of `step` to its end; a completed one is pushed to `completions` for its for_each step. */
  async process(step: StepPlan, planned: PlannedInstance, completions: AsyncQueue<Upstream> | undefined): Promise<void> {
    const adapter = adapterFor(step.model);
    this.#rows.taken(step, planned);
    if (!adapter) {
      this.#fx.fail(step, planned.id, 'invalid_input', `raw model path ${step.model} can be planned but not run yet`);
      return;
    }
    try {
      await this.#rounds.start(step, adapter, planned);
      const entry = this.#fx.state.instances.get(planned.id);
      const final = await this.#drive(step, adapter, instanceNow(step, planned, entry));
      if (final?.status === 'completed' && completions) completions.push({ instance: planned, outputs: final.outputs });
      if (final) this.#compact(planned.id);
    } catch (error) {
      if (!(error instanceof GenpipeError) || error.code !== 'aborted') throw error;
      // Stopped on its way: left as the journal has it (the summary folds the journal).
      await settle({ fx: this.#fx, step, instance: planned.id }, { kind: 'interrupted' });
    }
  }

  /** Runs an instance to a final status (or gives up on it), an attempt at a time; returns the final result, if any. */
  async #drive(step: StepPlan, adapter: ModelAdapter, first: PlannedInstance): Promise<Final | undefined> {
    const fx = this.#fx;
    for (let instance = first; ;) {
      const entry = fx.state.instances.get(instance.id);
      const action = resumeAction(entry, adapter.idempotentSubmit, fx.state.suspectAll);
      const holds = action.kind === 'unknown' && (await holdsIntent(this.#d, step, adapter, instance.id));
      const next = nextStep(action, entry, { holds, resubmitUnknown: fx.settings.resubmitUnknown, reuse: fx.reuse !== undefined });
      const end = await this.#take(step, adapter, instance, next);
      if (end && 'reroll' in end) instance = end.reroll;
      else return end;
    }
  }

  /** Carries out one next step: an attempt's phases, or a settlement. */
  async #take(step: StepPlan, adapter: ModelAdapter, instance: PlannedInstance, next: NextStep): Promise<AttemptEnd> {
    const fx = this.#fx;
    const settling = { fx, step, instance: instance.id };
    switch (next.kind) {
      case 'finish':
        return this.#finishBefore(step, instance, next.final);
      case 'settle':
        await settle(settling, next.fate);
        return undefined;
      case 'resend_unknown': {
        // `--resubmit-unknown`: the unknown attempt is settled as unknown (up to its price) and sent
        // again with the same key and identity, so on a fleet the job Redis still holds is followed.
        const retries = fx.state.instances.get(instance.id)?.retries ?? 0;
        await fx.log({ type: 'retry', instance: instance.id, attempt: retries + 1, previous: 'unknown', sameKey: true }, true);
        return { reroll: instance };
      }
      case 'reclaim': {
        const reclaimed = await reclaimAttempt(this.#d, step, adapter, instance.id);
        if (!isFate(reclaimed)) return this.#attempt(step, adapter, instance, { kind: 'follow', submission: reclaimed });
        await settle(settling, reclaimed);
        return undefined;
      }
      case 'send':
        if (next.reuse) {
          const reused = await reuseEarlier(this.#d, this.#delivery, step, instance);
          if (reused) {
            await settle(settling, reused.fate);
            return { status: 'completed', outputs: reused.outputs };
          }
        }
        return this.#attempt(step, adapter, instance, next);
      case 'follow':
        return this.#attempt(step, adapter, instance, next);
    }
  }

  /** One attempt, sent now or followed again, inside its conversation's turn when the model has conversations. */
  async #attempt(
    step: StepPlan,
    adapter: ModelAdapter,
    instance: PlannedInstance,
    next: Extract<NextStep, { kind: 'send' | 'follow' }>,
  ): Promise<AttemptEnd> {
    const fx = this.#fx;
    const conversation = adapter.conversational ? this.#conversations.conversationOf(step, instance) : undefined;
    const unlock = conversation === undefined ? undefined : await this.#conversations.lock(fx, conversation);
    try {
      const attempt = attemptOf(fx.settings.runId, instance.id, fx.state.instances.get(instance.id));
      const work = workOf(step, adapter);
      const sent: { fate: Sending | AttemptFate; reservation?: Reservation | undefined; done?: (answered: boolean) => void } =
        next.kind === 'follow'
          ? this.#followed(step, instance, next.submission)
          : await this.#send(step, attempt, work, instance, next, conversation);
      if (isFate(sent.fate)) {
        // The step's turn ends once the fate is settled, so a fate that stops the run (three protocol
        // errors) or closes the step is in force before the next instance of the step is sent.
        try {
          await settle({ fx, step, instance: instance.id, reservation: sent.reservation }, sent.fate);
        } finally {
          sent.done?.(false);
        }
        return undefined;
      }
      sent.done?.(true);
      const { submission, submittedAt, sentBody, reservation } = sent.fate;
      const result = await followAttempt(this.#d, { step, attempt, work, instance, submission, submittedAt, sentBody });
      const settling = { fx, step, instance: instance.id, reservation };
      if (isFate(result)) {
        await settle(settling, result);
        return undefined;
      }
      if (result.status !== 'completed') return this.#notCompleted(step, instance, { ...result, status: result.status }, settling);
      this.#finished(step, instance, result);
      const entry = fx.state.instances.get(instance.id);
      const fetched = await downloadOutputs(this.#d, {
        step,
        instance,
        files: result.files,
        entry,
        answer: answerOf(adapter, result.outputs),
      });
      if (isFate(fetched)) {
        await settle(settling, fetched);
        return undefined;
      }
      // Downloaded by this process just now: new to the sink unless a run before put them there.
      await settle(settling, await this.#delivery.deliver(step, instance.id, entry?.retries !== 0 || fx.resumed));
      return { status: 'completed', outputs: result.outputs };
    } finally {
      unlock?.();
    }
  }

  /** A submission an earlier process sent, followed again: its money is already in what the journal committed. */
  #followed(step: StepPlan, instance: PlannedInstance, submission: Submission): { fate: Sending; reservation: Reservation } {
    const fx = this.#fx;
    const reservation = fx.spend.adopt(toldPrice(fx.state.instances, instance.id, step) ?? 0);
    const submittedAt = fx.state.instances.get(instance.id)?.submittedAt ?? Date.now();
    return { fate: { submission, submittedAt, sentBody: sentBodyOf(fx, step, instance), reservation }, reservation };
  }

  /**
   * Sends the attempt in its step's turn (first-answer-gate.ts), which `done` ends (the caller calls
   * it once the attempt's fate is settled). A step whose model the account may not use is closed at
   * its first refusal: its other instances are not sent.
   */
  async #send(
    step: StepPlan,
    attempt: AttemptRef,
    work: AttemptWork,
    instance: PlannedInstance,
    next: Extract<NextStep, { kind: 'send' }>,
    conversation: string | undefined,
  ): Promise<{ fate: Sending | AttemptFate; reservation?: Reservation | undefined; done?: (answered: boolean) => void }> {
    const fx = this.#fx;
    // Asked before the step's turn and again once it comes: the run may stop, or the step close, meanwhile.
    const withheld = (): AttemptFate | undefined =>
      fx.stopping ? { kind: 'not_sent' } : this.#closed.has(step.id) ? { kind: 'no_model_access', sent: false } : undefined;
    const before = withheld();
    if (before) return { fate: before };
    const done = await this.#gate.enter(fx, step.id);
    try {
      const after = withheld();
      if (after) return { fate: after, done };
      const sent = await this.#sendNow(step, attempt, work, instance, next, conversation);
      if (isFate(sent.fate) && sent.fate.kind === 'no_model_access') this.#closed.add(step.id);
      return { ...sent, done };
    } catch (error) {
      done(false);
      throw error;
    }
  }

  /** Reserves the attempt's price (an attempt an earlier process sent with this key is adopted) and submits it. */
  async #sendNow(
    step: StepPlan,
    attempt: AttemptRef,
    work: AttemptWork,
    instance: PlannedInstance,
    next: Extract<NextStep, { kind: 'send' }>,
    conversation: string | undefined,
  ): Promise<{ fate: Sending | AttemptFate; reservation?: Reservation | undefined }> {
    const fx = this.#fx;
    // Priced from the input it sends; an attempt an earlier process sent with this key keeps the
    // price its intent journaled, which is what the journal committed.
    const priced = attemptPriceUsd(step, instance) ?? null;
    const price = next.key !== undefined ? attemptPrice(fx.state.instances.get(instance.id), priced) : priced;
    const unpriced = next.key === undefined && price === null ? unpricedAttempt(step, instance) : undefined;
    if (unpriced) return { fate: unpriced };
    const reservation = next.key !== undefined ? fx.spend.adopt(price ?? 0) : fx.spend.reserve(price ?? 0);
    if (!reservation) {
      const message = `Stopped before going over the budget of ${formatUsd(fx.spend.budgetUsd ?? 0)} (${formatUsd(fx.spend.committedUsd)} committed over the run's life).`;
      return { fate: { kind: 'not_sent', stop: { reason: 'budget', message } } };
    }
    if (conversation !== undefined) work.script.sessionId = fx.state.sessions.get(conversation);
    const key = next.key ?? attemptKey(attempt, work.adapter.idempotentSubmit ? instance.key : undefined);
    const sent = await submitAttempt(this.#d, { step, attempt, work, instance, key, priceUsd: price });
    if (isFate(sent)) return { fate: sent, reservation };
    const { submission } = sent;
    const sessionId = sessionOf(submission);
    if (conversation !== undefined && sessionId !== undefined && fx.state.sessions.get(conversation) !== sessionId) {
      await fx.log({ type: 'agent_session', conversation, sessionId }, true);
      crashPoint('after_agent_session');
    }
    return { fate: { submission, submittedAt: Date.now(), sentBody: sent.body, reservation }, reservation };
  }

  /** Failed, nsfw or canceled at the service (refunded): an nsfw result may be re-rolled, as a new attempt. */
  async #notCompleted(
    step: StepPlan,
    instance: PlannedInstance,
    result: FinalTrack & { status: Exclude<TerminalStatus, 'completed'> },
    settling: { fx: RunEffects; step: StepPlan; instance: string; reservation: Reservation },
  ): Promise<AttemptEnd> {
    if (result.status === 'nsfw' && (step.step.on_nsfw ?? this.#fx.plan.loaded.manifest.defaults?.on_nsfw) === 'reroll') {
      const attempt = (this.#fx.state.instances.get(instance.id)?.rerolls ?? 0) + 1;
      const seed = attempt <= MAX_REROLLS ? this.#seeds.next(step, instance, attempt) : undefined;
      if (seed !== undefined) {
        await settle(settling, { kind: 'rerolled', attempt, seed });
        return { reroll: withSeed(instance, seed) };
      }
    }
    this.#finished(step, instance, result);
    await settle(settling, { kind: 'refunded', status: result.status });
    return { status: result.status, outputs: result.outputs };
  }

  /** A final status is told as it arrives, before its files are fetched. */
  #finished(
    step: StepPlan,
    instance: PlannedInstance,
    result: { status: TerminalStatus; actualCostUsd?: number | undefined; error?: string | undefined },
  ): void {
    this.#fx.emit({
      type: 'instance_finished',
      step: step.id,
      instance: instance.id,
      status: result.status,
      estimatedUsd: toldPrice(this.#fx.state.instances, instance.id, step),
      actualCostUsd: result.actualCostUsd,
      error: result.error,
    });
  }

  /**
   * An instance final before this start: the files a completed one lacks are fetched, and files an
   * earlier start could not upload go now. Nothing is asked of the service, and its money is in
   * what the journal committed: nothing to add.
   */
  async #finishBefore(step: StepPlan, instance: PlannedInstance, final: InstanceState['final'] & object): Promise<Final | undefined> {
    const settling = { fx: this.#fx, step, instance: instance.id };
    const entry = this.#fx.state.instances.get(instance.id);
    const outputs = final.result ?? {};
    if (final.status !== 'completed') {
      await settle(settling, entry?.reusedFrom !== undefined ? { kind: 'completed' } : { kind: 'ended_before', status: final.status });
      return { status: final.status, outputs };
    }
    const answer = answerOf(adapterFor(step.model), final.result);
    const fetched = await downloadOutputs(this.#d, { step, instance, files: final.outputs, entry, answer });
    if (isFate(fetched)) {
      await settle(settling, fetched);
      return undefined;
    }
    await settle(settling, await this.#delivery.deliver(step, instance.id, true));
    return { status: final.status, outputs };
  }

  /**
   * Forgets a finished instance once its outputs.csv rows are set aside. Nothing reads its state
   * again in this run (the journal holds it for a resume), so memory stays flat however many
   * instances finish.
   */
  #compact(id: string): void {
    const entry = this.#fx.state.instances.get(id);
    if (!entry?.final) return;
    this.#rows.setAside(id, entry);
    this.#d.hooks.onFinished?.(id, entry);
    this.#fx.state.instances.delete(id);
  }

  /** outputs.csv, with the rows of the instances that did not finish (they are still in the state). */
  async writeOutputsCsv(): Promise<void> {
    await this.#rows.write(this.#fx.state.instances);
  }
}

/** A submission on its way to be followed, with the money it holds. */
interface Sending {
  submission: Submission;
  submittedAt: number;
  sentBody: unknown;
  reservation: Reservation;
}

/** A conversation turn's answer (its outputs' `answer`), saved as a file beside the media it made. */
function answerOf(adapter: ModelAdapter | undefined, outputs: Record<string, unknown> | undefined): string | undefined {
  const answer = outputs?.answer;
  return adapter?.conversational === true && typeof answer === 'string' ? answer : undefined;
}

/**
 * A step priced per instance whose rule finds no price for this body (a re-roll's new seed, which a
 * table row or a formula may read) is not sent: counted at US$0 it could pass a budget unseen, as
 * the plan refuses an instance its rule cannot price. Undefined when the step has no such rule.
 */
function unpricedAttempt(step: StepPlan, instance: PlannedInstance): AttemptFate | undefined {
  const priced = step.price.of?.(instance.body);
  if (!priced || 'usd' in priced) return undefined;
  return {
    kind: 'refused',
    code: 'unpriced',
    message: `Not sent: step ${step.id} prices each request, and ${priced.miss}. genpipe sends nothing it cannot price, so a budget holds.`,
  };
}
