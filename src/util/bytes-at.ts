/**
 * Whether `bytes` hold `text` from `at` on, compared byte by byte in JavaScript: for the short
 * literals a journal reader matches on every line (a record's opening, a field's name), where
 * Buffer#compare's range checks and native call cost a million-line read half a second.
 */
export function bytesAt(bytes: Uint8Array, at: number, text: Uint8Array): boolean {
  if (at < 0 || bytes.length < at + text.length) return false;
  // Bounded by text's length.
  for (let i = 0; i < text.length; i++) if (bytes[at + i] !== text[i]) return false;
  return true;
}
