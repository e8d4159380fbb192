/**
 * A process-wide list of secrets to scrub from any text that leaves the process: log lines,
 * journal records, reports, error messages. Credentials and webhook secrets register themselves
 * when they are created, so no writer has to remember to.
 */
const secrets = new Set<string>();

/** Registers a secret so that `redact` hides it. Short strings are ignored: they would mask ordinary words. */
export function registerSecret(secret: string): void {
  if (secret.length >= 4) secrets.add(secret);
}

export const REDACTED = '[REDACTED]';

/** Replaces every registered secret in `text` with `[REDACTED]`. */
export function redact(text: string): string {
  let out = text;
  for (const secret of secrets) {
    if (out.includes(secret)) out = out.split(secret).join(REDACTED);
  }
  return out;
}
