import { GenerationClient } from '../api/client.js';
import { resolveConfig, type ConfigFlags } from '../api/config.js';
import type { CliIO } from './io.js';

/** Resolves configuration from flags, environment and config file, and opens a client. */
export function openClient(flags: ConfigFlags, io: CliIO, options: { requireCredentials?: boolean } = {}): GenerationClient {
  const config = resolveConfig({ flags, env: io.env, requireCredentials: options.requireCredentials ?? true });
  return new GenerationClient(config);
}
