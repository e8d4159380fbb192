// The layers of src/: the folders each one must not import from, read by both guards of the rule,
// scripts/check-cycles.mjs (resolved paths, dynamic imports too) and eslint.config.js
// (no-restricted-imports, in the editor). run/ never imports its views or its callers, so what shows a run cannot change it;
// the emulator stands alone, so it never imports the runner, the planner or their callers.
export const ABOVE = {
  run: ['gallery', 'review', 'report', 'session', 'cli'],
  emulator: ['run', 'plan', 'session', 'cli'],
  // sink/ is called by run/ (the driver uploads) and the session (the preflight): never the other way.
  sink: ['gallery', 'review', 'report', 'session', 'cli'],
  // The session is the library under every entry point: the CLI calls it, never the other way.
  session: ['cli'],
  // genpipe ui shows runs and starts remakes as child processes: the CLI calls it, never the other way.
  ui: ['cli'],
};
