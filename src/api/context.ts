import type { ClientConfig } from './config.js';
import type { Transport } from './transport.js';

/** What every endpoint module needs: the configuration and the transport. */
export interface ApiContext {
  config: ClientConfig;
  transport: Transport;
}

/** Per-call options shared by every endpoint. */
export interface CallContext {
  signal?: AbortSignal | undefined;
}

const join = (origin: string, path: string): string => `${origin}${path.startsWith('/') ? path : `/${path}`}`;
export const baseUrl = (ctx: ApiContext, path: string): string => join(ctx.config.baseUrl, path);
export const platformUrl = (ctx: ApiContext, path: string): string => join(ctx.config.platformUrl, path);
export const segment = (value: string): string => encodeURIComponent(value);

/** Adds `?hf_webhook=<url>` (§6) when a webhook URL is given. */
export function withWebhook(url: string, webhookUrl: string | undefined): string {
  if (!webhookUrl) return url;
  const out = new URL(url);
  out.searchParams.set('hf_webhook', webhookUrl);
  return out.toString();
}
