// These tests run the built binary (bin/genpipe.js -> dist/), as a user does; `npm test` builds first.
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';

const bin = new URL('../../bin/genpipe.js', import.meta.url).pathname;
const bulk = new URL('../../pipelines/bulk-characters.yaml', import.meta.url).pathname;

function run(args: string[], closeStdoutAfterFirstChunk: boolean): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [bin, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.stdout.once('data', () => {
      if (closeStdoutAfterFirstChunk) child.stdout.destroy();
    });
    child.stdout.on('data', () => {});
    child.on('close', (code) => resolve({ code, stderr }));
  });
}

describe('the genpipe process', () => {
  it('stops quietly when its reader goes away (genpipe plan --json | head)', async () => {
    const { code, stderr } = await run(['plan', bulk, '--json'], true);
    expect(stderr).toBe('');
    expect(code).toBe(0);
  });

  it('exits 2 with one sentence and no stack trace for an unknown command', async () => {
    const { code, stderr } = await run(['nope'], false);
    expect(code).toBe(2);
    expect(stderr).toBe('genpipe: Unknown command "nope"; run genpipe --help for the list.\n');
  });
});
