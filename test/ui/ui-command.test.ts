// `genpipe ui` as a command: its first line is the address, --port 0 takes a free port, and with
// no --out it shows the folders of `runs_dirs:` in the config file.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { cleanTemps, tempDir } from '../run/runner-helpers.js';

afterAll(() => cleanTemps());

describe('genpipe ui', () => {
  it('prints "listening on" first and shows runs_dirs of the config file', { timeout: 30_000 }, async () => {
    const dir = tempDir();
    const first = join(dir, 'a');
    const second = join(dir, 'b');
    for (const [root, id] of [
      [first, '20261201T020000Z-0001'],
      [second, '20261202T020000Z-0002'],
    ] as const) {
      mkdirSync(join(root, 'nightly'), { recursive: true });
      writeFileSync(
        join(root, 'nightly', 'not-started.jsonl'),
        `${JSON.stringify({ id, at: '2026-12-01T02:00:00.000Z', status: 'refused', exit_code: 2, reason: 'No service address is set.' })}\n`,
      );
    }
    const config = join(dir, 'config.yaml');
    writeFileSync(config, `runs_dirs: [${first}, ${second}]\n`);
    const lines: string[] = [];
    const stop = new AbortController();
    let listening: (url: string) => void = () => {};
    const url = new Promise<string>((resolve) => (listening = resolve));
    const io: CliIO = {
      out: (text) => {
        lines.push(text);
        const match = /^listening on (http:\/\/127\.0\.0\.1:\d+)$/.exec(text);
        if (match) listening(match[1]!);
      },
      write: async () => {},
      err: (text) => lines.push(`stderr: ${text}`),
      env: { HOME: dir },
      signal: stop.signal,
    };
    const exit = main(['ui', '--config', config, '--port', '0'], io);
    const address = await url;
    expect(lines[0]).toBe(`listening on ${address}`);
    expect(Number(new URL(address).port)).toBeGreaterThan(0);
    const runs = (await (await fetch(`${address}/api/runs`)).json()) as { runId: string; status: string }[];
    expect(runs.map((r) => r.runId)).toEqual(['20261202T020000Z-0002', '20261201T020000Z-0001']);
    expect(runs[0]!.status).toBe('refused: no service address is set');
    // /metrics is mounted, under the same rules: the refused tick is counted by its first word.
    const metrics = await fetch(`${address}/metrics`);
    expect(metrics.status).toBe(200);
    expect(metrics.headers.get('x-frame-options')).toBe('DENY');
    expect(await metrics.text()).toMatch(/^genpipe_runs\{[^}]*status="refused"[^}]*\} 2$/m);
    // On loopback no token is printed.
    expect(lines.some((l) => l.includes('token'))).toBe(false);
    stop.abort();
    expect(await exit).toBe(0);
  });
});
