import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { GenpipeError } from '../api/errors.js';
import { redactEveryForm, redactBytes } from '../util/redact.js';
import { terminalSafe } from '../util/terminal-text.js';

/** Where a command writes; injected so that tests read what a user would see. */
export interface CliIO {
  out(text: string): void;
  /** Writes a chunk to stdout without a newline, waiting while the pipe is full (large outputs). */
  write(chunk: string): Promise<void>;
  /**
   * The same for UTF-8 bytes (a whole number of characters), where stdout takes them as they are;
   * without it, callers decode them and use `write`.
   */
  writeBytes?(chunk: Buffer): Promise<void>;
  err(text: string): void;
  env: NodeJS.ProcessEnv;
  /** Fires on Ctrl-C or SIGTERM. */
  signal: AbortSignal;
  /** True when stderr is a terminal: progress bars instead of lines. */
  tty?: boolean;
  /**
   * Asks a person a question and resolves with the line they type (without its newline; empty
   * when the input ends first). Present only when someone can answer: stdin is a terminal.
   */
  prompt?: (question: string) => Promise<string>;
  /**
   * Told a run's directory as soon as it exists or is resumed (a worker coordinating a scheduled
   * run records it in Redis, so another worker can resume that very run if this one dies).
   */
  onRunDir?: (runDir: string) => Promise<void>;
}

/** Writes UTF-8 bytes to stdout: as they are where the IO takes bytes, else decoded. */
export function writeBytes(io: CliIO, chunk: Buffer): Promise<void> {
  return io.writeBytes ? io.writeBytes(chunk) : io.write(chunk.toString('utf8'));
}

export function processIO(signal: AbortSignal): CliIO {
  return {
    // Once the reader of stdout has left (EPIPE), what would go there is dropped: see main.ts.
    // Lines for a person (or JSON lines): control characters made visible (terminal-text.ts). The
    // chunks of write and writeBytes are a command's data (a CSV, a JSON document), left as they are.
    out: (text) => {
      if (!process.stdout.destroyed) process.stdout.write(`${terminalSafe(redactEveryForm(text))}\n`);
    },
    write: async (chunk) => {
      if (!process.stdout.destroyed && !process.stdout.write(redactEveryForm(chunk))) await once(process.stdout, 'drain');
    },
    writeBytes: async (chunk) => {
      if (!process.stdout.destroyed && !process.stdout.write(redactBytes(chunk))) await once(process.stdout, 'drain');
    },
    err: (text) => process.stderr.write(`${terminalSafe(redactEveryForm(text))}\n`),
    env: process.env,
    signal,
    tty: process.stderr.isTTY === true,
    ...(process.stdin.isTTY === true ? { prompt: (question: string) => askOnTerminal(question, signal) } : {}),
  };
}

/**
 * One line from the terminal. The question goes to stderr, so that stdout stays the command's
 * output. The terminal stays in its cooked mode (`terminal: false`): it echoes what is typed,
 * and Ctrl-C is the usual SIGINT, which aborts `signal`.
 */
function askOnTerminal(question: string, signal: AbortSignal): Promise<string> {
  return new Promise((resolve, reject) => {
    const rl = createInterface({ input: process.stdin, terminal: false });
    let settled = false;
    const settle = (finish: () => void): void => {
      if (settled) return;
      settled = true;
      signal.removeEventListener('abort', onAbort);
      rl.close();
      finish();
    };
    const onAbort = (): void =>
      settle(() => {
        process.stderr.write('\n'); // the answer's line was never ended
        reject(new GenpipeError('aborted', 'Interrupted before the run started; nothing was sent.'));
      });
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    rl.once('line', (line) => settle(() => resolve(line)));
    rl.once('close', () => settle(() => resolve('')));
    process.stderr.write(`${question} `);
  });
}
