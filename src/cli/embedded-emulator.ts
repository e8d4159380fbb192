/**
 * `--emulator`: starts the local emulator in this process on a free loopback port and points the
 * command at it with the emulator's default credentials, so a pipeline runs offline with no setup.
 */
import { Credentials } from '../api/credentials.js';
import { DEFAULT_KEY_ID, DEFAULT_SECRET, startEmulator, type Emulator } from '../emulator/index.js';

export interface EmbeddedEmulator {
  emulator: Emulator;
  baseUrl: string;
  credentials: Credentials;
  close(): Promise<void>;
}

export async function startEmbeddedEmulator(options: { timeScale?: number } = {}): Promise<EmbeddedEmulator> {
  const emulator = await startEmulator({ port: 0, host: '127.0.0.1', timeScale: options.timeScale ?? 0.01, log: () => {} });
  return {
    emulator,
    baseUrl: emulator.url,
    credentials: new Credentials(DEFAULT_KEY_ID, DEFAULT_SECRET),
    close: () => emulator.close(),
  };
}

export const EMULATOR_FLAG_HELP = '  --emulator           start the local emulator in-process and use it (no credentials needed)';
