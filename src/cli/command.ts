import type { CliIO } from './io.js';

/** One `genpipe <name>` command. Commands are listed, with their one-line summary, in command-list.ts. */
export interface Command {
  name: string;
  /** Full text for `genpipe <name> --help`. */
  help: string;
  /** Returns the exit code; expected failures are thrown as GenpipeError. */
  run(argv: readonly string[], io: CliIO): Promise<number>;
}
