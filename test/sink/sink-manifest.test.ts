// `output: {sink: ...}` in a manifest: the short and long forms, in defaults or on
// a step, the prefix's run variables and vars, the object keys and public URLs they give, loopback
// path-style, and every bad sink refused by validate at file:line:col before anything runs.
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { CliIO } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { ManifestError } from '../../src/manifest/errors.js';
import { loadManifestText } from '../../src/manifest/load.js';
import { objectKey, publicUrl, resolveStepSinks, sinkPrefixWarnings, sinkUri } from '../../src/sink/sink-config.js';
import { startEmulator } from '../../src/emulator/index.js';
import { HF_KEY } from '../run/runner-helpers.js';

const RUN = { id: '20261127T030000Z-ab12', startedAt: new Date('2026-11-27T03:00:00.000Z') };

const manifest = (defaults: string, stepOutput = ''): string =>
  `version: 1\nname: t\nvars:\n  campaign: spring\nenv: [TEAM]\n${defaults}steps:\n  sheets:\n    model: character-sheet\n${stepOutput}    input:\n      tier: cats\n      brief: a cat\n  other:\n    model: character-sheet\n    input:\n      tier: dogs\n      brief: a dog\n`;

function problems(text: string): { line: number; col: number; path: string; message: string }[] {
  try {
    loadManifestText(text, 'm.yaml');
  } catch (error) {
    expect(error).toBeInstanceOf(ManifestError);
    return (error as ManifestError).problems.map((p) => ({ line: p.location.line, col: p.location.col, path: p.path, message: p.message }));
  }
  throw new Error('expected the manifest to be refused');
}

