// Commands the doc tests start as their own processes, as a reader starts each in a terminal or on
// a host: started, waited for until they answer, and stopped at the end. Shared by the README's
// local fleet (fleet-recipe.test.ts) and the fleet guide's `sh hosts` blocks (doc-examples.test.ts).
import { spawn, type ChildProcess } from 'node:child_process';

export interface Proc {
  child: ChildProcess;
  /** Its stdout and stderr so far, interleaved. */
  output(): string;
  /** Its exit code (null after a signal). */
  exited: Promise<number | null>;
}

/** Runs `command` with bash (exec'd, so a signal reaches it), its process added to `started`. */
export function start(command: string, cwd: string, env: NodeJS.ProcessEnv, started: ChildProcess[]): Proc {
  const child = spawn('bash', ['-c', `exec ${command}`], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  started.push(child);
  let out = '';
  child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  return { child, output: () => out, exited };
}

/** Waits until `what` holds, checking every 100 ms; throws with `label` after `ms`. */
export async function until(what: () => boolean | Promise<boolean>, ms: number, label: string): Promise<void> {
  const end = Date.now() + ms;
  // Bounded by the deadline.
  while (!(await what())) {
    if (Date.now() > end) throw new Error(`not within ${ms} ms: ${label}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** SIGKILLs every process of `started` still running, and empties the list once they are gone. */
export async function stopAll(started: ChildProcess[]): Promise<void> {
  await Promise.all(
    started.splice(0).map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once('close', () => resolve());
          child.kill('SIGKILL');
        }),
    ),
  );
}
