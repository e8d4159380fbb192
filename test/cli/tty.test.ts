// Progress as a person sees it: through a real pseudo-terminal (util-linux `script`, on every
// machine of this project), and as plain
// text outside a terminal. Runs the built binary (`npm test` builds first).
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const bin = new URL('../../bin/genpipe.js', import.meta.url).pathname;
const quickstart = new URL('../../pipelines/quickstart.yaml', import.meta.url).pathname;

describe('progress output', () => {
  it('in a terminal: one bar per step with done, failed and in-flight counts and ETA, and the spend against the budget', () => {
    const out = mkdtempSync(join(tmpdir(), 'genpipe-tty-'));
    // A 160-column terminal: cli-progress cuts bars to the terminal's width.
    const command = `stty cols 160 rows 40; exec ${process.execPath} ${bin} run ${quickstart} --emulator --out ${out}`;
    const result = spawnSync('script', ['-qefc', command, '/dev/null'], { encoding: 'utf8', timeout: 60_000 });
    expect(result.status).toBe(0);
    const screen = result.stdout;
    // A finished bar for the step, drawn with cursor control (it is a live terminal view), and the
    // run's spend on the line under the bars (test/cli/tty-width.test.ts reads the screen itself).
    expect(screen).toMatch(
      /cats\s+\[#{40}\] 6\/6 \| 0 failed \| 0 in flight \| ETA 0s(\u001b\[[0-9;]*[A-Za-z]|\s)*committed US\$0\.30 of US\$1\.00 budget/,
    );
    // Before the first instance finishes the ETA reads --, never cli-progress's NULL or INF.
    expect(screen).not.toMatch(/ETA (NULL|INF)/);
    expect(screen).toContain('\u001b[');
    expect(screen).toMatch(/quickstart \S+: completed; 6 completed, 0 failed/);
  });

  it('outside a terminal: plain lines, no escape codes, and the summary on stdout', () => {
    const out = mkdtempSync(join(tmpdir(), 'genpipe-notty-'));
    const result = spawnSync(process.execPath, [bin, 'run', quickstart, '--emulator', '--out', out, '--progress-interval', '1'], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(result.status).toBe(0);
    expect(result.stderr).toMatch(/^running quickstart: 6 instance\(s\) in /);
    // Any progress line (the run may end within the first second) is the plain one-line form.
    for (const line of result.stderr.split('\n').filter((l) => l.startsWith('progress: ')))
      expect(line).toMatch(/^progress: \d+\/6 done \(\d+ failed\), \d+ in flight, committed US\$[\d.]+( of US\$[\d.]+ budget)?, ETA \S+$/);
    expect(result.stderr + result.stdout).not.toContain('\u001b[');
    expect(result.stdout).toMatch(/^quickstart \S+: completed; 6 completed, 0 failed, 0 nsfw, 0 canceled; net US\$0\.30; [\d.]+ s; /);
  });

  it('--json-logs: one JSON run event per line on stdout', () => {
    const out = mkdtempSync(join(tmpdir(), 'genpipe-json-'));
    const result = spawnSync(process.execPath, [bin, 'run', quickstart, '--emulator', '--out', out, '--json-logs'], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(result.status).toBe(0);
    const events = result.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { type: string });
    expect(events[0]?.type).toBe('run_started');
    expect(events.filter((e) => e.type === 'instance_finished')).toHaveLength(6);
    expect(events.at(-1)?.type).toBe('run_finished');
  });
});
