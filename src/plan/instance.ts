/** Stable instance ids, canonical inputs and idempotency keys. */
import { createHash } from 'node:crypto';

/** `sheets[tier=cats,seed=3,variation_index=2]`; a step without axes is just `sheets`. */
export const instanceId = (step: string, label: string): string => (label === '' ? step : `${step}[${label}]`);

/** A for_each instance: the upstream id first, then the step's own axes. */
export const downstreamId = (step: string, upstreamId: string, label: string): string => `${step}[${upstreamId}${label === '' ? '' : `,${label}`}]`;

/** JSON with object keys sorted at every level, so equal inputs give equal text. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v === undefined ? null : v)).join(',')}]`;
  const keys = Object.keys(value)
    .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
    .sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`).join(',')}}`;
}

/**
 * A plan's fingerprint: the manifest and every instance's id and canonical input, in plan order.
 * A resumed run compares it, so a changed manifest (or CSV, or preset list) is noticed.
 */
export class PlanFingerprint {
  readonly #hash = createHash('sha256');

  constructor(manifest: unknown) {
    this.#hash.update(canonicalJson(manifest));
  }

  add(id: string, canonicalInput: string): void {
    this.#hash.update('\n').update(id).update('\u0000').update(canonicalInput);
  }

  digest(): string {
    return this.#hash.digest('hex');
  }
}

/**
 * The Idempotency-Key of an instance, from the pipeline name, the instance id and the canonical
 * input: the same manifest planned twice gives the same keys, and any change to an input (a new
 * variation, a re-roll) gives a new key.
 */
export function idempotencyKey(pipeline: string, id: string, canonicalInput: string): string {
  const digest = createHash('sha256').update(pipeline).update('\u0000').update(id).update('\u0000').update(canonicalInput).digest('hex');
  return `gp1-${digest.slice(0, 40)}`;
}

/**
 * The Idempotency-Key a run sends for an instance: the plan's key, bound to the run and to the
 * attempt (`genpipe resume --retry` makes a new attempt). A resumed run reads its keys from the
 * journal, so they are stable across resumes; a new run of the same manifest never gets an earlier
 * run's requests back by accident (reusing results is `--reuse`, a choice the user makes).
 */
export function runIdempotencyKey(planKey: string, runId: string, attempt: number): string {
  const digest = createHash('sha256').update(planKey).update('\u0000').update(runId).update('\u0000').update(String(attempt)).digest('hex');
  return `gp2-${digest.slice(0, 40)}`;
}
