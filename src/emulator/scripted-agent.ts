/**
 * The deterministic scripted agent behind the emulator's agent API. Pure functions of the message
 * text, documented in docs/emulator.md:
 *
 * - `#fail` anywhere: the turn errors (assistant message failed, reserve refunded in full).
 * - `#hold` anywhere: the turn keeps working, one step per second of service time, until it is
 *   interrupted (at most 600 steps), so tests can see it busy.
 * - A generation request is a message with one of the words generate, create, make, draw, render.
 *   It names its kind with "character" or "sheet" (character sheet), or "ad", "ads", "marketing",
 *   "banner", "campaign" (marketing image). When it names neither it is ambiguous: the agent asks
 *   one clarifying question and parks in awaiting_input; the reply picks the kind the same way and
 *   defaults to a character sheet. The agent then runs one billed generation and answers with it.
 * - Anything else gets a text answer that repeats the message.
 */
export type GenerationKind = 'character-sheet' | 'marketing-image';

export type TurnPlan =
  | { kind: 'fail' }
  | { kind: 'hold' }
  | { kind: 'ask'; question: string }
  | { kind: 'generate'; model: GenerationKind; tier: string; prompt: string }
  | { kind: 'answer'; text: string };

export const CLARIFYING_QUESTION = 'Should I make a character sheet or a marketing image? Reply "character" or "marketing".';

const GENERATE = /\b(generate|create|make|draw|render)\b/i;
const CHARACTER = /\b(character|sheet)\b/i;
const MARKETING = /\b(ad|ads|marketing|banner|campaign)\b/i;
const TIERS = ['insects', 'frogs', 'cats', 'dogs', 'capybaras', 'birds', 'freak', 'total'] as const;

/** The kind a text names, if any. */
export function kindNamed(text: string): GenerationKind | undefined {
  if (CHARACTER.test(text)) return 'character-sheet';
  if (MARKETING.test(text)) return 'marketing-image';
  return undefined;
}

/** The character tier a text names (a tier's API value as a whole word), default normal. */
export function tierNamed(text: string): string {
  for (const t of TIERS) if (new RegExp(`\\b${t}\\b`, 'i').test(text)) return t;
  return 'normal';
}

/** Plans a turn from the message that opens it. */
export function planTurn(content: string): TurnPlan {
  if (content.includes('#fail')) return { kind: 'fail' };
  if (content.includes('#hold')) return { kind: 'hold' };
  if (GENERATE.test(content)) {
    const model = kindNamed(content);
    if (model === undefined) return { kind: 'ask', question: CLARIFYING_QUESTION };
    return { kind: 'generate', model, tier: tierNamed(content), prompt: content };
  }
  const words = content.trim().split(/\s+/).filter(Boolean).length;
  const quote = content.length > 200 ? `${content.slice(0, 200)}...` : content;
  return { kind: 'answer', text: `You said (${words} words): ${quote}` };
}

/** Plans the rest of a parked turn from the reply to its question. */
export function planReply(original: string, reply: string): TurnPlan {
  if (reply.includes('#fail')) return { kind: 'fail' };
  const model = kindNamed(reply) ?? 'character-sheet';
  return { kind: 'generate', model, tier: tierNamed(`${original} ${reply}`), prompt: `${original}\n${reply}` };
}

/** LLM usage prices of the scripted agent (US$ per million tokens). */
export const LLM_INPUT_USD_PER_MTOK = 3;
export const LLM_OUTPUT_USD_PER_MTOK = 15;
export const SYSTEM_PROMPT_TOKENS = 400;

/** Turn cost in micro-dollars: the session's memory is re-read on every turn (durable sessions). */
export function llmCostMicros(memoryChars: number, outputTokens: number): number {
  const input = SYSTEM_PROMPT_TOKENS + Math.ceil(memoryChars / 4);
  return input * LLM_INPUT_USD_PER_MTOK + outputTokens * LLM_OUTPUT_USD_PER_MTOK;
}
