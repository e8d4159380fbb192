/**
 * `genpipe resume RUN_DIR --adopt INSTANCE=ID`: a submit the service took, and charged, whose
 * answer the journal could not record (a full disk right after the POST). The run printed the
 * pair on stderr when it happened (`unjournaledLine`); adopting it journals the submission
 * (`submitted` with `adopted: true`, through settle()'s `adopted` row) and the instance is then
 * followed and downloaded as any submitted one, with no second POST.
 *
 * Only an instance whose current attempt is an unanswered intent can be adopted: that intent
 * already counts the attempt's price (as unknown), so adopting it moves that price to charged,
 * once. Anything else is refused before the run writes or sends anything (exit 2).
 */
import { GenpipeError } from '../../api/errors.js';
import type { Submission } from '../../models/adapter.js';
import { adapterFor } from '../../models/registry.js';
import type { Plan } from '../../plan/plan.js';
import { stepOfInstanceId } from '../../plan/instance.js';
import type { RunState } from '../journal/run-state.js';

/** One `--adopt INSTANCE=ID` pair. */
export interface Adoption {
  instance: string;
  id: string;
}

/** An id the service hands out: no space, no quote, no `=`, at most 200 characters. */
const SERVICE_ID = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$/;

/**
 * `sheets[tier=cats,seed=1]=req_123` as a pair: the id is after the last `=` (an instance id may
 * hold `=` itself, a service id never does). A malformed pair is one sentence, exit 2.
 */
export function parseAdoption(text: string): Adoption {
  const at = text.lastIndexOf('=');
  const instance = at < 0 ? '' : text.slice(0, at);
  const id = at < 0 ? '' : text.slice(at + 1);
  if (instance === '' || !SERVICE_ID.test(id))
    throw new GenpipeError(
      'invalid_input',
      `--adopt takes INSTANCE=REQUEST_ID, as the run printed it when its journal could not record a request (such as 'sheets[seed=1]=3f2a...'), not "${text.slice(0, 120)}".`,
    );
  return { instance, id };
}

/**
 * The submission each pair stands for, once every pair is checked against the plan and the
 * journal: refused (exit 2, nothing written or sent) for an instance the plan does not have, one
 * already final or failed, one whose request id is journaled, one with no unanswered submit, a
 * model whose submissions cannot be adopted, or an instance named twice.
 */
export function checkAdoptions(plan: Plan, state: RunState, adoptions: readonly Adoption[]): Map<string, Submission> {
  const found = new Map<string, Submission>();
  for (const { instance, id } of adoptions) {
    const refuse = (why: string): never => {
      throw new GenpipeError('invalid_input', `--adopt ${instance}=${id} is refused: ${why}. Nothing was sent.`);
    };
    if (found.has(instance)) refuse('the instance is named twice');
    const step = plan.steps.find((s) => s.id === stepOfInstanceId(instance));
    const entry = state.instances.get(instance);
    if (!step || !entry) refuse("the run's plan has no instance of that id");
    if (entry!.final) refuse(`the instance already ended ${entry!.final!.status}`);
    if (entry!.submission) refuse('the journal already holds the request id of its submit, and a resume follows it');
    if (entry!.failed || !entry!.intent) refuse('the journal holds no unanswered submit of it, so no request of it can be waiting');
    const adapter = adapterFor(step!.model);
    if (!adapter?.adopt) refuse(`${step!.model} answers a submit with more than an id, which cannot be adopted`);
    found.set(instance, adapter!.adopt!(id));
  }
  return found;
}

/**
 * The stderr line for a request the service took whose id the journal could not record: the
 * instance, the id and the body's hash, and the command that follows it without paying again.
 */
export function unjournaledLine(e: { instance: string; id: string; bodyHash: string; runDir: string }): string {
  return `genpipe: ${e.instance}: the service took request ${e.id} (body sha256 ${e.bodyHash}) and charged it, but the journal could not record it; follow it without paying again: genpipe resume ${shellWord(e.runDir)} --adopt ${shellWord(`${e.instance}=${e.id}`)}`;
}

/** `text` as one shell word: as it is when plain, else in single quotes. */
function shellWord(text: string): string {
  return /^[A-Za-z0-9_./:=@%+,-]+$/.test(text) ? text : `'${text.replaceAll("'", `'\\''`)}'`;
}
