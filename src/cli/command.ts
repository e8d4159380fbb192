import type { CliIO } from './io.js';

/** One `genpipe <name>` command. Commands are registered in main.ts. */
export interface Command {
  name: string;
  /** One line for `genpipe --help`. */
  summary: string;
  /** Full text for `genpipe <name> --help`. */
  help: string;
  /** Returns the exit code; expected failures are thrown as GenpipeError. */
  run(argv: readonly string[], io: CliIO): Promise<number>;
}
