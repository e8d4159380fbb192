/**
 * One turn per agent session at a time (service spec §4.6 rule 3): the instances of one
 * conversation take turns. A conversation is named by its step and the rendered `conversation`
 * template (each instance its own, without one).
 */
import { compileTemplate } from '../../manifest/template.js';
import type { Plan, PlannedInstance, StepPlan } from '../../plan/plan.js';
import type { RunEffects } from '../run-context.js';

export class ConversationLocks {
  readonly #tails = new Map<string, Promise<void>>();

  constructor(private readonly plan: Plan) {}

  conversationOf(step: StepPlan, instance: PlannedInstance): string {
    if (!step.step.conversation) return `${step.id}:${instance.id}`;
    const rendered = compileTemplate(step.step.conversation).render({ vars: this.plan.loaded.manifest.vars ?? {}, ...instance.values });
    return `${step.id}:${String(rendered)}`;
  }

  /** Waits for the conversation's turn; the function returned ends it (idempotent). */
  async lock(fx: RunEffects, conversation: string): Promise<() => void> {
    const previous = this.#tails.get(conversation) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    this.#tails.set(
      conversation,
      previous.then(() => mine),
    );
    await fx.wait('an agent conversation', () => previous);
    let released = false;
    return () => {
      if (!released) {
        released = true;
        release();
      }
    };
  }
}
