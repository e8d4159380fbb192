/**
 * A process-wide list of secrets to scrub from any text that leaves the process: log lines,
 * journal records, reports, error messages. Credentials and webhook secrets register themselves
 * when they are created, so no writer has to remember to.
 */
/**
 * Each registered secret, with the form JSON gives it inside a string (the same text for most
 * secrets) and its UTF-8 bytes (for redactBytes).
 */
const secrets = new Map<string, { escaped: string; bytes: Buffer }>();

/** Registers a secret so that `redact` hides it. Short strings are ignored: they would mask ordinary words. */
export function registerSecret(secret: string): void {
  if (secret.length < 4) return;
  secrets.set(secret, { escaped: JSON.stringify(secret).slice(1, -1), bytes: Buffer.from(secret, 'utf8') });
}

export const REDACTED = '[REDACTED]';

/** Replaces every registered secret in `text` with `[REDACTED]`. */
export function redact(text: string): string {
  let out = text;
  for (const secret of secrets.keys()) {
    if (out.includes(secret)) out = out.split(secret).join(REDACTED);
  }
  return out;
}

/**
 * `redact` for UTF-8 text held as bytes (a whole number of characters): the same bytes when no
 * registered secret is in them (looked for as bytes; UTF-8 matches only at character starts), else
 * the redacted text encoded again.
 */
export function redactBytes(bytes: Buffer): Buffer {
  for (const secret of secrets.values()) {
    if (bytes.includes(secret.bytes)) return Buffer.from(redact(bytes.toString('utf8')), 'utf8');
  }
  return bytes;
}

/**
 * Redacts a JSON text: each registered secret inside a string (or a key), in the escaped form JSON
 * writes it in, becomes `[REDACTED]`. Returns undefined when a secret still shows afterwards,
 * outside any string: it spans JSON syntax, and no replacement could cut it out safely.
 */
export function redactJsonText(text: string): string | undefined {
  let out = text;
  for (const [secret, { escaped }] of secrets) {
    if (out.includes(escaped)) out = out.split(escaped).join(REDACTED);
    if (escaped !== secret && out.includes(secret)) return undefined;
  }
  return out;
}
