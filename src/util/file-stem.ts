/**
 * The character rules of genpipe's file names, shared by names made from instance ids
 * (run/files/output-names.ts) and names made from a step's `output.filename` template (plan/plan.ts).
 *
 * Text is NFC-normalised first (the form macOS, Windows and Linux tools agree on), then every run
 * of characters other than letters, combining marks and digits of any script and `._=,-` becomes
 * one `_`: `Zürich` and `北京` stay as they are, while path separators, `:*?"<>|`, spaces, control
 * and bidirectional-format characters, symbols and emoji do not reach a file name. Leading `.`,
 * `_`, `=`, `,`, `-` and trailing `.`, `_` go (no hidden files, no `.`/`..`, nothing that reads as
 * a flag, no trailing dot that Windows drops). Lengths are bounded in UTF-8 bytes as well as in
 * characters, since file systems count bytes (NAME_MAX is 255) and a CJK character takes three.
 */

const UNSAFE_RUN = /[^\p{L}\p{M}\p{N}._=,-]+/gu;
const WINDOWS_DEVICE = /^(con|prn|aux|nul|com[0-9¹²³]|lpt[0-9¹²³])$/i;

/** Unsafe characters replaced and the ends tidied; may be empty. */
export function sanitizeStem(text: string): string {
  return tidyStem(text.normalize('NFC').replace(UNSAFE_RUN, '_'));
}

export function tidyStem(stem: string): string {
  return stem.replace(/^[._=,-]+/, '').replace(/[._]+$/, '');
}

/** Windows reserves device names before the first dot, whatever follows (`con.txt.png`). */
export function isWindowsDevice(name: string): boolean {
  return WINDOWS_DEVICE.test(name.split('.')[0] ?? '');
}

/** Length of `text` in UTF-8 bytes. */
export const utf8Bytes = (text: string): number => Buffer.byteLength(text, 'utf8');

/** The longest start of `stem` within `maxChars` UTF-16 units and `maxBytes` UTF-8 bytes, never splitting a character. */
export function clipStem(stem: string, maxChars: number, maxBytes: number): string {
  let chars = 0;
  let bytes = 0;
  let out = '';
  for (const char of stem) {
    chars += char.length;
    bytes += utf8Bytes(char);
    if (chars > maxChars || bytes > maxBytes) break;
    out += char;
  }
  return out;
}
