/** One `genpipe <name>` command: its option tables, help and run (src/cli/options.ts). */
export type { Command } from './options.js';
