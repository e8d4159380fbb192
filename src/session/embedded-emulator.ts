/**
 * `--emulator`: starts the local emulator in this process on a free loopback port and points the
 * command at it with the emulator's default credentials, so a pipeline runs offline with no setup.
 */
import type { GenerationClient } from '../api/client.js';
import { DEFAULT_VENDOR, resolveConfig, type ClientConfig, type ConfigFlags } from '../api/config.js';
import { Credentials } from '../api/credentials.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET } from '../emulator/default-credentials.js';
import type { Emulator } from '../emulator/index.js';

export interface EmbeddedEmulator {
  emulator: Emulator;
  baseUrl: string;
  credentials: Credentials;
  close(): Promise<void>;
}

export async function startEmbeddedEmulator(options: { timeScale?: number } = {}): Promise<EmbeddedEmulator> {
  // Loaded only with --emulator: the whole service is a lot to load for a command that does not run it.
  const { startEmulator } = await import('../emulator/index.js');
  const emulator = await startEmulator({ port: 0, host: '127.0.0.1', timeScale: options.timeScale ?? 0.01, log: () => {} });
  return {
    emulator,
    baseUrl: emulator.url,
    credentials: new Credentials(DEFAULT_KEY_ID, DEFAULT_SECRET),
    close: () => emulator.close(),
  };
}

/**
 * The configuration of a command pointed at the embedded emulator: every address is the
 * emulator's (a platform_url in a config file must not send status or cancel calls elsewhere),
 * and the environment is not read; the config file's timeouts and retry settings still apply.
 */
export function embeddedConfig(flags: ConfigFlags, embedded: EmbeddedEmulator): ClientConfig {
  const url = embedded.baseUrl;
  return resolveConfig({
    flags: { ...flags, baseUrl: url, platformUrl: url, cdnUrl: url, vendor: DEFAULT_VENDOR },
    env: {},
    fallbackCredentials: embedded.credentials,
  });
}

/** A client for a one-shot command (catalog, status, cancel): the configured service, or with `emulator` an embedded one. */
export async function openCommandClient(
  flags: ConfigFlags,
  io: { env: NodeJS.ProcessEnv },
  options: { emulator: boolean; requireCredentials?: boolean },
): Promise<{ client: GenerationClient; close(): Promise<void> }> {
  const { GenerationClient } = await import('../api/client.js');
  if (!options.emulator) {
    const client = new GenerationClient(resolveConfig({ flags, env: io.env, requireCredentials: options.requireCredentials ?? true }));
    return { client, close: () => client.close() };
  }
  const embedded = await startEmbeddedEmulator();
  try {
    const client = new GenerationClient(embeddedConfig(flags, embedded));
    return {
      client,
      close: async () => {
        try {
          await client.close();
        } finally {
          await embedded.close();
        }
      },
    };
  } catch (error) {
    await embedded.close();
    throw error;
  }
}
