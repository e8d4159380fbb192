/** Shared helpers for the emulator and contract tests: an emulator on port 0, a client for it. */
import { request } from 'undici';
import { GenerationClient } from '../../src/api/client.js';
import { resolveConfig, type ClientConfig } from '../../src/api/config.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET } from '../../src/emulator/accounts.js';
import { startEmulator, type Emulator, type EmulatorOptions } from '../../src/emulator/start-emulator.js';

export const KEY = `${DEFAULT_KEY_ID}:${DEFAULT_SECRET}`;
export const AUTH = { authorization: `Key ${KEY}` };
export const LEGACY_AUTH = { 'hf-api-key': DEFAULT_KEY_ID, 'hf-secret': DEFAULT_SECRET };

/** Starts an emulator on 127.0.0.1:0 with instant models unless told otherwise. */
export function start(options: EmulatorOptions = {}): Promise<Emulator> {
  return startEmulator({ timeScale: 0, seed: 42, log: () => {}, ...options });
}

/** A real GenerationClient for the emulator, with short retry backoff so fault tests stay fast. */
export function clientFor(emu: Emulator, key: string = KEY): GenerationClient {
  const config: ClientConfig = resolveConfig({ flags: { baseUrl: emu.url }, env: { HF_KEY: key } });
  return new GenerationClient({ ...config, retry: { ...config.retry, baseMs: 1, capMs: 5, maxRetryAfterMs: 5 } });
}

export interface Raw {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  json: any;
  bytes: Buffer;
}

/** One raw HTTP exchange with the emulator (for statuses and headers the client hides). */
export async function http(
  emu: Emulator,
  method: 'GET' | 'POST' | 'PUT',
  path: string,
  options: { headers?: Record<string, string>; json?: unknown; body?: Buffer } = {},
): Promise<Raw> {
  const headers: Record<string, string> = { ...options.headers };
  let body: string | Buffer | undefined;
  if (options.json !== undefined) {
    body = JSON.stringify(options.json);
    headers['content-type'] = 'application/json';
  } else if (options.body) body = options.body;
  const res = await request(`${emu.url}${path}`, { method, headers, body: body ?? null });
  const bytes = Buffer.from(await res.body.arrayBuffer());
  let json: unknown;
  try {
    json = JSON.parse(bytes.toString('utf8'));
  } catch {
    json = undefined;
  }
  return { status: res.statusCode, headers: res.headers, json, bytes };
}

/** Polls `check` until it returns a value (bounded by the test timeout, never by a timing threshold). */
export async function until<T>(check: () => T | undefined | Promise<T | undefined>, pauseMs = 2): Promise<T> {
  for (let i = 0; ; i++) {
    const value = await check();
    if (value !== undefined) return value;
    await new Promise((r) => setTimeout(r, pauseMs));
  }
}

/** Net cost (reserves + charges − refunds) in US$ cents, exact, optionally for one request or message. */
export function netCents(emu: Emulator, ref?: { requestId?: string; messageId?: string }): number {
  const micros = emu.ledger.netMicros(
    (e) =>
      (ref?.requestId === undefined || e.request_id === ref.requestId) && (ref?.messageId === undefined || e.message_id === ref.messageId),
  );
  return micros / 10_000;
}
