/**
 * Shared test helpers: a GenerationClient over an undici MockAgent with net connect disabled, so a
 * request that no interceptor matches fails loudly and no real socket is ever opened.
 */
import { createHash } from 'node:crypto';
import { MockAgent, type MockCallHistoryLog } from 'undici';
import { expect } from 'vitest';
import { GenerationClient, type GenerationClientOptions } from '../../src/api/client.js';
import type { ClientConfig } from '../../src/api/config.js';
import { Credentials } from '../../src/api/credentials.js';
import { GenpipeError, InvalidInputError } from '../../src/api/errors.js';

export const KEY_ID = '2f1e4a9c-3b7d-4e2a-9c1f-6a5b4c3d2e1f';
/** Long and distinctive, so a leak is unmistakable when grepped for. */
export const KEY_SECRET = 'sk-TEST-9f8e7d6c5b4a39281706f5e4d3c2b1a0';
export const AUTHORIZATION = `Key ${KEY_ID}:${KEY_SECRET}`;

export const BASE = 'https://api.gen.test';
export const PLATFORM = 'https://platform.gen.test';
export const CDN = 'https://cdn.gen.test';
export const UPLOADS = 'https://uploads.gen.test';

export const REQUEST_ID = '0b6a1c2e-8f3d-4b5a-9e7c-1d2f3a4b5c6d';
export const SESSION_ID = '7c9e6679-7425-40de-944b-e07fc1f90ae7';
export const JOB_SET_ID = 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d';
export const JOB_ID = 'f0e1d2c3-b4a5-4968-8776-655443322110';

export const sha256 = (text: string): string => createHash('sha256').update(text).digest('hex');

export function testConfig(overrides: Partial<ClientConfig> = {}): ClientConfig {
  return {
    baseUrl: BASE,
    platformUrl: PLATFORM,
    cdnUrl: CDN,
    vendor: 'vendor',
    credentials: new Credentials(KEY_ID, KEY_SECRET),
    timeouts: { connectMs: 1_000, headersMs: 1_000, bodyMs: 1_000 },
    // Fast retries: at most 4 ms of backoff per attempt.
    retry: { maxAttempts: 3, baseMs: 1, capMs: 4, maxRetryAfterMs: 20 },
    creditsPerUsd: 100,
    ...overrides,
  };
}

export interface Harness {
  agent: MockAgent;
  client: GenerationClient;
  config: ClientConfig;
  /** Every request the client sent, in order. */
  calls(): MockCallHistoryLog[];
}

export function harness(overrides: Partial<ClientConfig> = {}, options: Omit<GenerationClientOptions, 'dispatcher'> = {}): Harness {
  const agent = new MockAgent({ enableCallHistory: true });
  agent.disableNetConnect();
  const config = testConfig(overrides);
  const client = new GenerationClient(config, { ...options, dispatcher: agent });
  return { agent, client, config, calls: () => agent.getCallHistory()?.calls() ?? [] };
}

/** Header value of a recorded call, by lower-case name. */
export function header(call: MockCallHistoryLog | undefined, name: string): string | undefined {
  const headers = call?.headers ?? {};
  for (const [key, value] of Object.entries(headers)) {
    if (key.toLowerCase() === name) return Array.isArray(value) ? value.join(', ') : value;
  }
  return undefined;
}

/** Parsed JSON body of a recorded call. */
export function jsonBody(call: MockCallHistoryLog | undefined): unknown {
  const body = call?.body;
  return typeof body === 'string' ? JSON.parse(body) : undefined;
}

/** Awaits `promise`, expecting it to reject with a GenpipeError, and returns the error. */
export async function rejection(promise: Promise<unknown>): Promise<GenpipeError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(GenpipeError);
    return error as GenpipeError;
  }
  throw new Error('expected a rejection, but the promise resolved');
}

/** Runs `fn`, expecting it to throw a GenpipeError, and returns the error. */
export function thrown(fn: () => unknown): GenpipeError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(GenpipeError);
    return error as GenpipeError;
  }
  throw new Error('expected an error');
}

/** Runs `fn`, expecting an InvalidInputError, and returns it. */
export function invalid(fn: () => unknown): InvalidInputError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidInputError);
    expect((error as InvalidInputError).code).toBe('invalid_input');
    return error as InvalidInputError;
  }
  throw new Error('expected an InvalidInputError, but nothing was thrown');
}

/** Paths named by the issues of an InvalidInputError. */
export const issuePaths = (error: InvalidInputError): string[] => error.issues.map((i) => i.path);

export const networkError = (code: string, message = `socket failure ${code}`): Error => Object.assign(new Error(message), { code });

export const submitted = (requestId: string = REQUEST_ID): Record<string, unknown> => ({
  request_id: requestId,
  status: 'queued',
  status_url: `${PLATFORM}/requests/${requestId}/status`,
  cancel_url: `${PLATFORM}/requests/${requestId}/cancel`,
});

export const JSON_HEADERS = { 'content-type': 'application/json' } as const;
