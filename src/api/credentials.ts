/**
 * One credential pair serves both auth surfaces of spec §5:
 * `Authorization: Key {key_id}:{key_secret}` and the legacy `hf-api-key` / `hf-secret` headers.
 * The secret lives in a private field and is registered for redaction, so it never shows in
 * `toString()`, `JSON.stringify`, `util.inspect`, logs or error messages.
 */
import { readFileSync, statSync } from 'node:fs';
import { inspect } from 'node:util';
import { parse as parseYaml } from 'yaml';
import { GenpipeError } from './errors.js';
import { registerSecret } from '../util/redact.js';

export class Credentials {
  readonly keyId: string;
  readonly #secret: string;

  constructor(keyId: string, secret: string) {
    const id = keyId.trim();
    if (id === '' || /[\s:]/.test(id)) throw new GenpipeError('credentials', 'The key id is empty or contains a colon or white space.');
    if (secret === '' || /[\r\n]/.test(secret))
      throw new GenpipeError('credentials', `The key secret for key id ${id} is empty or spans several lines.`);
    this.keyId = id;
    this.#secret = secret;
    registerSecret(secret);
  }

  /** Header value for the main API, agent API and webhook-enabled path. */
  authorization(): string {
    return `Key ${this.keyId}:${this.#secret}`;
  }

  /** Headers for the legacy platform endpoints (§4.7). */
  legacyHeaders(): { 'hf-api-key': string; 'hf-secret': string } {
    return { 'hf-api-key': this.keyId, 'hf-secret': this.#secret };
  }

  /** True when `secret` is this pair's secret; compares without exposing it. */
  hasSecret(secret: string): boolean {
    return secret === this.#secret;
  }

  toString(): string {
    return `Credentials(key_id=${this.keyId}, secret=[REDACTED])`;
  }

  toJSON(): { key_id: string; key_secret: string } {
    return { key_id: this.keyId, key_secret: '[REDACTED]' };
  }

  [inspect.custom](): string {
    return this.toString();
  }
}

/** Splits `id:secret`; the secret may itself contain colons. */
export function parseCredentialPair(value: string, source: string): Credentials {
  const text = value.trim();
  const colon = text.indexOf(':');
  if (colon <= 0 || colon === text.length - 1) {
    throw new GenpipeError('credentials', `${source} must have the form key_id:key_secret.`);
  }
  return new Credentials(text.slice(0, colon), text.slice(colon + 1));
}

/**
 * Reads credentials from the environment the way the official clients do: `HF_KEY` or
 * `HF_CREDENTIALS` as `id:secret`, or `HF_API_KEY` plus `HF_API_SECRET`.
 */
export function credentialsFromEnv(env: NodeJS.ProcessEnv): Credentials | undefined {
  for (const name of ['HF_KEY', 'HF_CREDENTIALS'] as const) {
    const value = env[name];
    if (value) return parseCredentialPair(value, name);
  }
  const id = env.HF_API_KEY;
  const secret = env.HF_API_SECRET;
  if (id && secret) return new Credentials(id, secret);
  if (id || secret) {
    throw new GenpipeError(
      'credentials',
      `HF_API_KEY and HF_API_SECRET must be set together; only ${id ? 'HF_API_KEY' : 'HF_API_SECRET'} is set.`,
    );
  }
  return undefined;
}

/**
 * Reads a credentials file: one line `key_id:key_secret`, or YAML/JSON with `key_id` and
 * `key_secret`. Refused when group or others may read (or write) it, like ssh does with keys.
 */
export function credentialsFromFile(path: string): Credentials {
  let mode: number;
  try {
    const info = statSync(path);
    if (!info.isFile()) throw new GenpipeError('credentials', `The credentials file ${path} is not a file (a directory or a device).`);
    mode = info.mode;
  } catch (error) {
    if (error instanceof GenpipeError) throw error;
    throw new GenpipeError(
      'credentials',
      `Cannot read the credentials file ${path}: ${(error as NodeJS.ErrnoException).code ?? 'unknown error'}.`,
      { cause: error },
    );
  }
  if ((mode & 0o077) !== 0) {
    throw new GenpipeError(
      'credentials',
      `The credentials file ${path} is accessible by group or others (mode ${(mode & 0o777).toString(8)}); run chmod 600 ${path}.`,
    );
  }
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new GenpipeError(
      'credentials',
      `Cannot read the credentials file ${path}: ${(error as NodeJS.ErrnoException).code ?? 'unknown error'}.`,
      { cause: error },
    );
  }
  const body = text
    .split(/\r?\n/)
    .filter((line) => line.trim() !== '' && !line.trim().startsWith('#'))
    .join('\n');
  if (/^\s*\{|^\s*key_id\s*:/m.test(body)) {
    let doc: unknown;
    try {
      doc = parseYaml(body);
    } catch {
      throw new GenpipeError(
        'credentials',
        `The credentials file ${path} is neither key_id:key_secret nor YAML with key_id and key_secret.`,
      );
    }
    const record = doc as { key_id?: unknown; key_secret?: unknown } | null;
    if (record && typeof record.key_id === 'string' && typeof record.key_secret === 'string') {
      return new Credentials(record.key_id, record.key_secret);
    }
    throw new GenpipeError('credentials', `The credentials file ${path} must set key_id and key_secret as strings.`);
  }
  return parseCredentialPair(body, `The credentials file ${path}`);
}