describe('a sink in the manifest', () => {
  it('short form in defaults: every step uses it, the prefix renders run variables and vars, keys are PREFIX/<path under outputs>', () => {
    const loaded = loadManifestText(
      manifest('defaults:\n  output:\n    sink: "s3://assets/{{ vars.campaign }}/{{ run.date }}/{{ run.id }}/"\n'),
      'm.yaml',
    );
    const sinks = resolveStepSinks(loaded, RUN, {});
    expect([...sinks.keys()]).toEqual(['sheets', 'other']);
    const config = sinks.get('sheets');
    expect(config).toEqual({
      bucket: 'assets',
      prefix: 'spring/2026-11-27/20261127T030000Z-ab12',
      endpoint: undefined,
      region: undefined,
      pathStyle: false,
      concurrency: 8,
      publicBaseUrl: undefined,
      readBack: 'when_needed',
      onConflict: 'fail',
      readBackMaxBytes: 64 * 1024 * 1024,
    });
    expect(sinks.get('other')).toBe(config);
    const key = objectKey(config as never, 'outputs/sheets/cat_seed=3.png');
    expect(key).toBe('spring/2026-11-27/20261127T030000Z-ab12/sheets/cat_seed=3.png');
    expect(sinkUri(config as never, key)).toBe('s3://assets/spring/2026-11-27/20261127T030000Z-ab12/sheets/cat_seed=3.png');
  });

  it('long form on a step overrides the defaults; a loopback endpoint means path-style; public URLs percent-encode each segment', () => {
    const loaded = loadManifestText(
      manifest(
        'defaults:\n  output:\n    sink: s3://assets\n',
        '    output:\n      sink:\n        url: "s3://cdn-bucket/{{ env.TEAM }}"\n        endpoint: http://127.0.0.1:9000\n        region: auto\n        concurrency: 3\n        public_base_url: "https://cdn.example.com/{{ env.TEAM }}/"\n',
      ),
      'm.yaml',
    );
    const sinks = resolveStepSinks(loaded, RUN, { TEAM: 'brand' });
    expect(sinks.get('sheets')).toEqual({
      bucket: 'cdn-bucket',
      prefix: 'brand',
      endpoint: 'http://127.0.0.1:9000',
      region: 'auto',
      pathStyle: true,
      concurrency: 3,
      publicBaseUrl: 'https://cdn.example.com/brand',
      readBack: 'when_needed',
      onConflict: 'fail',
      readBackMaxBytes: 64 * 1024 * 1024,
    });
    expect(sinks.get('other')).toMatchObject({ bucket: 'assets', prefix: '', pathStyle: false });
    expect(objectKey(sinks.get('other') as never, 'outputs/other/dog.png')).toBe('other/dog.png');
    expect(publicUrl(sinks.get('sheets') as never, 'outputs/sheets/a cat#1.png')).toBe(
      'https://cdn.example.com/brand/sheets/a%20cat%231.png',
    );
    // A loopback endpoint from the SDK's environment variables counts too.
    const fromEnv = resolveStepSinks(loadManifestText(manifest('defaults:\n  output:\n    sink: s3://assets/x\n'), 'm.yaml'), RUN, {
      AWS_ENDPOINT_URL_S3: 'http://localhost:9000',
    });
    expect(fromEnv.get('sheets')?.pathStyle).toBe(true);
  });

  it('a manifest without a sink resolves to none', () => {
    expect(resolveStepSinks(loadManifestText(manifest(''), 'm.yaml'), RUN, {}).size).toBe(0);
  });

  it('refuses a bad URL, an unknown field, a bad endpoint and a prefix that reads an axis, each at file:line:col', () => {
    expect(problems(manifest('defaults:\n  output:\n    sink: "s3:/assets/x"\n'))).toEqual([
      {
        line: 8,
        col: 11,
        path: 'defaults.output.sink',
        message: 'a sink URL is s3://BUCKET/PREFIX, the bucket 3 to 63 characters of a-z, 0-9, dots and hyphens',
      },
    ]);
    expect(problems(manifest('defaults:\n  output:\n    sink: "s3://Assets_Bucket/x"\n'))[0]).toMatchObject({ line: 8, col: 11 });
    expect(problems(manifest('defaults:\n  output:\n    sink: {url: "s3://assets", bukket: x, endpoint: "ftp://h"}\n'))).toEqual([
      {
        line: 8,
        col: 32,
        path: 'defaults.output.sink.bukket',
        message:
          'unknown key "bukket"; valid keys are url, endpoint, region, path_style, concurrency, public_base_url, read_back, on_conflict, read_back_max_bytes',
      },
      { line: 8, col: 53, path: 'defaults.output.sink.endpoint', message: 'endpoint is an http:// or https:// URL' },
    ]);
    expect(
      problems(manifest('', '    matrix: { seed: [1, 2] }\n    output:\n      sink: "s3://assets/{{ seed }}/{{ vars.campain }}"\n')),
    ).toEqual([
      {
        line: 11,
        col: 13,
        path: 'steps.sheets.output.sink',
        message: '{{ seed }}: a sink may read only run, vars and env, which are the same for every instance of a run',
      },
      { line: 11, col: 13, path: 'steps.sheets.output.sink', message: '{{ vars.campain }}: no var "campain"; did you mean "campaign"?' },
    ]);
  });

  it("the storage guide's R2 and MinIO examples are valid sinks", () => {
    const guide = readFileSync(new URL('../../docs/guides/storage.md', import.meta.url), 'utf8');
    // The fragments laid over an example manifest (`yaml manifest over=...`): their `defaults:` part.
    const examples = [...guide.matchAll(/```yaml manifest over=[^\n]*\n(?:(?!```)[\s\S])*?(defaults:[\s\S]*?)```/g)]
      .map((m) => m[1] as string)
      .filter((text) => !text.includes('steps:'));
    expect(examples).toHaveLength(2);
    const configs = examples.map((defaults) =>
      resolveStepSinks(loadManifestText(manifest(defaults.replace('vars.team', 'vars.campaign')), 'docs/guides/storage.md'), RUN, {}).get(
        'sheets',
      ),
    );
    expect(configs[0]).toMatchObject({
      bucket: 'campaign-assets',
      prefix: '2026-11-27',
      region: 'auto',
      publicBaseUrl: 'https://assets.example.com/2026-11-27',
    });
    expect(configs[1]).toMatchObject({
      bucket: 'genpipe',
      prefix: 'spring/20261127T030000Z-ab12',
      endpoint: 'http://127.0.0.1:9000',
      pathStyle: true,
    });
  });

  it('genpipe validate exits 2 naming the file, line and column of a bad sink', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'genpipe-sink-manifest-'));
    const path = join(dir, 'bad.yaml');
    writeFileSync(path, manifest('defaults:\n  output:\n    sink: {url: "s3://assets/x", path_stlye: true}\n'));
    const stderr: string[] = [];
    const io: CliIO = { out: () => {}, write: async () => {}, err: (t) => stderr.push(t), env: {}, signal: new AbortController().signal };
    expect(await main(['validate', path], io)).toBe(2);
    // The unset TEAM the manifest allow-lists is found in the same pass, not after the typo is fixed.
    expect(stderr[0]).toMatch(/\(2 problems; all listed below\)$/);
    expect(stderr).toContain(`  ${path}:8:34: defaults.output.sink.path_stlye: unknown key "path_stlye"; did you mean "path_style"?`);
  });

  it('a user name or password in the endpoint or public_base_url is refused at its line, by validate and run, with nothing sent', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'genpipe-sink-manifest-'));
    // Anything that reaches the store's endpoint is counted: it must stay at zero.
    let storeRequests = 0;
    const store = createServer((req, res) => {
      storeRequests++;
      res.writeHead(500).end();
    });
    await new Promise<void>((r) => store.listen(0, '127.0.0.1', r));
    const { port } = store.address() as { port: number };
    const emu = await startEmulator({ port: 0, timeScale: 0, log: () => {} });
    try {
      const cases = [
        [`{url: "s3://assets/x", endpoint: "http://minio:s3cret-pass@127.0.0.1:${port}"}`, 'endpoint'],
        [
          `{url: "s3://assets/x", endpoint: "http://127.0.0.1:${port}", public_base_url: "https://u:s3cret-pass@cdn.example.com/x"}`,
          'public_base_url',
        ],
      ] as const;
      for (const [sink, field] of cases) {
        // Line 8 is `    sink: {...}`; the problem is located at the field's value.
        const col = '    sink: '.length + sink.indexOf(`${field}: "`) + `${field}: `.length + 1;
        const path = join(dir, `${field}.yaml`);
        writeFileSync(path, manifest(`defaults:\n  output:\n    sink: ${sink}\n`));
        for (const command of ['validate', 'run'] as const) {
          const stderr: string[] = [];
          const out = mkdtempSync(join(tmpdir(), 'genpipe-sink-out-'));
          const io: CliIO = {
            out: () => {},
            write: async () => {},
            err: (t) => stderr.push(t),
            env: { GENPIPE_BASE_URL: emu.url, HF_KEY, TEAM: 'brand' },
            signal: new AbortController().signal,
          };
          const args = command === 'run' ? ['run', path, '--out', out, '--quiet'] : ['validate', path];
          expect(await main(args, io), `${command} ${field}`).toBe(2);
          expect(stderr.join('\n')).toContain(
            `${path}:8:${col}: defaults.output.sink.${field}: the ${field} carries a user name or password;`,
          );
          expect(stderr.join('\n')).not.toContain('s3cret');
          // Refused before a run directory exists: the manifest (and its password) is copied nowhere.
          expect(readdirSync(out)).toEqual([]);
        }
      }
      expect(storeRequests).toBe(0);
      expect(emu.requests.byId.size).toBe(0);
    } finally {
      await emu.close();
      await new Promise((r) => store.close(r));
    }
  });
});

