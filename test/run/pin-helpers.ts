// Helpers of the pin-*.test.ts files: an undici Agent that logs every HTTP exchange the client makes
// (what was sent, when it was handed to the socket layer, when its answer arrived), and a runPlan
// wrapper for in-process runs. In-process runs exercise src/ directly, so a hand-made mutation of
// the source is seen without rebuilding dist/.
import { Agent, type Dispatcher } from 'undici';
import { GenerationClient } from '../../src/api/client.js';
import { resolveConfig, type ClientConfig } from '../../src/api/config.js';
import type { Emulator } from '../../src/emulator/index.js';
import { loadManifestFile } from '../../src/manifest/load.js';
import { buildPlan, type Plan } from '../../src/plan/plan.js';
import { createRunDir, planHash } from '../../src/run/files/run-dir.js';
import { HF_KEY, tempDir } from './runner-helpers.js';

export interface Exchange {
  /** Order of dispatch, from 0. */
  seq: number;
  method: string;
  /** Path without the query string. */
  path: string;
  /** Request headers, lower-cased names. */
  headers: Record<string, string>;
  body: string | undefined;
  /** Date.now() when the request was handed to the dispatcher (it leaves for the wire from there). */
  dispatchedAt: number;
  status?: number;
  /** Date.now() when the response headers arrived. */
  headersAt?: number;
  /** Response body text (bodies are small here: JSON, or an image for downloads). */
  responseBody?: string;
  completedAt?: number;
  error?: unknown;
}

function headersOf(raw: Dispatcher.DispatchOptions['headers']): Record<string, string> {
  const out: Record<string, string> = {};
  if (raw == null) return out;
  if (Array.isArray(raw)) {
    for (let i = 0; i + 1 < raw.length; i += 2) out[String(raw[i]).toLowerCase()] = String(raw[i + 1]);
    return out;
  }
  const entries =
    typeof (raw as Iterable<unknown>)[Symbol.iterator] === 'function'
      ? [...(raw as Iterable<[string, string]>)]
      : Object.entries(raw as Record<string, unknown>);
  for (const [k, v] of entries) if (v !== undefined) out[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : String(v);
  return out;
}

/**
 * A keep-alive Agent that records every exchange. `onDispatch` runs synchronously when a request is
 * dispatched, before it is handed on (so a test can note what the journal holds at that moment).
 */
export class LoggingAgent extends Agent {
  readonly exchanges: Exchange[] = [];
  onDispatch: ((exchange: Exchange) => void) | undefined;
  onHeaders: ((exchange: Exchange) => void) | undefined;

  override dispatch(options: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    const path = String(options.path ?? '').split('?')[0] ?? '';
    const exchange: Exchange = {
      seq: this.exchanges.length,
      method: String(options.method),
      path,
      headers: headersOf(options.headers),
      body: typeof options.body === 'string' ? options.body : Buffer.isBuffer(options.body) ? options.body.toString('utf8') : undefined,
      dispatchedAt: Date.now(),
    };
    this.exchanges.push(exchange);
    this.onDispatch?.(exchange);
    const chunks: Buffer[] = [];
    // The handler `request()` passes is undici's classic one (onHeaders, onData, onComplete,
    // onError); a Proxy notes those calls and hands every one of them on unchanged.
    const target = handler as Record<string, unknown>;
    const logged = new Proxy(target, {
      get: (t, key, receiver) => {
        const value = Reflect.get(t, key, receiver) as unknown;
        if (typeof value !== 'function') return value;
        const fn = value as (...args: unknown[]) => unknown;
        if (key === 'onHeaders') {
          return (...args: unknown[]) => {
            exchange.status = args[0] as number;
            exchange.headersAt = Date.now();
            this.onHeaders?.(exchange);
            return fn.apply(t, args);
          };
        }
        if (key === 'onData') {
          return (...args: unknown[]) => {
            chunks.push(Buffer.from(args[0] as Buffer));
            return fn.apply(t, args);
          };
        }
        if (key === 'onComplete') {
          return (...args: unknown[]) => {
            exchange.completedAt = Date.now();
            exchange.responseBody = Buffer.concat(chunks).toString('utf8');
            return fn.apply(t, args);
          };
        }
        if (key === 'onError') {
          return (...args: unknown[]) => {
            exchange.error = args[0];
            return fn.apply(t, args);
          };
        }
        return fn.bind(t);
      },
    });
    return super.dispatch(options, logged as unknown as Dispatcher.DispatchHandler);
  }
}

/** The generation submit routes of the emulator (credit-spending POSTs). */
export const SHEET_SUBMIT = '/vendor/ai-influencer';
export const MARKETING_SUBMIT = '/marketing-studio/image/sunburst';
export const isSubmit = (e: Exchange): boolean => e.method === 'POST' && (e.path === SHEET_SUBMIT || e.path === MARKETING_SUBMIT);
export const STATUS_PATH = /^\/requests\/([^/]+)\/status$/;

export interface InProcessRun {
  plan: Plan;
  hash: string;
  runId: string;
  runDir: string;
  client: GenerationClient;
  agent: LoggingAgent;
}

/**
 * Plans `manifest` and opens a run directory and a client (with a LoggingAgent) for `emu`.
 * `config` adjusts the resolved client configuration (e.g. its retry policy).
 */
export async function prepareRun(
  emu: Emulator,
  manifest: string,
  config: (c: ClientConfig) => ClientConfig = (c) => c,
): Promise<InProcessRun> {
  const plan = await buildPlan(loadManifestFile(manifest));
  const hash = planHash(plan);
  const { runId, dir } = await createRunDir(tempDir('genpipe-pin-'), plan, manifest, hash);
  const agent = new LoggingAgent({ keepAliveTimeout: 10_000, connections: 128 });
  const client = new GenerationClient(config(resolveConfig({ flags: { baseUrl: emu.url }, env: { HF_KEY } })), { dispatcher: agent });
  return { plan, hash, runId, runDir: dir, client, agent };
}

/** The options of runPlan that name the prepared run (plan, client, directory, id, hash). */
export const runOf = (
  run: InProcessRun,
): { plan: InProcessRun['plan']; client: InProcessRun['client']; runDir: string; runId: string; planHash: string } => ({
  plan: run.plan,
  client: run.client,
  runDir: run.runDir,
  runId: run.runId,
  planHash: run.hash,
});

export async function closeRun(run: InProcessRun | undefined): Promise<void> {
  if (!run) return;
  await run.client.close();
  await run.agent.close();
}
