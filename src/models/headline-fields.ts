/**
 * The field of each model's request body that says what an instance is about, for people looking
 * at results: a marketing image's prompt (where a campaign's headline lands), an agent turn's
 * question, a legacy job's prompt, a character sheet's brief. The gallery shows it in each cell.
 */

/** Per model, the body paths tried in order; the first non-empty text wins. */
const HEADLINE_FIELDS: Readonly<Record<string, readonly (readonly string[])[]>> = {
  'marketing-image': [['prompt']],
  agent: [['content']],
  'character-sheet': [['brief']],
  // A legacy model's body is its `params` object itself (the client wraps it when it sends it).
  dop: [['prompt']],
  soul: [['prompt']],
  speak: [['prompt']],
  'soul-standard': [['prompt']],
};

/** Most characters kept: a cell shows a line or two, its title the rest up to this. */
export const MAX_HEADLINE_CHARS = 300;

/** The headline text of a body of `model`, or undefined when it has none. */
export function headlineOf(model: string, body: unknown): string | undefined {
  for (const path of HEADLINE_FIELDS[model] ?? []) {
    let value: unknown = body;
    for (const key of path) value = value !== null && typeof value === 'object' ? (value as Record<string, unknown>)[key] : undefined;
    if (typeof value !== 'string') continue;
    const text = value.trim();
    if (text !== '') return text.length > MAX_HEADLINE_CHARS ? `${text.slice(0, MAX_HEADLINE_CHARS)}…` : text;
  }
  return undefined;
}
