/**
 * A Prometheus server of the test's own (Debian's `prometheus` package, which `npm test` installs
 * when missing: scripts/ensure-test-deps.mjs), on 127.0.0.1 and a free port, with its storage in a
 * temporary folder, scraping the given targets every second. And `promtool check metrics`, from
 * the same package. A test never skips for want of them.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../free-port.js';

export interface PromTarget {
  job: string;
  /** host:port */
  address: string;
}

export interface TestPrometheus {
  url: string;
  /** One instant query through the HTTP API (/api/v1/query): each sample's labels and value. */
  query(expr: string): Promise<{ metric: Record<string, string>; value: number }[]>;
  /** Queries until `ok` holds of the samples, at most `timeoutMs`; returns the last samples (the caller asserts). */
  waitFor(
    expr: string,
    ok: (samples: { metric: Record<string, string>; value: number }[]) => boolean,
    timeoutMs?: number,
  ): Promise<{ metric: Record<string, string>; value: number }[]>;
  /** Kills it and removes its folder. */
  stop(): Promise<void>;
}

async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>, log: () => string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  // Bounded by the deadline.
  for (;;) {
    const got = await probe().catch(() => undefined);
    if (got !== undefined) return got;
    if (Date.now() > deadline) throw new Error(`${what} within ${timeoutMs} ms:\n${log()}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

export async function startPrometheus(targets: readonly PromTarget[]): Promise<TestPrometheus> {
  const dir = mkdtempSync(join(tmpdir(), 'genpipe-prometheus-'));
  const port = await freePort();
  const config = [
    'global:',
    '  scrape_interval: 1s',
    '  scrape_timeout: 1s',
    'scrape_configs:',
    ...targets.flatMap((t) => [`  - job_name: ${t.job}`, '    static_configs:', `      - targets: ['${t.address}']`]),
    '',
  ].join('\n');
  writeFileSync(join(dir, 'prometheus.yml'), config);
  const child: ChildProcess = spawn(
    'prometheus',
    [
      `--config.file=${join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  child.stdout?.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr?.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.once('error', (error) => (output += `\nprometheus could not be started (${error.message}); run node scripts/ensure-test-deps.mjs`));
  const url = `http://127.0.0.1:${port}`;
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await until(
      'prometheus was not ready',
      20_000,
      async () => ((await fetch(`${url}/-/ready`)).ok ? true : undefined),
      () => output,
    );
  } catch (error) {
    await stop();
    throw error;
  }
  const query = async (expr: string): Promise<{ metric: Record<string, string>; value: number }[]> => {
    const res = await fetch(`${url}/api/v1/query?query=${encodeURIComponent(expr)}`);
    const body = (await res.json()) as { status: string; data: { result: { metric: Record<string, string>; value: [number, string] }[] } };
    if (body.status !== 'success') throw new Error(`query ${expr}: ${JSON.stringify(body)}`);
    return body.data.result.map((r) => ({ metric: r.metric, value: Number(r.value[1]) }));
  };
  return {
    url,
    query,
    waitFor: async (expr, ok, timeoutMs = 20_000) => {
      let last: { metric: Record<string, string>; value: number }[] = [];
      try {
        return await until(
          `${expr} did not come true`,
          timeoutMs,
          async () => {
            last = await query(expr);
            return ok(last) ? last : undefined;
          },
          () => `last answer: ${JSON.stringify(last)}\n${output}`,
        );
      } catch {
        return last;
      }
    },
    stop,
  };
}

/** `promtool check metrics` on an exposition: its exit code and what it said. */
export function promtoolCheck(text: string): { status: number | null; output: string } {
  const result = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if (result.error) throw new Error(`promtool could not be run (${result.error.message}); run node scripts/ensure-test-deps.mjs`);
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}
