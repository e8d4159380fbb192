/**
 * Vitest's global setup: every test's temporary files, and those of the genpipe processes, emulators
 * and Redis servers the tests start, go under one directory of this test run (TMPDIR, which
 * `os.tmpdir()` reads and the workers inherit), removed when the run ends. Without it a run left
 * about 25 directories and 560 files in the system's temporary folder, since most test files make
 * theirs with mkdtemp and never remove them.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export default function setup(): () => void {
  const root = mkdtempSync(join(tmpdir(), 'genpipe-test-'));
  const previous = process.env.TMPDIR;
  process.env.TMPDIR = root;
  return () => {
    if (previous === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = previous;
    rmSync(root, { recursive: true, force: true });
  };
}
