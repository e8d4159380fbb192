/**
 * The character rules of genpipe's file names, shared by names made from instance ids
 * (run/output-names.ts) and names made from a step's `output.filename` template (plan/plan.ts).
 * Characters outside `[A-Za-z0-9._=,-]` become `_` (a run of them one `_`); leading `.`, `_`, `=`,
 * `,`, `-` and trailing `.`, `_` go (no hidden files, no `.`/`..`, nothing that reads as a flag, no
 * trailing dot that Windows drops).
 */

const UNSAFE_RUN = /[^A-Za-z0-9._=,-]+/g;
const WINDOWS_DEVICE = /^(con|prn|aux|nul|com[0-9¹²³]|lpt[0-9¹²³])$/i;

/** Unsafe characters replaced and the ends tidied; may be empty. */
export function sanitizeStem(text: string): string {
  return tidyStem(text.replace(UNSAFE_RUN, '_'));
}

export function tidyStem(stem: string): string {
  return stem.replace(/^[._=,-]+/, '').replace(/[._]+$/, '');
}

/** Windows reserves device names before the first dot, whatever follows (`con.txt.png`). */
export function isWindowsDevice(name: string): boolean {
  return WINDOWS_DEVICE.test(name.split('.')[0] ?? '');
}
