/**
 * The submit phase of an attempt: its intent journaled (synced) before every send, the send through
 * the run's executor, and the retries classify() allows. It returns the submission and the body
 * sent, or the attempt's fate; settle() does the rest.
 *
 *   rate limiter → fenced? → intent (synced) → fenced? → POST → submitted (journaled)
 */
import { GenpipeError } from '../../api/errors.js';
import { sleep } from '../../api/sleep.js';
import { sha256Hex } from '../../api/transport.js';
import type { Submission } from '../../models/adapter.js';
import { isRemoteUrl, mapImageFields } from '../../models/registry.js';
import { submissionId } from '../../models/submission.js';
import type { PlannedInstance, StepPlan } from '../../plan/plan.js';
import type { RunEffects } from '../run-context.js';
import { noteUnsent } from '../lock/unsent-notes.js';
import type { AttemptRef } from './attempt-ref.js';
import { classify } from './classify.js';
import { crashPoint } from './crash-points.js';
import { isFate, type AttemptFate } from './fate.js';
import { adapterContext, type AttemptWork, type PhaseDeps } from './phase-deps.js';

export interface SubmitRequest {
  step: StepPlan;
  attempt: AttemptRef;
  work: AttemptWork;
  instance: PlannedInstance;
  /** The Idempotency-Key it sends (undefined for a keyless model). */
  key: string | undefined;
  /** The attempt's price, journaled in its intent (null: unpriced); what it reserved against the budget. */
  priceUsd: number | null;
}

export interface Sent {
  submission: Submission;
  /** The body as sent (local image paths mapped to their uploads), so the answer is checked against it. */
  body: unknown;
}

/** One send, or why it was not made; `error` is the send's failure, for classify(). */
type Try = Sent | AttemptFate | { error: unknown };

export async function submitAttempt(d: PhaseDeps, r: SubmitRequest): Promise<Sent | AttemptFate> {
  const { fx } = d;
  const body = await prepareBody(fx, r.step, r.instance.body);
  const bodyHash = sha256Hex(JSON.stringify(body));
  const maxTries = r.step.step.retries ?? fx.plan.loaded.manifest.defaults?.retries ?? 3;
  let tries = 0;
  let busyWaits = 0;
  // Whether an earlier try may have reached the service (then it is never called unsent).
  let mayHaveArrived = false;
  for (;;) {
    await fx.wait('the rate limiter', () => fx.limiter.take(fx.signal));
    const sent = await sendOnce(d, r, body, bodyHash);
    if (!('error' in sent)) return sent;
    const { error } = sent;
    const decision = classify('submit', error, { tries, key: r.key, mayHaveArrived, maxTries, busyWaits, random: d.random });
    if (error instanceof GenpipeError && !error.neverSent) mayHaveArrived = true;
    if (decision.kind === 'throw') throw error;
    if (decision.kind === 'fate') return decision.fate;
    if (!fx.consumeRetry()) return decision.orElse;
    if (decision.busy) busyWaits++;
    if (decision.counts) tries++;
    // A 429: this instance waits out its Retry-After (counted as time waited on throttling); its
    // route was slowed by the transport's pacer, the rest of the run goes on.
    if (decision.throttled) await fx.op(() => fx.routes.hold(decision.delayMs, fx.signal));
    else if (decision.delayMs > 0) await fx.op(() => sleep(decision.delayMs, fx.signal));
  }
}

async function sendOnce(d: PhaseDeps, r: SubmitRequest, body: unknown, bodyHash: string): Promise<Try> {
  const { fx } = d;
  const id = r.instance.id;
  // Fenced before the intent and again right before the POST: a holder displaced meanwhile
  // (paused, then taken over) writes and sends nothing more.
  if (!(await fx.fenced())) return { kind: 'not_sent' };
  crashPoint('before_intent_sync');
  await fx.log({ type: 'intent', instance: id, model: r.step.model, idempotencyKey: r.key ?? null, bodyHash, priceUsd: r.priceUsd }, true);
  crashPoint('after_intent_sync');
  if (!(await fx.fenced())) {
    // Journaled, never sent: the note tells the new holder so (unsent-notes.ts), and it sends the
    // instance as new instead of leaving it unknown.
    await noteUnsent(fx.settings.runDir, { instance: id, bodyHash, retries: r.attempt.retry, rerolls: r.attempt.reroll }).catch(
      () => undefined,
    );
    return { kind: 'not_sent' };
  }
  let answer: Submission | AttemptFate;
  try {
    answer = await fx.op(() => d.executor.submit(r.attempt, r.work, body, r.key, adapterContext(fx)));
  } catch (error) {
    return { error };
  }
  if (isFate(answer)) return answer;
  crashPoint('after_post');
  fx.creditRetry();
  fx.serviceAnswered();
  // Synced only where losing it would cost: a keyed submit lost in a crash is resent with its key
  // and the service answers with the same request; a keyless one would become unknown.
  // Paid, and known only here when the journal refused the record (a full disk) or the run was
  // taken over meanwhile (a displaced holder writes nothing): said, so `resume --adopt` finds it.
  const unjournaled = (): void =>
    fx.emit({ type: 'request_unjournaled', step: r.step.id, instance: id, id: submissionId(answer), bodyHash });
  await fx.log({ type: 'submitted', instance: id, handle: answer }, r.key === undefined).catch((error: unknown) => {
    unjournaled();
    throw error;
  });
  if (fx.displaced) unjournaled();
  fx.emit({ type: 'instance_submitted', step: r.step.id, instance: id, model: r.step.model, estimatedUsd: r.priceUsd ?? undefined });
  return { submission: answer, body };
}

/** Uploads local image paths once per run (journaled, so a resume sends the same URL and body). */
async function prepareBody(fx: RunEffects, step: StepPlan, body: unknown): Promise<unknown> {
  const locals: string[] = [];
  mapImageFields(body, step.spec.imageFields, (v) => {
    if (!isRemoteUrl(v)) locals.push(v);
    return v;
  });
  for (const path of locals) {
    if (fx.state.uploads.has(path)) continue;
    const url = await fx.op(() => fx.settings.client.media.uploadLocalImage(path, { signal: fx.signal }));
    await fx.log({ type: 'uploaded', path, url }, true);
  }
  return locals.length === 0 ? body : mapImageFields(body, step.spec.imageFields, (v) => fx.state.uploads.get(v) ?? v);
}

/**
 * The body an earlier process sent for a submission followed again: the instance's body with its
 * local image paths mapped to the URLs they were uploaded to (never uploading anything), when it
 * hashes to what the intent recorded; else undefined (the echo check is skipped).
 */
export function sentBodyOf(fx: RunEffects, step: StepPlan, instance: PlannedInstance): unknown {
  const entry = fx.state.instances.get(instance.id);
  const mapped = mapImageFields(instance.body, step.spec.imageFields, (v) => fx.state.uploads.get(v) ?? v);
  return entry?.intent && sha256Hex(JSON.stringify(mapped)) === entry.intent.bodyHash ? mapped : undefined;
}