describe("a sink's on_conflict and the prefix two runs can share", () => {
  it('on_conflict is fail by default, or skip or overwrite; another value is refused at file:line:col', () => {
    const config = (sink: string) =>
      resolveStepSinks(loadManifestText(manifest(`defaults:\n  output:\n    sink: ${sink}\n`), 'm.yaml'), RUN).get('sheets');
    expect(config('"s3://assets/{{ run.id }}"')?.onConflict).toBe('fail');
    expect(config('{url: "s3://assets/{{ run.id }}", on_conflict: skip}')?.onConflict).toBe('skip');
    expect(config('{url: "s3://assets/{{ run.id }}", on_conflict: overwrite}')?.onConflict).toBe('overwrite');
    expect(problems(manifest('defaults:\n  output:\n    sink: {url: "s3://assets/x", on_conflict: replace}\n'))).toEqual([
      {
        line: 8,
        col: 47,
        path: 'defaults.output.sink.on_conflict',
        message: expect.stringContaining('fail, skip, overwrite'),
      },
    ]);
    expect(problems(manifest('defaults:\n  output:\n    sink: {url: "s3://assets/x", read_back: sometimes}\n'))[0]).toMatchObject({
      line: 8,
      col: 45,
      path: 'defaults.output.sink.read_back',
    });
  });

  it('warns, naming the collision, when a prefix has no {{ run.id }}', () => {
    const warnings = (sink: string) =>
      sinkPrefixWarnings(loadManifestText(manifest(`defaults:\n  output:\n    sink: ${sink}\n`), 'm.yaml'));
    expect(warnings('"s3://assets/{{ vars.campaign }}/{{ run.id }}"')).toEqual([]);
    expect(warnings('"s3://assets/drops/{{ run.date }}"')).toEqual([
      "warning: the sink s3://assets/drops/{{ run.date }} has no {{ run.id }} in its prefix, so two runs on the same day (a rerun, a schedule tick, another pipeline with the same step names) write the same keys: the later run's uploads stop as conflicts, nothing overwritten (on_conflict: fail).",
    ]);
    expect(warnings('{url: "s3://assets/fixed", on_conflict: overwrite}')).toEqual([
      "warning: the sink s3://assets/fixed has no {{ run.id }} in its prefix, so every run (and any pipeline with the same step names) writes the same keys: the later run replaces the earlier run's objects (on_conflict: overwrite).",
    ]);
    // The bucket's name is not the prefix: a bucket called run.id does not count.
    expect(warnings('"s3://assets"')).toHaveLength(1);
  });

  it('plan prints the warning', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'genpipe-sink-plan-'));
    const file = join(dir, 'm.yaml');
    writeFileSync(file, manifest('defaults:\n  output:\n    sink: "s3://assets/drops/{{ run.date }}"\n'));
    const out: string[] = [];
    const io: CliIO = {
      out: (t) => out.push(t),
      write: async () => {},
      err: (t) => out.push(t),
      env: { TEAM: 'a' },
      signal: new AbortController().signal,
    };
    expect(await main(['plan', file], io), out.join('\n')).toBe(0);
    expect(out.join('\n')).toContain('warning: the sink s3://assets/drops/{{ run.date }} has no {{ run.id }} in its prefix');
  });

  it('genpipe validate exits 2 on a bad on_conflict, at its file:line:col', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'genpipe-sink-manifest-'));
    const path = join(dir, 'bad.yaml');
    writeFileSync(path, manifest('defaults:\n  output:\n    sink: {url: "s3://assets/x", on_conflict: replace}\n'));
    const stderr: string[] = [];
    const io: CliIO = {
      out: () => {},
      write: async () => {},
      err: (t) => stderr.push(t),
      env: { TEAM: 'brand' },
      signal: new AbortController().signal,
    };
    expect(await main(['validate', path], io)).toBe(2);
    expect(stderr[0]).toMatch(
      new RegExp(`^genpipe: ${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:8:47: defaults\\.output\\.sink\\.on_conflict: `),
    );
  });
});
