/** Small HTTP helpers shared by the handlers: errors with a status, body reading, JSON answers. */
import type { IncomingMessage } from 'node:http';
import type * as z from 'zod';
import { issuesFromZod } from '../util/zod-issues.js';

/** A refusal with a status and an ErrorResponse `detail` (§2.1, §7). */
export class HttpError extends Error {
  readonly status: number;
  readonly headers: Record<string, string>;
  constructor(status: number, detail: string, headers: Record<string, string> = {}) {
    super(detail);
    this.status = status;
    this.headers = headers;
  }
}

/** What a handler answers; the server applies faults to it before writing it. */
export interface EmuResponse {
  status: number;
  headers?: Record<string, string>;
  /** JSON body (serialized by the server). */
  json?: unknown;
  /** Raw body. */
  bytes?: Uint8Array;
}

export const json = (status: number, body: unknown, headers?: Record<string, string>): EmuResponse =>
  headers ? { status, json: body, headers } : { status, json: body };

/** Reads the whole body, refusing more than `maxBytes` with 413. */
export async function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > maxBytes) throw new HttpError(413, `the request body is larger than ${maxBytes} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/** Parses a JSON body; an empty body is `undefined`. Malformed JSON is a 400. */
export function parseJson(body: Buffer): unknown {
  if (body.length === 0) return undefined;
  try {
    return JSON.parse(body.toString('utf8'));
  } catch {
    throw new HttpError(400, 'the request body is not valid JSON');
  }
}

/**
 * Validates with a wire schema; a refusal is 422 with a `detail` naming the offending field first,
 * e.g. `variation_index: human tier normal requires variation_index 0`.
 */
export function validate<T>(schema: z.ZodType<T>, value: unknown, status = 422): T {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const issues = issuesFromZod(parsed.error);
  throw new HttpError(status, issues.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message)).join('; '));
}

/** Canonical JSON (sorted keys) so that two bodies equal as JSON hash the same. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/** ISO 8601 UTC with milliseconds (§2.3). */
export const isoMs = (ms: number): string => new Date(ms).toISOString();
