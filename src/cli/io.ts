import { redact } from '../util/redact.js';

/** Where a command writes; injected so that tests read what a user would see. */
export interface CliIO {
  out(text: string): void;
  err(text: string): void;
  env: NodeJS.ProcessEnv;
  /** Fires on Ctrl-C or SIGTERM. */
  signal: AbortSignal;
}

export function processIO(signal: AbortSignal): CliIO {
  return {
    out: (text) => process.stdout.write(`${redact(text)}\n`),
    err: (text) => process.stderr.write(`${redact(text)}\n`),
    env: process.env,
    signal,
  };
}
