import { once } from 'node:events';
import { redact } from '../util/redact.js';

/** Where a command writes; injected so that tests read what a user would see. */
export interface CliIO {
  out(text: string): void;
  /** Writes a chunk to stdout without a newline, waiting while the pipe is full (large outputs). */
  write(chunk: string): Promise<void>;
  err(text: string): void;
  env: NodeJS.ProcessEnv;
  /** Fires on Ctrl-C or SIGTERM. */
  signal: AbortSignal;
  /** True when stderr is a terminal: progress bars instead of lines. */
  tty?: boolean;
}

export function processIO(signal: AbortSignal): CliIO {
  return {
    // Once the reader of stdout has left (EPIPE), what would go there is dropped: see main.ts.
    out: (text) => {
      if (!process.stdout.destroyed) process.stdout.write(`${redact(text)}\n`);
    },
    write: async (chunk) => {
      if (!process.stdout.destroyed && !process.stdout.write(redact(chunk))) await once(process.stdout, 'drain');
    },
    err: (text) => process.stderr.write(`${redact(text)}\n`),
    env: process.env,
    signal,
    tty: process.stderr.isTTY === true,
  };
}
