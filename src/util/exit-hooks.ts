/**
 * What must happen even when the process ends at once (a second Ctrl-C, a stop past its grace):
 * synchronous steps only, such as marking a run's lock released, so no stale lock is left behind. The session
 * registers them while it holds what they release; cli/main.ts runs them before process.exit.
 */
// One set per process, on globalThis: the CLI's bundle loads each command as a file of its own, and
// a module-level set would be one per file.
const KEY = Symbol.for('genpipe.hardExitHooks');
const hooks: Set<() => void> = ((globalThis as Record<symbol, unknown>)[KEY] ??= new Set<() => void>()) as Set<() => void>;

/** Registers `hook`; returns the function that removes it. */
export function onHardExit(hook: () => void): () => void {
  hooks.add(hook);
  return () => hooks.delete(hook);
}

/** Runs every registered hook once (a failing hook does not stop the others); false when there was none. */
export function runHardExitHooks(): boolean {
  const any = hooks.size > 0;
  for (const hook of [...hooks]) {
    hooks.delete(hook);
    try {
      hook();
    } catch {
      // Best effort: the process is ending; what was journaled is kept either way.
    }
  }
  return any;
}
