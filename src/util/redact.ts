/**
 * A process-wide list of secrets to scrub from any text that leaves the process: log lines,
 * journal records, reports, error messages. Credentials and webhook secrets register themselves
 * when they are created, so no writer has to remember to.
 */
/**
 * Each registered secret, with the form JSON gives it inside a string (the same text for most
 * secrets) and its UTF-8 bytes (for redactBytes).
 */
const secrets = new Map<string, { escaped: string; bytes: Buffer; forms: readonly string[]; core: string }>();
/** The longest form of any registered secret, in UTF-16 units: what a stream holds back (RedactingText). */
let longestForm = 0;

const escapeHtml = (text: string): string =>
  text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;');

/** Registers a secret so that `redact` hides it. Short strings are ignored: they would mask ordinary words. */
export function registerSecret(secret: string): void {
  if (secret.length < 4) return;
  const escaped = JSON.stringify(secret).slice(1, -1);
  // Every way a page or a data file writes it: as it is, inside a JSON string, in HTML, JSON inside
  // HTML, and JSON inside a <script> (gallery-page.ts escapes <, and some writers > and & too).
  const inScript = escaped
    .replace(/</g, '\\u003c')
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029');
  const inScriptAll = inScript.replace(/>/g, '\\u003e').replace(/&/g, '\\u0026');
  const forms = [...new Set([secret, escaped, escapeHtml(secret), escapeHtml(escaped), inScript, inScriptAll])].sort(
    (a, b) => b.length - a.length,
  );
  // The longest run of characters no escaping changes: found in any spelling of the secret.
  const core = (secret.match(/[A-Za-z0-9_.~-]+/g) ?? []).reduce((a, b) => (b.length > a.length ? b : a), '');
  secrets.set(secret, { escaped, bytes: Buffer.from(secret, 'utf8'), forms, core: core.length >= 4 ? core : '' });
  for (const form of forms) longestForm = Math.max(longestForm, form.length);
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

/**
 * `redact` for any text a run writes, whatever its format: every form of each secret (as it is,
 * JSON-escaped, HTML-escaped) becomes `[REDACTED]`, which needs no escaping in any of them. The one
 * redaction step of the files a run writes (gallery, review and diff pages, outputs.csv and
 * outputs.jsonl, reports, notify payloads), as `redact` is of its streams.
 */
export function redactEveryForm(text: string): string {
  let out = text;
  for (const { forms } of secrets.values()) {
    for (const form of forms) if (out.includes(form)) out = out.split(form).join(REDACTED);
  }
  return out;
}

/** A JSON.stringify replacer that redacts every string (keys are left alone: genpipe names them). */
export const redactingReplacer = (_key: string, value: unknown): unknown => (typeof value === 'string' ? redactEveryForm(value) : value);

/**
 * redactEveryForm over a text written in pieces: a secret split across two pieces is still caught.
 * Each push returns what may be written now, holding back the last few characters (shorter than
 * the longest secret) until the next piece or `end`.
 */
export class RedactingText {
  #held = '';

  push(piece: string): string {
    if (secrets.size === 0 && this.#held === '') return piece;
    const text = redactEveryForm(this.#held + piece);
    let cut = text.length - Math.min(text.length, Math.max(0, longestForm - 1));
    // Never between the two halves of a surrogate pair: each piece is encoded to UTF-8 on its own.
    const unit = text.charCodeAt(cut);
    if (cut > 0 && unit >= 0xdc00 && unit <= 0xdfff) cut--;
    this.#held = text.slice(cut);
    return text.slice(0, cut);
  }

  end(): string {
    const rest = redactEveryForm(this.#held);
    this.#held = '';
    return rest;
  }
}

/** True when `text` holds a registered secret, in any of its forms. */
export function containsSecret(text: string): boolean {
  for (const { forms } of secrets.values()) for (const form of forms) if (text.includes(form)) return true;
  return false;
}

/**
 * True when `text` may hold a registered secret in some escaping (a JSON text of a string that
 * itself quotes JSON): its unescapable core is there. Cheap enough for every journal line; a hit
 * sends the record through redactingReplacer, which redacts each string before it is encoded.
 */
export function mayHoldSecret(text: string): boolean {
  for (const { core } of secrets.values()) if (core === '' || text.includes(core)) return true;
  return false;
}
