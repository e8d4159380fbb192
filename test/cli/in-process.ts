// genpipe's CLI run in this process (main() with an io that collects what it prints), for tests
// that need the command's exit code and words without spawning a child.
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';

export interface InProcessRun {
  code: number;
  out: string;
  err: string;
}

/** Runs `genpipe ARGS` with exactly `env` as its environment; stdout and stderr come back as text. */
export async function runInProcess(
  args: readonly string[],
  env: Record<string, string | undefined>,
  signal = new AbortController().signal,
): Promise<InProcessRun> {
  let out = '';
  let err = '';
  const io: CliIO = {
    out: (t) => (out += `${t}\n`),
    write: async (t) => void (out += t),
    err: (t) => (err += `${t}\n`),
    env,
    signal,
  };
  const code = await main([...args], io);
  return { code, out, err };
}
